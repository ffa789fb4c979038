"""The benchmark suite behind ``make bench``: every benchmark in one run, one JSON, one table, one plot page.

    PYTHONPATH=. .venv/bin/python -m benchmarks.suite --shared ../shared --out bench-results

Runs, each in its own process (a failing part is recorded as ``{"error": ...}`` and the rest goes on):

* ``trim``: ../shared/bench/peers_bench.py with the reference peers (floor, floor-hysteresis),
  langchain ``trim_messages`` with exact (tiktoken) counts, AutoGen
  ``TokenLimitedChatCompletionContext``, LlamaIndex ``ChatMemoryBuffer`` and contextwarden, at
  N=1,000 in both windows (the harness's time budget per cell), plus floor, floor-hysteresis and
  contextwarden at N=5,000. The section holds each harness run's settings and versions (``runs``) and all the ``cells``.
* ``probes``: ``contextwarden bench probes`` on the tau-bench airline and coding dev traces; one
  entry per data set, keyed by file name, each in the command's JSON layout.
* ``locomo``: ``contextwarden bench locomo`` on the dev file (MiniLM embedder, no ablation).
* ``stores``: ``contextwarden bench stores`` (Redis and Postgres from the default URLs).

Run from a clone without ``--shared`` data, probes and locomo use the package's sample data and
trim is recorded as an error naming what is missing.

Writes ``OUT/latest.json`` (with the date, machine and load before and after), ``OUT/latest.md``
(the tables, as pasted into the README) and ``OUT/latest.html`` (per-turn latency of every trim
peer, and per-turn utilization of contextwarden on the same session).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import report

TRIM_PEERS = "floor,floor-hysteresis,langchain-tiktoken,autogen-token,llama-buffer,contextwarden,contextwarden-tiktoken"
TRIM_LARGE_PEERS = "floor,floor-hysteresis,contextwarden,contextwarden-tiktoken"
ADAPTERS = ("benchmarks.peers_adapter:ContextWardenPeer", "benchmarks.peers_adapter:ContextWardenTiktokenPeer")
"""contextwarden as the default install counts (GitHub's BPE engine), and counting with tiktoken as the floor does."""


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - platforms without getloadavg
        return []


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu or platform.processor(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


VERSIONED = (
    "contextwarden",
    "tiktoken",
    "bpe-openai",
    "langchain-core",
    "autogen-core",
    "llama-index-core",
    "redis",
    "psycopg",
)
"""Packages whose versions a result records (those installed)."""


def versions() -> dict[str, str]:
    """Versions of contextwarden and of the packages the benchmarks measure or compare with."""
    from importlib import metadata

    found: dict[str, str] = {}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def _run(name: str, args: list[str], *, timeout: float, root: Path) -> tuple[int, float]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    print(f"[suite] {name}: {' '.join(args)}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    try:
        code = subprocess.call(args, cwd=root, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        code = -1
    return code, time.perf_counter() - started


def _read(path: Path, name: str, code: int) -> Any:
    if code == 0 and path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    return {"error": f"{name} exited with code {code}" + (" (timeout)" if code == -1 else "")}


def run_trim(harness: Path, work: Path, root: Path, budget_s: float) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    errors: list[str] = []
    plan = [("n1000", TRIM_PEERS, "1000"), ("n5000", TRIM_LARGE_PEERS, "5000")]
    for tag, peers, sizes in plan:
        out = work / f"trim-{tag}.json"
        args = [sys.executable, str(harness), *(a for adapter in ADAPTERS for a in ("--adapter", adapter))]
        args += ["--peers", peers, "--sizes", sizes]
        args += ["--window", "128000,32000", "--budget-s", str(budget_s), "--no-tokenizer-floor", "--json", str(out)]
        code, _ = _run(f"trim {tag}", args, timeout=3600, root=root)
        data = _read(out, f"peers_bench {tag}", code)
        if "error" in data:
            errors.append(data["error"])
        else:
            runs.append(data)
    cells = [c for r in runs for c in r.get("cells", [])]
    meta = [{k: v for k, v in r.items() if k != "cells"} for r in runs]  # versions, seed, budget of each run
    section: dict[str, Any] = {"harness": str(harness), "runs": meta, "cells": cells}
    if errors:
        section["errors"] = errors
    section["targets"] = report.trim_targets(cells)
    return section


def run_cli(name: str, args: list[str], out: Path, root: Path, timeout: float) -> Any:
    cmd = [sys.executable, "-m", "contextwarden", "bench", *args, "--json", str(out)]
    code, seconds = _run(name, cmd, timeout=timeout, root=root)
    data = _read(out, f"bench {name}", code)
    if isinstance(data, dict):
        data.setdefault("suite_seconds", round(seconds, 1))
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=Path("../shared"), help="The shared folder (bench, datasets).")
    ap.add_argument("--out", type=Path, default=Path("bench-results"), help="Where latest.{json,md,html} go.")
    ap.add_argument("--budget-s", type=float, default=60.0, help="The harness's time budget per trim cell.")
    ap.add_argument(
        "--only", default="trim,probes,locomo,stores", help="Comma list of parts to run (the others are left out)."
    )
    ap.add_argument(
        "--report-only", action="store_true", help="Rewrite latest.md and latest.html from OUT/latest.json only."
    )
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    shared = args.shared.resolve()
    out_dir = args.out.resolve()
    if args.report_only:
        return write_report(out_dir, json.loads((out_dir / "latest.json").read_text(encoding="utf-8")))
    work = out_dir / "parts"
    work.mkdir(parents=True, exist_ok=True)
    parts = {p.strip() for p in args.only.split(",") if p.strip()}
    data_dir = shared / "datasets"
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "versions": versions(),
        "load_before": _load(),
    }
    started = time.perf_counter()
    harness = shared / "bench" / "peers_bench.py"
    if "trim" in parts:
        if harness.is_file():
            result["trim"] = run_trim(harness, work, root, args.budget_s)
        else:
            result["trim"] = {"error": f"{harness} not found: pass --shared DIR holding bench/peers_bench.py"}
    if "probes" in parts:
        probes: dict[str, Any] = {}
        for name, budgets in (("tau-airline-dev.jsonl", "2000,3000,4000"), ("coding-dev.jsonl", "4000,8000,16000")):
            data = data_dir / "probe-traces" / name
            if not data.is_file():
                continue
            probes[name] = run_cli(
                f"probes {name}", ["probes", "--data", str(data), "--budgets", budgets],
                work / f"probes-{name}.json", root, timeout=1800,
            )  # fmt: skip
        if not probes:  # a clone without the data sets: the packaged sample shows the command works
            probes["sample: probe-traces.jsonl"] = run_cli(
                "probes sample", ["probes"], work / "probes-sample.json", root, timeout=1800
            )
        result["probes"] = probes
    if "locomo" in parts:
        data = data_dir / "locomo" / "locomo-dev.json"
        given = ["--data", str(data)] if data.is_file() else []  # else the packaged sample
        args_locomo = ["locomo", *given, "--no-ablation"]
        result["locomo"] = run_cli("locomo", args_locomo, work / "locomo.json", root, timeout=3600)
    if "stores" in parts:
        result["stores"] = run_cli("stores", ["stores"], work / "stores.json", root, timeout=1800)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["load_after"] = _load()
    if "trim" in parts and harness.is_file():
        result["utilization"] = report.utilization_series(harness)
    return write_report(out_dir, result)


def write_report(out_dir: Path, result: dict[str, Any]) -> int:
    """Write latest.json (trim targets recomputed from its cells), latest.md and latest.html."""
    trim = result.get("trim")
    if isinstance(trim, dict) and "cells" in trim:
        trim["targets"] = report.trim_targets(trim["cells"])
    (out_dir / "latest.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (out_dir / "latest.md").write_text(report.markdown(result), encoding="utf-8")
    (out_dir / "latest.html").write_text(report.html_page(result), encoding="utf-8")
    print(report.markdown(result))
    print(f"[suite] wrote {out_dir}/latest.json, latest.md, latest.html", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

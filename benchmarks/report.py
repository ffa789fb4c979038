"""Tables and plots of the benchmark suite (see `benchmarks.suite`): Markdown for the README, one HTML page."""

from __future__ import annotations

import html
import importlib.util
import sys
from pathlib import Path
from typing import Any

from contextwarden.replay.report import CSS, line_chart

TARGET_RATIO = 100.0
"""contextwarden's total session time at N=1,000 must be this many times lower than langchain's (exact counts)."""


def _cell(cells: list[dict[str, Any]], peer: str, size: int, window: int) -> dict[str, Any] | None:
    return next((c for c in cells if c["peer"] == peer and c["size"] == size and c["window"] == window), None)


def _total(cell: dict[str, Any]) -> tuple[float, bool]:
    """A cell's total session seconds, and whether it is a lower bound (the cell hit its time budget)."""
    if cell.get("timed_out"):
        est = cell.get("est_total_s")
        return (float(est), False) if est else (float(cell["total_s"]), True)
    return float(cell["total_s"]), False


def trim_targets(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """langchain trim_messages (exact counts) total time / contextwarden's, at N=1,000, per window."""
    out: dict[str, Any] = {}
    for window in sorted({c["window"] for c in cells if c["size"] == 1000}, reverse=True):
        cw = _cell(cells, "contextwarden", 1000, window)
        lc = _cell(cells, "langchain-tiktoken", 1000, window)
        if cw is None or lc is None or not cw.get("total_s"):
            continue
        lc_s, lower = _total(lc)
        ratio = lc_s / float(cw["total_s"])
        # The same turns on both sides: a cell that hit its time budget ran only the first k turns.
        # langchain's turn cost grows with the history and contextwarden's does not, so this ratio
        # is also a lower bound of the full sessions' ratio.
        k = min(len(lc.get("lat_ms") or []), len(cw.get("lat_ms") or []))
        cw_k = sum((cw.get("lat_ms") or [])[:k])
        same = sum((lc.get("lat_ms") or [])[:k]) / cw_k if k and cw_k else None
        out[str(window)] = {
            "contextwarden_s": round(float(cw["total_s"]), 4),
            "langchain_s": round(lc_s, 3),
            "langchain_estimated": bool(lc.get("timed_out") and lc.get("est_total_s")),
            "ratio": round(ratio, 1),
            "ratio_is_lower_bound": lower,
            "same_turns": k,
            "ratio_same_turns": None if same is None else round(same, 1),
            "target": TARGET_RATIO,
            "met": ratio >= TARGET_RATIO or (lower and same is not None and same >= TARGET_RATIO),
        }
    return out


def _harness(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("peers_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("peers_bench", module)
    spec.loader.exec_module(module)
    return module


def utilization_series(harness: Path, *, size: int = 1000, seed: int = 20240601) -> dict[str, Any]:
    """contextwarden's utilization per turn on the trim workload (the adapter's session), per window."""
    from contextwarden.session import Session
    from contextwarden.tokens import get_counter

    from .peers_adapter import _to_message

    try:
        bench = _harness(harness)
        canon, rounds = bench.build_conversation(size, seed)
    except Exception as exc:  # the plot is a by-product: never lose the run for it
        return {"error": f"{type(exc).__name__}: {exc}"}
    messages = [_to_message(m) for m in canon]
    out: dict[str, Any] = {}
    for window in (128_000, 32_000):
        session = Session("util", window=window, reserved_output=0, counter=get_counter("tiktoken:cl100k_base"))
        ratios: list[float] = []
        for start, end in rounds:
            session.add(messages[start:end])
            ratios.append(session.prepare(format="internal").status.ratio)
        out[str(window)] = ratios
    return out


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.3g}" if v < 10 else f"{v:,.0f}"


def _trim_table(section: dict[str, Any]) -> list[str]:
    cells = section.get("cells", [])
    lines = [
        "| peer | N | window | turns | total s | p50 ms | p99 ms | vs floor | vs contextwarden | prefix reuse | "
        "sys kept / pairs ok / fits |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        floor = _cell(cells, "floor", c["size"], c["window"])
        cw = _cell(cells, "contextwarden", c["size"], c["window"])
        total, lower = _total(c)
        mark = ">" if lower else ""
        est = " (est.)" if c.get("timed_out") and not lower else ""
        vs_floor = f"{mark}{total / floor['total_s']:,.1f}x" if floor and floor.get("total_s") else "-"
        vs_cw = f"{mark}{total / cw['total_s']:,.1f}x" if cw and cw.get("total_s") else "-"
        final = c.get("final") or {}
        checks = "/".join(
            "yes" if ok else "NO"
            for ok in (
                not c.get("turns_system_dropped"),
                not c.get("turns_pairs_broken"),
                not c.get("turns_over_window"),
            )
        )
        if not final:
            checks = "-"
        lines.append(
            f"| {c['peer']} | {c['size']:,} | {c['window'] // 1000}k | {c['turns_done']}/{c['turns_total']} | "
            f"{mark}{total:,.3f}{est} | {_ms(c.get('p50_ms'))} | {_ms(c.get('p99_ms'))} | {vs_floor} | {vs_cw} | "
            f"{c.get('prefix_reuse', '-')} | {checks} |"
        )
    return lines


def headline(result: dict[str, Any]) -> str:
    """The README's table: the trim workload at N=1,000 in both windows, probe retention, memory recall."""
    m = result.get("machine", {})
    lines = [
        "| workload | contextwarden | reference |",
        "|---|---|---|",
    ]
    trim = result.get("trim")
    if isinstance(trim, dict):
        for window, t in trim.get("targets", {}).items():
            cw = _cell(trim.get("cells", []), "contextwarden", 1000, int(window))
            if cw is None:
                continue
            bound = ">" if t["ratio_is_lower_bound"] else ""
            lines.append(
                f"| trim a 1,000-message session (275 turns), {int(window) // 1000}k window | {cw['total_s']:.2f} s, "
                f"p99 {_ms(cw.get('p99_ms'))} ms per turn, prefix reuse {cw.get('prefix_reuse', '-')} | "
                f"langchain `trim_messages` {bound}{t['langchain_s']:,.1f} s ({bound}{t['ratio']:,.0f}x slower) |"
            )
    probes = result.get("probes")
    if isinstance(probes, dict):
        for name, data in probes.items():
            if "error" in data or not data.get("budgets"):
                continue
            budgets = sorted(data["budgets"], key=int)
            low = data["budgets"][budgets[0]]
            lines.append(
                f"| probe facts kept in view, `{name}` | {low['retention']:.3f} at {int(budgets[0]):,} tokens | "
                f"all pairs intact: {'yes' if all(r['all_pairs_ok'] for r in data['budgets'].values()) else 'no'} |"
            )
    locomo = result.get("locomo")
    if isinstance(locomo, dict) and "budgets" in locomo:
        row = ", ".join(f"{locomo['budgets'][b]['evidence_recall']:.3f} at {int(b):,}" for b in locomo["budgets"])
        lines.append(f"| LoCoMo evidence recall (memory) | {row} tokens | |")
    lines += [
        "",
        f"Measured {result.get('date')} on {m.get('cpus')} CPUs ({m.get('cpu')}), Python {m.get('python')}"
        " (`bench-results/latest.json`).",
    ]
    return "\n".join(lines) + "\n"


def markdown(result: dict[str, Any]) -> str:
    """The suite's tables in Markdown."""
    m = result.get("machine", {})
    lines = [
        f"Measured {result.get('date')} on {m.get('cpus')} CPUs ({m.get('cpu')}), Python {m.get('python')}; "
        f"load average before {result.get('load_before')}, after {result.get('load_after')}.",
        "",
    ]
    trim = result.get("trim")
    if isinstance(trim, dict):
        lines += ["**trim** (peers_bench.py; total session time, per-turn latency, correctness on every turn)", ""]
        if "error" in trim:
            lines.append(str(trim["error"]))
        lines += _trim_table(trim)
        for window, t in trim.get("targets", {}).items():
            bound = " (lower bound: langchain hit the time budget)" if t["ratio_is_lower_bound"] else ""
            verdict = "met" if t["met"] else "NOT met"
            same = ""
            if t.get("ratio_same_turns") is not None and t["ratio_is_lower_bound"]:
                same = f"; over the {t['same_turns']} turns both ran: **{t['ratio_same_turns']:,.0f}x**"
            lines.append(
                f"\nN=1,000, {int(window) // 1000}k window: langchain trim_messages (exact counts) "
                f"{t['langchain_s']:,.1f} s vs contextwarden {t['contextwarden_s']:.3f} s = "
                f"**{t['ratio']:,.0f}x**{bound}{same}; target ≥{t['target']:.0f}x {verdict}."
            )
        lines.append("")
    probes = result.get("probes")
    if isinstance(probes, dict):
        lines += [
            "**probes** (share of probe facts in the view)",
            "",
            "| data | budget | retention | all fit | pairs ok |",
        ]
        lines.append("|---|---|---|---|---|")
        for name, data in probes.items():
            if "error" in data:
                lines.append(f"| {name} | - | {data['error']} | | |")
                continue
            for budget, row in data["budgets"].items():
                lines.append(
                    f"| {name} | {budget} | {row['retention']:.3f} | {row['all_fit']} | {row['all_pairs_ok']} |"
                )
        lines.append("")
    locomo = result.get("locomo")
    if isinstance(locomo, dict):
        lines += ["**locomo** (memory recall; the question alone recalls)", ""]
        if "error" in locomo:
            lines.append(locomo["error"])
        else:
            lines += [
                "| budget | evidence recall | all evidence | answer containment | questions |",
                "|---|---|---|---|---|",
            ]
            for budget, row in locomo["budgets"].items():
                lines.append(
                    f"| {budget} | {row['evidence_recall']:.3f} | {row['all_evidence']:.3f} | "
                    f"{row['answer_containment']:.3f} | {row['questions']} |"
                )
        lines.append("")
    stores = result.get("stores")
    if isinstance(stores, dict):
        lines += ["**stores** (10,000 messages appended, 5,000 loaded, 1,000 state saves)", ""]
        if "error" in stores:
            lines.append(stores["error"])
        else:
            lines.append("| backend | append msg/s | load 5,000 ms | CAS p99 ms |")
            lines.append("|---|---|---|---|")
            for name, row in stores.get("backends", {}).items():
                if "error" in row:
                    lines.append(f"| {name} | {row['error']} | | |")
                    continue
                append, load, cas = row["append_msgs_per_s"], row["load_5000_ms"], row["cas_p99_ms"]
                lines.append(f"| {name} | {append:,.0f} | {load:.1f} | {cas:.2f} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def html_page(result: dict[str, Any]) -> str:
    """Per-turn latency of each trim peer (log scale) and contextwarden's per-turn utilization."""
    charts: list[str] = []
    trim = result.get("trim")
    if isinstance(trim, dict):
        for size in sorted({c["size"] for c in trim.get("cells", [])}):
            for window in sorted({c["window"] for c in trim.get("cells", [])}, reverse=True):
                series = {
                    c["peer"]: [(float(i + 1), float(v)) for i, v in enumerate(c.get("lat_ms") or [])]
                    for c in trim["cells"]
                    if c["size"] == size and c["window"] == window
                }
                if series:
                    charts.append(
                        line_chart(
                            f"latency-{size}-{window}",
                            f"Per-turn latency, N={size:,}, {window // 1000}k window",
                            series,
                            y_label="ms per turn (log)",
                            log_y=True,
                        )
                    )
    util = result.get("utilization")
    if isinstance(util, dict) and "error" not in util:
        charts.append(
            line_chart(
                "utilization",
                "contextwarden utilization per turn (trim workload, N=1,000)",
                {f"{int(w) // 1000}k window": [(float(i + 1), r) for i, r in enumerate(v)] for w, v in util.items()},
                y_label="share of the window",
                y_max=1.0,
            )
        )
    return _page(result, charts)


def _page(result: dict[str, Any], charts: list[str]) -> str:
    table = html.escape(markdown(result))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>contextwarden benchmarks</title>"
        f"<style>{CSS}pre{{white-space:pre-wrap;font-size:12px}}</style></head><body>"
        f"<h1>contextwarden benchmarks</h1>{''.join(charts)}<h2>Tables</h2><pre>{table}</pre></body></html>\n"
    )

"""The trim workload with the floor and contextkeeper stepped turn by turn in one process.

    PYTHONPATH=. .venv/bin/python -m benchmarks.trim_paired --sizes 5000 --window 128000,32000 --runs 3 \\
        --json bench-out/trim-paired.json

``../shared/bench/peers_bench.py`` runs each peer in a cell of its own, one after the other: on a
machine whose speed drifts by a third within seconds (a shared VM), the floor's p50 and ours are
measured at different speeds, and one cell's ratio says as much about the machine as about the
code (its ``floor-hysteresis`` peer, the floor plus one comparison, shows the spread). Here the
same conversation (the harness's own generator, seed and rounds) goes to both peers on every turn,
in alternating order, and after each peer's turn the harness's own untimed work runs on what it
returned (mapping the view to canonical messages, checking pairs, the system message and the
window), as it does between the turns of a cell. Both peers see the same machine at the same
moment, so the ratio of their medians holds still where a single cell's does not.

Reported per window: each peer's p50 and p99, the ratio of the p50s, and whether every turn of
contextkeeper's was correct by the harness's checks. Not a timed test: compare ratios within a run.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.peers_adapter import ContextKeeperPeer
from benchmarks.tokens_bench import DEFAULT_BENCH, load_harness


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


class _Driver:
    """One peer of the pair: its converted rounds and what the harness keeps between its turns."""

    def __init__(self, harness: Any, peer: Any, canon: list[dict[str, Any]], rounds: list[tuple[int, int]]) -> None:
        self.harness, self.peer, self.canon = harness, peer, canon
        native = peer.convert(canon)
        self.id_map = {id(x): idxs for x, idxs in native}
        by_canon = {idxs[0]: x for x, idxs in native}
        self.rounds = [[by_canon[i] for i in range(a, b) if i in by_canon] for a, b in rounds]
        self.memo: dict[Any, Any] = {}
        self.latencies: list[float] = []
        self.incorrect = 0

    def setup(self, window: int, enc: Any) -> None:
        self.peer.setup(window, enc)
        self.peer.step(self.rounds[0])  # the system prompt, untimed as in the harness

    def turn(self, r: int, window: int, enc: Any, tokens: list[int]) -> None:
        started = time.perf_counter_ns()
        out = self.peer.step(self.rounds[r])
        self.latencies.append((time.perf_counter_ns() - started) / 1e6)
        # the harness's untimed work between turns, on what the peer returned
        idx = self.harness.canonical_view(out, self.id_map, self.canon, enc, self.memo)
        if idx is None:
            self.incorrect += 1
            return
        check = self.harness.check_context(idx, self.canon, tokens, window)
        self.incorrect += not (check["pairs_ok"] and check["system_kept"] and check["fits"])


def run_pair(harness: Any, size: int, window: int, seed: int) -> dict[str, Any]:
    """One conversation of ``size`` messages through both peers at ``window`` tokens."""
    enc = harness.get_encoding()
    canon, rounds = harness.build_conversation(size, seed)
    tokens = [harness.message_tokens(enc, m) for m in canon]
    floor = _Driver(harness, harness.FloorPeer(), canon, rounds)
    ours = _Driver(harness, ContextKeeperPeer(), canon, rounds)
    floor.setup(window, enc)
    ours.setup(window, enc)
    gc.collect()
    for r in range(1, len(rounds)):
        for driver in (floor, ours) if r % 2 else (ours, floor):
            driver.turn(r, window, enc, tokens)
    f50, o50 = _quantile(floor.latencies, 0.5), _quantile(ours.latencies, 0.5)
    return {
        "size": size,
        "window": window,
        "seed": seed,
        "turns": len(rounds) - 1,
        "floor_p50_ms": round(f50, 4),
        "floor_p99_ms": round(_quantile(floor.latencies, 0.99), 3),
        "contextkeeper_p50_ms": round(o50, 4),
        "contextkeeper_p99_ms": round(_quantile(ours.latencies, 0.99), 3),
        "p50_ratio": round(o50 / f50, 3),
        "incorrect_turns": ours.incorrect,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="5000", help="comma-separated conversation sizes (messages)")
    parser.add_argument("--window", default="128000,32000", help="comma-separated windows (tokens)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each size and window")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bench-script", default=DEFAULT_BENCH, help="path of peers_bench.py")
    parser.add_argument("--json", dest="json_out", help="write the results here")
    args = parser.parse_args(argv)
    harness = load_harness(args.bench_script)
    results = []
    print(
        "| N | window | run | floor p50 ms | contextkeeper p50 ms | p50 ratio | floor p99 ms "
        "| contextkeeper p99 ms | incorrect |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        for window in (int(w) for w in args.window.split(",")):
            for run in range(1, args.runs + 1):
                res = run_pair(harness, size, window, args.seed)
                res["run"] = run
                results.append(res)
                print(
                    f"| {size} | {window} | {run} | {res['floor_p50_ms']} | {res['contextkeeper_p50_ms']} | "
                    f"{res['p50_ratio']} | {res['floor_p99_ms']} | {res['contextkeeper_p99_ms']} | "
                    f"{res['incorrect_turns']} |",
                    flush=True,
                )
    if args.json_out:
        out = Path(args.json_out)
        out.parent.mkdir(parents=True, exist_ok=True)
        meta = {"python": sys.version.split()[0], "bench_script": args.bench_script, "time": time.time()}
        out.write_text(json.dumps({"meta": meta, "pairs": results}, indent=2))
    return 1 if any(r["incorrect_turns"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())

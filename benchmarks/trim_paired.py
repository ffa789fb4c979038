"""The trim workload with the floor and contextwarden stepped turn by turn in one process.

    PYTHONPATH=. .venv/bin/python -m benchmarks.trim_paired --sizes 5000 --window 128000,32000 --runs 3 \\
        --json bench-out/trim-paired.json

The workload is the reference harness's (``--bench-script``, or ``../shared/bench/peers_bench.py``
beside the checkout) or, without it, the built-in one (`benchmarks.workload`).
The reference ``peers_bench.py`` runs each peer in a cell of its own, one after the other: on a
machine whose speed drifts by a third within seconds (a shared VM), the floor's p50 and ours are
measured at different speeds, and one cell's ratio says as much about the machine as about the
code (its ``floor-hysteresis`` peer, the floor plus one comparison, shows the spread). Here the
same conversation (the workload's generator, seed and rounds) goes to both peers on every turn,
in alternating order, and after each peer's turn the harness's own untimed work runs on what it
returned (the workload's own checks: mapping the view to canonical messages, checking pairs, the system message and the
window), as it does between the turns of a cell. Both peers see the same machine at the same
moment, so the ratio of their medians holds still where a single cell's does not.

Reported per window: each peer's p50 and p99, the ratio of the p50s, each peer's growth exponent
(the harness's fit of log latency against log history), and whether every turn of contextwarden's
was correct by the harness's checks. A third, timed step on every turn is a control that does the
same work each time (tokenizing one fixed text): its exponent would be zero on a machine of steady
speed, so what the fit reads for it is the machine drifting during the run. The fit leans on the
first turns past twice the window (at N=50,000 a tenth of the turns spans half of the log-history
range, a second or two of wall time), so a few seconds of a faster or slower machine move every peer's
exponent together; a peer's exponent minus the control's is what its own work adds.
Not a timed test: compare within a run. ``--clock cpu`` times each turn by the process's CPU time
(`time.process_time_ns`) instead of the wall clock: on a loaded machine it leaves out the time the
process waited for a core, so compaction turns and collector pauses are measured by the work they do.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.peers_adapter import ContextWardenPeer
from benchmarks.workload import Workload, load_workload

_CLOCKS: dict[str, Callable[[], int]] = {"wall": time.perf_counter_ns, "cpu": time.process_time_ns}
"""What a turn is timed by (``--clock``)."""


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


class _Driver:
    """One peer of the pair: its converted rounds and what the harness keeps between its turns."""

    def __init__(
        self, harness: Workload, peer: Any, canon: list[dict[str, Any]], rounds: list[tuple[int, int]]
    ) -> None:
        self.harness, self.peer, self.canon = harness, peer, canon
        native = peer.convert(canon)
        self.id_map = {id(x): idxs for x, idxs in native}
        by_canon = {idxs[0]: x for x, idxs in native}
        self.rounds = [[by_canon[i] for i in range(a, b) if i in by_canon] for a, b in rounds]
        self.memo: dict[Any, Any] = {}
        self.latencies: list[float] = []
        self.incorrect = 0
        self.clock = time.perf_counter_ns

    def setup(self, window: int, enc: Any) -> None:
        self.peer.setup(window, enc)
        self.peer.step(self.rounds[0])  # the system prompt, untimed as in the harness

    def turn(self, r: int, window: int, enc: Any, tokens: list[int]) -> None:
        started = self.clock()
        out = self.peer.step(self.rounds[r])
        self.latencies.append((self.clock() - started) / 1e6)
        # the harness's untimed work between turns, on what the peer returned
        idx = self.harness.canonical_view(out, self.id_map, self.canon, enc, self.memo)
        if idx is None:
            self.incorrect += 1
            return
        check = self.harness.check_context(idx, self.canon, tokens, window)
        self.incorrect += not (check["pairs_ok"] and check["system_kept"] and check["fits"])


class _Control:
    """A turn that does the same work every time: tokenizing one fixed text.

    Its growth exponent is zero on a machine that holds its speed; what the fit reads for it is the
    machine speeding up or slowing down during the run, and the peers stepped beside it saw the same.
    """

    def __init__(self, text: str, clock: Callable[[], int]) -> None:
        self.text = text
        self.clock = clock
        self.latencies: list[float] = []

    def turn(self, enc: Any) -> None:
        started = self.clock()
        enc.encode_ordinary(self.text)
        self.latencies.append((self.clock() - started) / 1e6)


def _growth(harness: Workload, history: list[int], latencies: list[float], window: int) -> float | None:
    """The harness's own fit: latency against history, on the turns past twice the window."""
    exponent = harness.fit_exponent(history, latencies, 2.0 * window)
    return None if exponent is None else round(exponent, 3)


def run_pair(harness: Workload, size: int, window: int, seed: int, *, clock: str = "wall") -> dict[str, Any]:
    """One conversation of ``size`` messages through both peers at ``window`` tokens."""
    enc = harness.get_encoding()
    canon, rounds = harness.build_conversation(size, seed)
    tokens = [harness.message_tokens(enc, m) for m in canon]
    floor = _Driver(harness, harness.floor_peer(), canon, rounds)
    ours = _Driver(harness, ContextWardenPeer(), canon, rounds)
    # about a plain turn's work: the first user message, a few hundred tokens
    control = _Control(canon[rounds[1][0]]["content"], _CLOCKS[clock])
    floor.clock = ours.clock = _CLOCKS[clock]
    floor.setup(window, enc)
    ours.setup(window, enc)
    gc.collect()
    history: list[int] = []  # tokens of the whole conversation after each timed round: the fit's x
    total = sum(tokens[rounds[0][0] : rounds[0][1]])
    for r in range(1, len(rounds)):
        total += sum(tokens[rounds[r][0] : rounds[r][1]])
        history.append(total)
        for driver in (floor, ours) if r % 2 else (ours, floor):
            driver.turn(r, window, enc, tokens)
        control.turn(enc)
    f50, o50 = _quantile(floor.latencies, 0.5), _quantile(ours.latencies, 0.5)
    floor_growth = _growth(harness, history, floor.latencies, window)
    ours_growth = _growth(harness, history, ours.latencies, window)
    control_growth = _growth(harness, history, control.latencies, window)
    return {
        "size": size,
        "window": window,
        "seed": seed,
        "turns": len(rounds) - 1,
        "floor_p50_ms": round(f50, 4),
        "floor_p99_ms": round(_quantile(floor.latencies, 0.99), 3),
        "contextwarden_p50_ms": round(o50, 4),
        "contextwarden_p99_ms": round(_quantile(ours.latencies, 0.99), 3),
        "p50_ratio": round(o50 / f50, 3),
        "floor_growth_exponent": floor_growth,
        "contextwarden_growth_exponent": ours_growth,
        "control_growth_exponent": control_growth,
        "incorrect_turns": ours.incorrect,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="5000", help="comma-separated conversation sizes (messages)")
    parser.add_argument("--window", default="128000,32000", help="comma-separated windows (tokens)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each size and window")
    parser.add_argument("--seed", type=int, default=0, help="conversation seed of the first run")
    parser.add_argument(
        "--vary-seed", action="store_true", help="run k uses seed + k - 1: other conversations of the same workload"
    )
    parser.add_argument(
        "--bench-script",
        default=None,
        help="path of the reference peers_bench.py, or 'builtin' (default: ../shared/bench/peers_bench.py "
        "when it exists, else the built-in workload)",
    )
    parser.add_argument("--clock", choices=sorted(_CLOCKS), default="wall", help="time turns by wall clock or CPU time")
    parser.add_argument("--json", dest="json_out", help="write the results here")
    args = parser.parse_args(argv)
    harness = load_workload(args.bench_script)
    print(f"workload: {harness.source}", file=sys.stderr)
    results = []
    print(
        "| N | window | run | seed | floor p50 ms | contextwarden p50 ms | p50 ratio | floor p99 ms "
        "| contextwarden p99 ms | floor growth | contextwarden growth | control growth | incorrect |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        for window in (int(w) for w in args.window.split(",")):
            for run in range(1, args.runs + 1):
                seed = args.seed + (run - 1 if args.vary_seed else 0)
                res = run_pair(harness, size, window, seed, clock=args.clock)
                res["run"] = run
                results.append(res)
                print(
                    f"| {size} | {window} | {run} | {res['seed']} | {res['floor_p50_ms']} | "
                    f"{res['contextwarden_p50_ms']} | {res['p50_ratio']} | {res['floor_p99_ms']} | "
                    f"{res['contextwarden_p99_ms']} | "
                    f"{res['floor_growth_exponent']} | {res['contextwarden_growth_exponent']} | "
                    f"{res['control_growth_exponent']} | "
                    f"{res['incorrect_turns']} |",
                    flush=True,
                )
    if args.json_out:
        out = Path(args.json_out)
        out.parent.mkdir(parents=True, exist_ok=True)
        meta = {"python": sys.version.split()[0], "workload": harness.source, "time": time.time(), "clock": args.clock}
        out.write_text(json.dumps({"meta": meta, "pairs": results}, indent=2))
    return 1 if any(r["incorrect_turns"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The benchmark suite's report: the 100x target against langchain, tables and the plot page."""

from __future__ import annotations

from typing import Any

from benchmarks import report


def _cell(peer: str, window: int, total: float, *, timed_out: bool = False, est: float | None = None) -> dict[str, Any]:
    return {
        "peer": peer, "size": 1000, "window": window, "turns_done": 275, "turns_total": 275, "total_s": total,
        "timed_out": timed_out, "est_total_s": est, "p50_ms": 1.0, "p99_ms": 2.0, "prefix_reuse": 0.9,
        "turns_system_dropped": 0, "turns_pairs_broken": 0, "turns_over_window": 3, "final": {"fits": True},
        "lat_ms": [1.0, 2.0, 0.5],
    }  # fmt: skip


def test_targets_use_the_estimate_or_a_lower_bound_of_a_timed_out_peer() -> None:
    cells = [
        _cell("floor", 128000, 0.1),
        _cell("contextwarden", 128000, 0.2),
        _cell("langchain-tiktoken", 128000, 60.0, timed_out=True),
        _cell("contextwarden", 32000, 0.5),
        _cell("langchain-tiktoken", 32000, 30.0, timed_out=True, est=45.0),
    ]
    targets = report.trim_targets(cells)
    assert targets["128000"]["ratio"] == 300.0 and targets["128000"]["ratio_is_lower_bound"]
    assert targets["128000"]["met"] and targets["128000"]["ratio_same_turns"] == 1.0  # same per-turn times
    assert targets["32000"]["ratio"] == 90.0 and targets["32000"]["langchain_estimated"]
    assert not targets["32000"]["met"]
    text = report.markdown({"date": "d", "machine": {"cpus": 2}, "trim": {"cells": cells, "targets": targets}})
    assert "**300x** (lower bound" in text and "target ≥100x NOT met" in text
    assert "| langchain-tiktoken | 1,000 | 128k | 275/275 | >60.000 |" in text
    assert "yes/yes/NO" in text  # turns over the window are shown, not hidden
    page = report.html_page({"trim": {"cells": cells}, "utilization": {"128000": [0.5, 0.9]}})
    assert page.count('data-chart="latency-1000-128000"') == 1 and 'data-chart="utilization"' in page

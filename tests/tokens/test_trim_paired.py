from __future__ import annotations

import json
from pathlib import Path

import pytest

from _bench_runs import run_benchmark


def test_trim_paired_steps_both_peers_on_every_turn_and_reports_their_ratio(tmp_path: Path) -> None:
    out = tmp_path / "paired.json"
    args = "--sizes 400 --window 6000 --runs 2 --seed 7 --vary-seed --json".split()
    proc = run_benchmark("trim_paired", *args, str(out))
    assert proc.returncode == 0, proc.stderr
    pairs = json.loads(out.read_text())["pairs"]
    assert [(p["size"], p["window"], p["run"], p["seed"]) for p in pairs] == [(400, 6000, 1, 7), (400, 6000, 2, 8)]
    for p in pairs:
        assert p["turns"] > 90  # about four messages a round
        assert p["incorrect_turns"] == 0  # a 6,000-token window forces compactions: views stay correct
        # the ratio of the unrounded medians, against the ratio of the rounded ones in the report
        assert p["p50_ratio"] == pytest.approx(p["contextwarden_p50_ms"] / p["floor_p50_ms"], rel=0.005)
        assert 0 < p["floor_p50_ms"] <= p["floor_p99_ms"]
        # the harness's growth fit over the turns past twice the window, for both peers
        assert isinstance(p["floor_growth_exponent"], float)
        assert isinstance(p["contextwarden_growth_exponent"], float)
        assert isinstance(p["control_growth_exponent"], float)
    assert "| 400 | 6000 | 1 | 7 |" in proc.stdout


def test_trim_paired_times_turns_by_cpu_time_when_asked(tmp_path: Path) -> None:
    out = tmp_path / "paired.json"
    proc = run_benchmark("trim_paired", *"--sizes 200 --window 6000 --runs 1 --clock cpu --json".split(), str(out))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["meta"]["clock"] == "cpu"
    (pair,) = result["pairs"]
    assert pair["incorrect_turns"] == 0 and 0 < pair["contextwarden_p50_ms"] <= pair["contextwarden_p99_ms"]

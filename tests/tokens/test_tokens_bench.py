from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT.parent / "shared" / "bench" / "peers_bench.py"


@pytest.mark.skipif(not BENCH.exists(), reason="../shared/bench/peers_bench.py is not beside the checkout")
def test_tokens_bench_runs_and_reports_every_table(tmp_path):
    pytest.importorskip("tiktoken")
    out = tmp_path / "tokens.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.tokens_bench", "--size", "300", "--rounds", "20", "--reps", "1",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "1. Incremental accounting" in proc.stdout and "3. Heuristic counter vs cl100k" in proc.stdout
    res = json.loads(out.read_text())
    assert res["incremental"]["count_mismatches_vs_harness"] == 0
    assert res["incremental"]["ratio_median"] > 0
    assert {"prose", "code", "logs", "json", "chinese"} <= set(res["heuristic_error"])
    backends = [r["backend"] for r in res["throughput"]["rows"]]
    assert backends[0] == "bare tiktoken cl100k encode_ordinary"
    assert any(b.startswith("HeuristicCounter") for b in backends)

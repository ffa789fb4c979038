from __future__ import annotations

import json

from _bench_runs import run_benchmark


def test_tokens_bench_runs_and_reports_every_table(tmp_path):
    out = tmp_path / "tokens.json"
    proc = run_benchmark("tokens_bench", "--size", "300", "--rounds", "20", "--reps", "1", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "1. Incremental accounting" in proc.stdout and "3. Heuristic counter vs cl100k" in proc.stdout
    res = json.loads(out.read_text())
    assert res["incremental"]["count_mismatches_vs_harness"] == 0
    assert res["incremental"]["ratio_median"] > 0
    assert {"prose", "code", "logs", "json", "chinese"} <= set(res["heuristic_error"])
    backends = [r["backend"] for r in res["throughput"]["rows"]]
    assert backends[0] == "bare tiktoken cl100k encode_ordinary"
    assert any(b.startswith("HeuristicCounter") for b in backends)

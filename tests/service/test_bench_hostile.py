"""`contextwarden bench proxy --hostile` on a short run: real processes, every kind, the JSON layout, no raw error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from contextwarden.service.bench_hostile import HOSTILE_KINDS, UPSTREAM_KINDS


def test_a_short_hostile_soak_reports_every_kind_and_no_raw_error(tmp_path: Path) -> None:
    out = tmp_path / "hostile.json"
    args = [
        sys.executable, "-m", "contextwarden", "bench", "proxy", "--hostile", "--stores", "sqlite",
        "--requests", "400", "--sessions", "8", "--json", str(out),
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    result = json.loads(out.read_text())
    assert result["workload"]["requests"] == 400 and result["workload"]["concurrency"] == 8
    soak = result["stores"]["sqlite"]
    assert soak["requests"] == 400
    assert sum(kind["sent"] for kind in soak["by_kind"].values()) == 400
    sent = set(soak["by_kind"])
    assert "ordinary" in sent and {k for k in HOSTILE_KINDS if k != "hostile_upstream"} <= sent
    assert any(k.startswith("upstream:") and k[9:] in UPSTREAM_KINDS for k in sent)
    # a hostile share of 10%, give or take what 400 draws allow
    assert 15 <= soak["hostile_requests"] <= 70
    assert soak["raw_errors"] == 0 and soak["unexpected_errors_logged"] == 0, soak["by_kind"]
    assert soak["by_kind"]["ordinary"]["statuses"] == {"200": soak["by_kind"]["ordinary"]["sent"]}
    refused = {"bad_json": "400", "deep_json": "400", "wrong_content_type": "415", "huge_body": "413"}
    for kind, status in refused.items():
        assert set(soak["by_kind"][kind]["statuses"]) == {status}, (kind, soak["by_kind"][kind])
    assert soak["acknowledged"] >= soak["by_kind"]["ordinary"]["sent"] and soak["acknowledged_lost"] == 0
    assert soak["credentials_leaked"] == {"responses": 0, "log_lines": 0}
    # the second tenant naming the agents' sessions: its own new session (200) or a missing one (404), never theirs
    assert set(soak["by_kind"]["other_tenant"]["statuses"]) <= {"200", "404"} and soak["cross_tenant_reads"] == 0
    assert len(soak["rss_mb"]) >= 10 and isinstance(soak["rss_growth_mb"], float)
    assert "acknowledged replies lost 0" in done.stdout.decode()

"""`contextwarden bench proxy` end to end on a tiny workload: real processes, both stores, the JSON layout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contextwarden.service import create_app
from contextwarden.service.bench import DIALECTS

from .conftest import REDIS_URL


def _route_served(path: str) -> bool:
    return any(getattr(route, "path", None) == path for route in create_app().routes)


SERVED = [d for d in DIALECTS if d == "chat" or _route_served(DIALECTS[d])]
"""The dialects whose route the proxy serves (all three once the Messages and Responses routes exist)."""

pytestmark = pytest.mark.services


def test_bench_proxy_writes_the_json_layout(tmp_path: Path, redis_store_url: str) -> None:
    out = tmp_path / "proxy.json"
    args = [
        sys.executable, "-m", "contextwarden", "bench", "proxy", "--sessions", "3", "--max-messages", "12",
        "--turns", "3", "--think-ms", "10", "--soak", "45", "--runs", "1", "--redis-url", REDIS_URL,
        "--dialects", ",".join(SERVED), "--json", str(out),
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, timeout=240, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    result = json.loads(out.read_text())
    assert set(result["stores"]) == {"sqlite", "redis"}
    for store in ("sqlite", "redis"):
        assert list(result["stores"][store]) == list(SERVED)
        for number, dialect in enumerate(SERVED):
            summary = result["stores"][store][dialect]
            assert {"added_ms_p50", "added_ms_p99", "requests_per_s", "errors"} <= set(summary)
            assert summary["errors"] == 0, result["runs"][store][dialect]
            assert isinstance(summary["added_ms_p50"], float) and summary["requests_per_s"] > 0
            (run,) = result["runs"][store][dialect]
            assert run["pairs"] == 3 * 2  # three conversations; their first turns are reported apart
            assert run["first_request_ms_p50"] > 0 and run["error_kinds"] == {}
            assert run["proxy_cpu_ms_per_request"] > 0 and run["load_average_1m"] >= 0
            if number == 0:  # the soak runs on the first dialect: one sample per round, up to 10
                assert run["soak"]["requests"] >= 45 and len(run["soak"]["rss_mb"]) == 5
            else:
                assert run["soak"]["requests"] == 0
    assert "added p50 ms" in done.stdout.decode()


def test_bench_proxy_refuses_an_unknown_dialect() -> None:
    args = [sys.executable, "-m", "contextwarden", "bench", "proxy", "--dialects", "chat,grpc", "--runs", "1"]
    done = subprocess.run(args, capture_output=True, timeout=60)
    assert done.returncode == 2 and b"choose from chat, messages, responses" in done.stderr

"""The store benchmark runs end to end and reports the documented JSON shape."""

from __future__ import annotations

import json
from pathlib import Path

from contextwarden.stores.bench import main, make_round, run_stores_bench


def test_bench_reports_the_documented_shape(tmp_path: Path) -> None:
    out = tmp_path / "stores.json"
    seen: list[str] = []
    result = run_stores_bench(
        str(out),
        ["memory", "sqlite", "redis"],
        redis_url="redis://127.0.0.1:1/0",
        messages=400,
        load_size=200,
        cas_ops=20,
        repeats=2,
        report=lambda name, figures: seen.append(name),
    )
    assert json.loads(out.read_text()) == result
    assert seen == ["memory", "sqlite", "redis"]
    for name in ("memory", "sqlite"):
        figures = result["backends"][name]
        assert set(figures) == {"append_msgs_per_s", "load_5000_ms", "cas_p99_ms"}
        assert all(isinstance(value, float) and value > 0 for value in figures.values())
    assert set(result["backends"]["redis"]) == {"error"}
    assert "StoreUnavailable" in result["backends"]["redis"]["error"]


def test_command_line(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    assert main(["--json", str(out), "--backends", "memory", "--messages", "200"]) == 0
    assert set(json.loads(out.read_text())["backends"]) == {"memory"}


def test_rounds_are_tool_rounds() -> None:
    roles = [message.role for message in make_round(3)]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert make_round(3)[2].tool_call_id == make_round(3)[1].tool_calls[0].call_id


def test_postgres_runs_durable_and_in_sqlites_durability_class(postgres_url: str) -> None:
    result = run_stores_bench(
        None,
        ["postgres", "postgres-async-commit"],
        postgres_url=postgres_url,
        messages=200,
        load_size=100,
        cas_ops=20,
        repeats=1,
    )
    for name in ("postgres", "postgres-async-commit"):
        figures = result["backends"][name]
        assert set(figures) == {"append_msgs_per_s", "load_5000_ms", "cas_p99_ms"}, figures
        assert all(value > 0 for value in figures.values())

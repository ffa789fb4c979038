"""`bench ...`: probes end to end on a small file, the placeholders, argument errors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextkeeper.cli import app
from contextkeeper.demo import generate_session


@pytest.fixture
def probe_file(tmp_path: Path) -> Path:
    rows = []
    for seed in (1, 2):
        demo = generate_session(seed=seed, turns=30)
        messages = [demo.system] + [m for turn in demo.turns[:-1] for m in turn]
        rows.append({"id": f"t{seed}", "source": "demo", "messages": messages, "probes": [f.value for f in demo.facts]})
    path = tmp_path / "probes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_probes_writes_the_documented_json(runner: CliRunner, probe_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "probes.json"
    result = runner.invoke(
        app, ["bench", "probes", "--data", str(probe_file), "--budgets", "3000,8000", "--json", str(out)]
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(out.read_text())
    assert data["dataset"] == str(probe_file)
    assert set(data["budgets"]) == {"3000", "8000"}
    for row in data["budgets"].values():
        assert {"retention", "found", "total", "all_fit", "all_pairs_ok", "traces"} <= set(row)
        assert row["total"] == 20 and row["traces"] == 2
    assert data["budgets"]["8000"]["retention"] >= data["budgets"]["3000"]["retention"]
    assert "probes: probes.jsonl" in result.stdout


def test_probes_bad_arguments(runner: CliRunner, probe_file: Path) -> None:
    missing = runner.invoke(app, ["bench", "probes", "--data", "nope.jsonl"])
    assert missing.exit_code == 2 and "no such file" in missing.stderr
    bad = runner.invoke(app, ["bench", "probes", "--data", str(probe_file), "--budgets", "a,b"])
    assert bad.exit_code == 2 and "comma list" in bad.stderr


@pytest.mark.parametrize("name", ["locomo", "memory"])
def test_memory_benchmarks_are_placeholders(runner: CliRunner, name: str) -> None:
    result = runner.invoke(app, ["bench", name, "--data", "x.json", "--budgets", "2000"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert f"`bench {name}`" in lines[0] and "not available in this version" in lines[0]
    assert "long-term memory" in lines[0] and "nothing is run" in lines[0]
    assert "issue" not in lines[0] and "filed" not in lines[0]


def test_stores_memory_and_sqlite(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "stores.json"
    result = runner.invoke(
        app, ["bench", "stores", "--backends", "memory,sqlite", "--messages", "400", "--json", str(out)]
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(out.read_text())
    assert set(data["backends"]) == {"memory", "sqlite"}
    for figures in data["backends"].values():
        assert figures["append_msgs_per_s"] > 0 and figures["cas_p99_ms"] >= 0


def test_stores_unknown_backend(runner: CliRunner) -> None:
    result = runner.invoke(app, ["bench", "stores", "--backends", "mongo"])
    assert result.exit_code == 2 and "mongo" in result.stderr


def test_trim_needs_the_harness(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["bench", "trim", "--harness", str(tmp_path / "missing.py")])
    assert result.exit_code == 2
    assert "peers_bench.py not found" in result.stderr


def test_fidelity_prints_a_table_with_progress_and_json_only_on_request(
    runner: CliRunner, probe_file: Path, tmp_path: Path
) -> None:
    result = runner.invoke(app, ["bench", "fidelity", "--data", str(probe_file), "--budgets", "300", "--no-llm"])
    assert result.exit_code == 0, result.stderr
    assert "fidelity: probes.jsonl" in result.stdout and "retention" in result.stdout
    assert "extractive" in result.stdout and "running" in result.stdout
    assert "{" not in result.stdout  # a table, not JSON
    assert len(result.stdout.splitlines()) < 20
    out = tmp_path / "f.json"
    with_json = runner.invoke(
        app, ["bench", "fidelity", "--data", str(probe_file), "--budgets", "300", "--no-llm", "--json", str(out)]
    )
    assert with_json.exit_code == 0, with_json.stderr
    data = json.loads(out.read_text())
    assert data["traces"] == 2 and set(data["extractive"]) == {"300"}
    assert "misses" in data["extractive"]["300"]


def test_fidelity_reports_progress_on_stderr(probe_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from contextkeeper.cli import _common

    captured = io.StringIO()
    monkeypatch.setattr(_common, "err", Console(file=captured, force_terminal=True, width=120))
    result = CliRunner().invoke(app, ["bench", "fidelity", "--data", str(probe_file), "--budgets", "300", "--no-llm"])
    assert result.exit_code == 0, result.stderr
    assert "fidelity: extractive @300" in captured.getvalue()  # the bar names each phase as it finishes


def test_no_project_tracker_wording_reaches_users() -> None:
    src = Path(__file__).resolve().parents[2] / "src" / "contextkeeper"
    for path in src.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for phrase in ("not filed", "later issue", "the service issue", "memory issue", "comes with the"):
            assert phrase not in text, f"{path}: {phrase!r}"

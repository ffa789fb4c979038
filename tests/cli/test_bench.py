"""`bench ...`: probes, locomo and memory end to end on small inputs, argument errors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextwarden.cli import app
from contextwarden.demo import generate_session


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
    mode = runner.invoke(app, ["bench", "probes", "--data", str(probe_file), "--mode", "sometimes"])
    assert mode.exit_code == 2 and "use turn or once" in mode.stderr


def test_probes_once_mode_and_the_recency_rows(runner: CliRunner, probe_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "once.json"
    args = ["bench", "probes", "--data", str(probe_file), "--budgets", "3000", "--mode", "once", "--json", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    data = json.loads(out.read_text())
    assert data["mode"] == "once" and "retention" in data["budgets"]["3000"]["recency"]
    assert "recency" in result.stdout and "(once)" in result.stdout


def _locomo_file(tmp_path: Path) -> Path:
    turns = [
        {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a grey cat named Pixel last week."},
        {"speaker": "Bob", "dia_id": "D1:2", "text": "Lovely! I started pottery classes on Tuesdays."},
        {"speaker": "Ann", "dia_id": "D1:3", "text": "The weather has been rainy all month."},
    ]
    later = [
        {"speaker": "Bob", "dia_id": "D2:1", "text": "My pottery teacher says my vases are improving."},
        {"speaker": "Ann", "dia_id": "D2:2", "text": "Pixel knocked a glass off the shelf again."},
    ]
    sample = {
        "sample_id": "conv-test",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": turns,
            "session_2_date_time": "3:10 pm on 20 May, 2023",
            "session_2": later,
        },
        "qa": [
            {"question": "What is the name of Ann's cat?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
            {"question": "What does Bob make in pottery?", "answer": "vases", "evidence": ["D:2:1"], "category": 1},
            {"question": "What class does Bob take?", "answer": "pottery", "evidence": ["D1:2; D2:1"], "category": 3},
            {"question": "Who broke a glass?", "adversarial_answer": "Bob", "evidence": ["D"], "category": 5},
        ],
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    return path


def test_locomo_keyword_only_writes_the_documented_json(runner: CliRunner, tmp_path: Path) -> None:
    data = _locomo_file(tmp_path)
    out = tmp_path / "locomo-out.json"
    result = runner.invoke(
        app,
        ["bench", "locomo", "--data", str(data), "--budgets", "40,400", "--embedder", "none", "--json", str(out)],
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["dataset"] == str(data) and set(report["budgets"]) == {"40", "400"}
    big = report["budgets"]["400"]
    # Everything fits in 400 tokens: every repaired evidence id is found, the dropped one is not counted.
    assert big["evidence_recall"] == 1.0 and big["questions"] == 4
    assert big["by_category"]["1 multi-hop"]["evidence_recall"] == 1.0
    assert big["answer_containment"] == 1.0
    assert report["budgets"]["40"]["evidence_recall"] < 1.0
    assert set(report["ablation"]) == {"keyword"}
    assert "evidence recall" in result.stdout and "multi-hop" in result.stdout


def test_locomo_bad_arguments(runner: CliRunner, tmp_path: Path) -> None:
    missing = runner.invoke(app, ["bench", "locomo", "--data", "nope.json"])
    assert missing.exit_code == 2 and "no such file" in missing.stderr
    data = _locomo_file(tmp_path)
    bad = runner.invoke(app, ["bench", "locomo", "--data", str(data), "--embedder", "bert"])
    assert bad.exit_code == 2 and "minilm or none" in bad.stderr
    unknown = runner.invoke(
        app, ["bench", "locomo", "--data", str(data), "--embedder", "none", "--conversations", "conv-9"]
    )
    assert unknown.exit_code == 2 and "conv-9" in unknown.stderr and "conv-test" in unknown.stderr


def test_locomo_runs_the_named_conversations(runner: CliRunner, tmp_path: Path) -> None:
    data = _locomo_file(tmp_path)
    samples = json.loads(data.read_text())
    other = json.loads(json.dumps(samples[0]))
    other["sample_id"] = "conv-other"
    other["qa"] = other["qa"][:1]
    data.write_text(json.dumps([samples[0], other]))
    out = tmp_path / "held-out.json"
    args = ["bench", "locomo", "--data", str(data), "--embedder", "none", "--budgets", "400"]
    result = runner.invoke(app, [*args, "--conversations", "conv-other", "--json", str(out)])
    assert result.exit_code == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["conversations"] == ["conv-other"] and set(report["by_conversation"]["400"]) == {"conv-other"}
    assert report["budgets"]["400"]["questions"] == 1


def test_memory_bench_small(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "memory.json"
    result = runner.invoke(app, ["bench", "memory", "--memories", "600", "--queries", "20", "--json", str(out)])
    assert result.exit_code == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["memories"] == 600
    for path in ("keyword", "dense"):
        assert report[path]["p99_ms"] >= report[path]["p50_ms"] > 0
        assert report[path]["hit_at_10"] >= 0.9


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

    from contextwarden.cli import _common

    captured = io.StringIO()
    monkeypatch.setattr(_common, "err", Console(file=captured, force_terminal=True, width=120))
    result = CliRunner().invoke(app, ["bench", "fidelity", "--data", str(probe_file), "--budgets", "300", "--no-llm"])
    assert result.exit_code == 0, result.stderr
    assert "fidelity: extractive @300" in captured.getvalue()  # the bar names each phase as it finishes


def test_no_project_tracker_wording_reaches_users() -> None:
    src = Path(__file__).resolve().parents[2] / "src" / "contextwarden"
    for path in src.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for phrase in ("not filed", "later issue", "the service issue", "memory issue", "comes with the"):
            assert phrase not in text, f"{path}: {phrase!r}"

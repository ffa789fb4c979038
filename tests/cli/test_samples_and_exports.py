"""The packaged sample data feeds the commands without `--data`, and a `sessions export` file is a transcript."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from contextwarden import Session
from contextwarden.benchmarks.samples import SAMPLES, sample_path
from contextwarden.cli import app
from contextwarden.cli._common import command_prefix, load_transcript
from contextwarden.stores import open_store


@pytest.fixture
def export_file(tmp_path: Path, chat_messages: list[dict[str, Any]], runner: CliRunner) -> Path:
    """`sessions export` of a stored session that compacted, written by the command itself."""
    url = f"sqlite:///{tmp_path / 'cw.db'}"
    with open_store(url) as store:
        session = Session("exp", model="gpt-4", window=8192, store=store)
        for i in range(0, len(chat_messages), 6):
            session.add(chat_messages[i : i + 6])
            session.prepare()
    out = tmp_path / "exp.jsonl"
    result = runner.invoke(app, ["sessions", "export", "exp", "--store", url, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_an_export_reads_as_its_whole_transcript(export_file: Path, chat_messages: list[dict[str, Any]]) -> None:
    loaded = load_transcript(export_file)
    assert loaded.shape == "export"
    assert len(loaded.messages) == len(chat_messages)
    assert [m.role for m in loaded.messages] == [m["role"] for m in chat_messages]
    assert loaded.messages[-1].text == chat_messages[-1]["content"]


@pytest.mark.parametrize(
    "args",
    [
        ["count", "{f}", "--model", "gpt-4"],
        ["compact", "{f}", "--model", "gpt-4", "--budget", "4000"],
        ["eval", "{f}", "--model", "gpt-4", "--window", "8192"],
        ["replay", "{f}", "--model", "gpt-4", "--window", "8192"],
    ],
    ids=lambda a: a[0],
)
def test_every_transcript_command_takes_an_export(runner: CliRunner, export_file: Path, args: list[str]) -> None:
    result = runner.invoke(app, [a.format(f=export_file) for a in args])
    assert result.exit_code == 0, result.output
    if args[0] == "compact":
        view = json.loads(result.stdout)
        assert view[0]["role"] == "system"  # an export's view is written as OpenAI chat messages
        assert len(view) < 60


def test_an_export_with_a_broken_message_names_its_line(runner: CliRunner, export_file: Path, tmp_path: Path) -> None:
    lines = export_file.read_text(encoding="utf-8").splitlines()
    broken = tmp_path / "broken.jsonl"
    lines[2] = json.dumps({"type": "message", "seq": 1, "message": {"role": 7}})
    broken.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["count", str(broken), "--model", "gpt-4"])
    assert result.exit_code == 1
    assert "message line 3 of the session export is not a valid message" in result.output


@pytest.mark.parametrize("name", [n for n in SAMPLES if n.startswith("transcript.")])
def test_each_sample_transcript_is_one_session_in_its_format(name: str) -> None:
    loaded = load_transcript(sample_path(name))
    assert loaded.format == name.split(".")[1]
    openai = load_transcript(sample_path("transcript.openai.json"))
    assert [m.role for m in loaded.messages] == [m.role for m in openai.messages]
    assert sum(len(m.tool_calls) for m in loaded.messages) == 20


def test_bench_probes_and_locomo_run_on_the_packaged_samples(runner: CliRunner, tmp_path: Path) -> None:
    probes = runner.invoke(app, ["bench", "probes", "--budgets", "4000", "--json", str(tmp_path / "p.json")])
    assert probes.exit_code == 0, probes.output
    result = json.loads((tmp_path / "p.json").read_text())
    assert result["budgets"]["4000"]["traces"] == 6
    assert result["budgets"]["4000"]["all_pairs_ok"] is True
    locomo = runner.invoke(
        app, ["bench", "locomo", "--embedder", "none", "--no-ablation", "--json", str(tmp_path / "l.json")]
    )
    assert locomo.exit_code == 0, locomo.output
    assert json.loads((tmp_path / "l.json").read_text())["budgets"]["2000"]["questions"] == 6


def test_an_unknown_sample_is_refused_with_the_names() -> None:
    with pytest.raises(ValueError, match="probe-traces.jsonl"):
        sample_path("nope.json")


def test_the_printed_command_runs_from_here() -> None:
    prefix = command_prefix()
    assert prefix == "contextwarden" or prefix.endswith(" -m contextwarden")

"""`replay FILE --config A --config B` on a recorded transcript, and `eval FILE` with probes and a judge."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from contextwarden import Message, Session, ToolCall
from contextwarden.adapters import to_messages
from contextwarden.cli import app
from contextwarden.health.judge import JUDGE_PROMPT
from contextwarden.replay import last_turn_facts, replay_transcript, split_turns
from contextwarden.stores import open_store
from contextwarden.testing import ScriptedOpenAIServer


def _configs(tmp_path: Path) -> tuple[Path, Path]:
    wide = tmp_path / "wide.toml"
    wide.write_text("[compaction]\nhigh_water = 1.0\nlow_water = 0.45\n", encoding="utf-8")
    narrow = tmp_path / "narrow.toml"
    narrow.write_text("[compaction]\nhigh_water = 0.7\nlow_water = 0.6\n", encoding="utf-8")
    return wide, narrow


def test_replay_compares_configurations_side_by_side(runner: CliRunner, chat_file: Path, tmp_path: Path) -> None:
    wide, narrow = _configs(tmp_path)
    report, data = tmp_path / "replay.html", tmp_path / "replay.json"
    args = ["replay", str(chat_file), "--config", str(wide), "--config", str(narrow), "--budget", "12000"]
    result = runner.invoke(app, [*args, "--html", str(report), "--json", str(data)])
    assert result.exit_code == 0, result.stderr
    assert "wide" in result.stdout and "narrow" in result.stdout
    runs = {r["name"]: r for r in json.loads(data.read_text())["runs"]}
    assert set(runs) == {"wide", "narrow"}
    turns = len(split_turns(to_messages(json.loads(chat_file.read_text()), format="openai")))
    for r in runs.values():
        assert r["turns"] == turns == len(r["per_turn"]["utilization"])
        assert r["peak_tokens"] <= 12000 and max(r["per_turn"]["sent"]) == r["peak_tokens"]
        assert 0 < r["prefix_reuse"] < 1
        assert r["settings"]["high_water"] in (1.0, 0.7)
    # a band that starts at 70% caps the view lower and sends fewer tokens
    assert runs["narrow"]["peak_utilization"] < runs["wide"]["peak_utilization"]
    assert runs["narrow"]["tokens_sent"] < runs["wide"]["tokens_sent"]
    html = report.read_text()
    assert html.count('data-series="wide"') == 2 and html.count('data-series="narrow"') == 2
    count = re.search(r'data-chart="utilization".*?data-count="(\d+)"', html, re.S)
    assert count is not None and int(count.group(1)) == turns


def test_replay_of_a_stored_session(runner: CliRunner, chat_messages: list[dict[str, Any]], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cw.db'}"
    with open_store(url) as store:
        session = Session("recorded", window=200_000, counter="heuristic", store=store)
        session.add(to_messages(chat_messages[:40], format="openai"))
    result = runner.invoke(app, ["replay", "--session", "recorded", "--store", url, "--budget", "6000"])
    assert result.exit_code == 0, result.stderr
    assert "session recorded" in result.stdout
    both = runner.invoke(app, ["replay", "x.json", "--session", "recorded"])
    assert both.exit_code == 2 and "not both" in both.stderr


def test_last_turn_facts_are_looked_up_in_the_view_that_turn_received() -> None:
    call = ToolCall(call_id="c1", name="queue", arguments="{}")
    messages = [
        Message.system("agent"),
        Message.user("Deploy build BLD-7731 to staging."),
        Message.assistant("Checking the queue.", tool_calls=[call]),
        Message.tool_result("c1", "log line\n" * 1500),
        Message.assistant("Deploying BLD-7731 now."),
    ]
    history, facts = last_turn_facts(messages)
    assert len(history) == 4 and facts == ["BLD-7731"]
    roomy = replay_transcript(messages, lambda: Session(window=50_000, counter="heuristic"), name="roomy")
    assert roomy.retention == 1.0 and len(roomy.turns) == 3
    assert roomy.turns[1].reused == roomy.turns[0].sent  # the second request extends the first
    tight = replay_transcript(messages, lambda: Session(window=1_200, counter="heuristic"), name="tight")
    assert tight.to_dict()["facts"] == 1


def test_eval_prints_probe_table_and_judges_through_the_server(
    runner: CliRunner, chat_file: Path, tmp_path: Path
) -> None:
    def model(body: dict[str, Any]) -> str:
        system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
        return "AGREE" if system.startswith(JUDGE_PROMPT[:40]) else "the same answer"

    with ScriptedOpenAIServer(default=model) as server:
        args = ["eval", str(chat_file), "--budget", "8000", "--judge", "judge-model", "--base-url", server.base_url]
        result = runner.invoke(app, [*args, "-q", "Which file was edited?", "--json"])
        table = runner.invoke(app, ["eval", str(chat_file), "--budget", "8000"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["judge"]["fidelity"] == 1.0 and data["judge"]["questions"] == 1
    assert 0 < data["probes"]["score"] <= 1 and data["view_messages"] < data["messages"]
    assert data["compactions"]["count"] >= 1
    assert table.exit_code == 0, table.stderr
    assert "probes: all" in table.stdout and "identifiers" in table.stdout


def test_eval_judge_that_answers_nothing_scores_zero_and_says_so(runner: CliRunner, chat_file: Path) -> None:
    with ScriptedOpenAIServer(default=lambda body: "Done: PUT is idempotent.") as server:
        args = ["eval", str(chat_file), "--budget", "8000", "--judge", "judge-model", "--base-url", server.base_url]
        data = runner.invoke(app, [*args, "--json"])
        table = runner.invoke(app, [*args, "-q", "Which file was edited?"])
    assert data.exit_code == 0, data.stderr
    judged = json.loads(data.stdout)["judge"]
    assert judged["fidelity"] == 0.0 and judged["unusable"] == 1 and judged["unusable_by_step"] == {"questions": 1}
    assert table.exit_code == 0, table.stderr
    assert "judge replies unusable" in table.stdout
    assert "3 unusable replies (2 answer, 1 verdict); each counts as a failure" in " ".join(table.stderr.split())

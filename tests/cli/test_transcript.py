"""`compact FILE` and `count FILE`: formats, outputs and every bad-input path."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from contextwarden.adapters import from_messages, to_messages
from contextwarden.cli import app
from contextwarden.tokens import get_counter


def _compact(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(app, ["compact", *args])


def _tokens(messages: list[dict[str, Any]]) -> int:
    counter = get_counter("tiktoken:cl100k_base")
    total = 3
    for m in messages:
        total += 4 + counter.count_text(m.get("content") or "")
        for c in m.get("tool_calls") or ():
            total += 3 + counter.count_text(c["function"]["name"]) + counter.count_text(c["function"]["arguments"])
    return total


def test_compact_json_list_to_stdout_fits_budget_and_keeps_pairs(runner: CliRunner, chat_file: Path) -> None:
    result = _compact(runner, str(chat_file), "--budget", "8000", "--model", "gpt-4")
    assert result.exit_code == 0, result.stderr
    view = json.loads(result.stdout)
    assert isinstance(view, list) and view[0]["role"] == "system"
    assert _tokens(view) <= 8000
    calls = {c["id"] for m in view for c in m.get("tool_calls") or ()}
    results = [m["tool_call_id"] for m in view if m["role"] == "tool"]
    assert set(results) == calls and len(results) == len(set(results))
    # summary on stderr, one line, numbers in it
    summary = result.stderr.strip().splitlines()
    assert len(summary) == 1 and summary[0].startswith("compacted 122 messages")
    assert "budget 8,000" in summary[0]


def test_compact_writes_out_file_atomically_with_no_leftovers(
    runner: CliRunner, chat_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out" / "view.json"
    out.parent.mkdir()
    result = _compact(runner, str(chat_file), "--budget", "6000", "--out", str(out))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert json.loads(out.read_text())[0]["role"] == "system"
    assert [p.name for p in out.parent.iterdir()] == ["view.json"]


def test_compact_keeps_snapshots_when_asked(
    runner: CliRunner, chat_file: Path, tmp_path: Path, chat_messages: list[dict[str, Any]]
) -> None:
    snaps = tmp_path / "snaps"
    result = _compact(runner, str(chat_file), "--budget", "6000", "--snapshots", str(snaps))
    assert result.exit_code == 0, result.stderr
    written = list(snaps.rglob("snap_*.json"))
    assert written, "cleared outputs must have their originals on disk"
    assert f"{len(written)} snapshot(s) in {snaps}" in result.stderr
    originals = {m["content"] for m in chat_messages if m["role"] == "tool"}
    strings: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            strings.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for path in written:
        walk(json.loads(path.read_text()))
    assert originals & set(strings), "snapshots hold full original tool outputs"


def test_compact_jsonl_round_trips_as_jsonl(
    runner: CliRunner, tmp_path: Path, chat_messages: list[dict[str, Any]]
) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in chat_messages))
    result = _compact(runner, str(path), "--budget", "7000")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) > 2
    assert all(isinstance(json.loads(line), dict) for line in lines)


def test_compact_request_body_keeps_its_other_keys(
    runner: CliRunner, tmp_path: Path, chat_messages: list[dict[str, Any]]
) -> None:
    path = tmp_path / "body.json"
    body = {"model": "gpt-4o", "temperature": 0.2, "messages": chat_messages}
    path.write_text(json.dumps(body))
    result = _compact(runner, str(path), "--model", "gpt-4o", "--window", "16000")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["model"] == "gpt-4o" and doc["temperature"] == 0.2
    assert len(doc["messages"]) < len(chat_messages)


def test_compact_anthropic_body_keeps_system_apart(
    runner: CliRunner, tmp_path: Path, chat_messages: list[dict[str, Any]]
) -> None:
    internal = to_messages(chat_messages, format="openai")
    inline = from_messages(internal, format="anthropic")
    system = next(m["content"] for m in inline if m["role"] == "system")
    body = {"model": "claude-sonnet-4", "system": system, "messages": [m for m in inline if m["role"] != "system"]}
    path = tmp_path / "anthropic.json"
    path.write_text(json.dumps(body))
    result = _compact(runner, str(path), "--budget", "6000")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["system"]
    assert all(m["role"] in ("user", "assistant") for m in doc["messages"])
    assert len(doc["messages"]) < len(body["messages"])


def test_compact_responses_items(runner: CliRunner, tmp_path: Path, chat_messages: list[dict[str, Any]]) -> None:
    items = from_messages(to_messages(chat_messages, format="openai"), format="responses")
    path = tmp_path / "resp.json"
    path.write_text(json.dumps({"model": "gpt-4o", "input": items}))
    result = _compact(runner, str(path), "--budget", "6000")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert any(item.get("type") == "function_call" for item in doc["input"])


def test_compact_under_budget_is_unchanged(runner: CliRunner, tmp_path: Path) -> None:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    path = tmp_path / "small.json"
    path.write_text(json.dumps(msgs))
    result = _compact(runner, str(path), "--budget", "4000")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == msgs
    assert "none needed" in result.stderr


# --- bad input ---------------------------------------------------------------------------------------


def _one_error_line(result: Any) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]


def test_missing_file(runner: CliRunner) -> None:
    result = _compact(runner, "nope.json", "--budget", "1000")
    assert result.exit_code == 2
    assert "nope.json: no such file" in _one_error_line(result)


def test_directory_instead_of_file(runner: CliRunner, tmp_path: Path) -> None:
    result = _compact(runner, str(tmp_path), "--budget", "1000")
    assert result.exit_code == 2
    assert "is a directory" in _one_error_line(result)


def test_invalid_json_names_the_line(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('[\n  {"role": "user", "content": "hi"},\n  {"role": "assistant", "content": "yo",,}\n]\n')
    result = _compact(runner, str(path), "--budget", "1000")
    assert result.exit_code == 1
    line = _one_error_line(result)
    assert "invalid JSON at line 3" in line


def test_invalid_jsonl_names_the_line(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"role": "user", "content": "a"}\n{"role": "assistant", "content": "b"}\n{"role": oops}\n')
    result = _compact(runner, str(path), "--budget", "1000")
    assert result.exit_code == 1
    assert "invalid JSON at line 3" in _one_error_line(result)


def test_not_utf8(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "latin.json"
    path.write_bytes(b'[{"role": "user",\n "content": "caf\xe9"}]')
    result = _compact(runner, str(path), "--budget", "1000")
    assert result.exit_code == 1
    assert "not UTF-8 text (invalid byte at line 2)" in _one_error_line(result)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("", "the file is empty"),
        ('{"foo": 1}', "no message list found"),
        ("[]", "holds no messages"),
        ("[1, 2]", "every message must be a JSON object"),
    ],
)
def test_documents_without_messages(runner: CliRunner, tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "doc.json"
    path.write_text(content)
    result = _compact(runner, str(path), "--budget", "1000")
    assert result.exit_code == 1
    assert fragment in _one_error_line(result)


def test_unknown_model_without_window_is_a_usage_error(runner: CliRunner, chat_file: Path) -> None:
    result = _compact(runner, str(chat_file), "--model", "acme-llm-7")
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert "unknown model 'acme-llm-7'" in line and "window" in line


def test_unknown_model_with_window_works(runner: CliRunner, chat_file: Path) -> None:
    result = _compact(runner, str(chat_file), "--model", "acme-llm-7", "--window", "12000")
    assert result.exit_code == 0, result.stderr


def test_no_model_window_or_budget_is_a_usage_error(runner: CliRunner, chat_file: Path) -> None:
    result = _compact(runner, str(chat_file))
    assert result.exit_code == 2
    assert "--model" in _one_error_line(result)


def test_budget_smaller_than_the_protected_set_leaves_no_output(
    runner: CliRunner, chat_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "view.json"
    result = _compact(runner, str(chat_file), "--budget", "200", "--out", str(out))
    assert result.exit_code == 1
    line = _one_error_line(result)
    assert "protected part of the view needs" in line and "200" in line
    assert not out.exists()
    assert list(tmp_path.glob(".view.json.*")) == []
    assert result.stdout == ""


def test_existing_out_file_survives_a_failure(runner: CliRunner, chat_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "view.json"
    out.write_text("previous")
    result = _compact(runner, str(chat_file), "--budget", "200", "--out", str(out))
    assert result.exit_code == 1
    assert out.read_text() == "previous"


def test_wrong_format(runner: CliRunner, chat_file: Path) -> None:
    result = _compact(runner, str(chat_file), "--format", "anthropic", "--budget", "5000")
    assert result.exit_code == 1
    line = _one_error_line(result)
    assert "not a valid anthropic transcript" in line


def test_unknown_format_name(runner: CliRunner, chat_file: Path) -> None:
    result = _compact(runner, str(chat_file), "--format", "xml", "--budget", "5000")
    assert result.exit_code == 2
    assert "--format 'xml'" in _one_error_line(result)


# --- count ---------------------------------------------------------------------------------------------


def test_count_json_breakdown_adds_up(runner: CliRunner, chat_file: Path, chat_messages: list[dict[str, Any]]) -> None:
    result = runner.invoke(app, ["count", str(chat_file), "--model", "gpt-4", "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["messages"] == len(chat_messages)
    assert data["tokenizer"] == "tiktoken:cl100k_base"
    assert sum(r["tokens"] for r in data["by_role"].values()) + 3 == data["total_tokens"]
    assert sum(data["by_component"].values()) == data["total_tokens"]
    assert data["by_component"]["tool_results"] > data["by_component"]["system"] > 0
    assert data["by_role"]["tool"]["messages"] == sum(1 for m in chat_messages if m["role"] == "tool")
    assert data["budget"]["window"] == 8192  # gpt-4's registry window
    assert data["budget"]["state"] == "overflow"
    # the same count as the reference harness formula (4 per message + content + calls, 3 priming)
    assert data["total_tokens"] == _tokens(chat_messages)


def test_count_window_override_and_table(runner: CliRunner, chat_file: Path) -> None:
    result = runner.invoke(app, ["count", str(chat_file), "--model", "acme-llm-7", "--window", "200000"])
    assert result.exit_code == 0, result.stderr
    assert "by component" in result.stdout and "tool_results" in result.stdout
    assert "effective" in result.stdout


def test_count_unknown_model_without_window(runner: CliRunner, chat_file: Path) -> None:
    result = runner.invoke(app, ["count", str(chat_file), "--model", "acme-llm-7"])
    assert result.exit_code == 2
    assert "unknown model" in _one_error_line(result)


# --- count and compact agree; errors name flags ---------------------------------------------------

_SUMMARY = re.compile(r"compacted (\d+) messages \(([\d,]+) tokens\).*?(?:, plus ([\d,]+) in tool schemas)?; budget")


def _compact_total(result: Any) -> tuple[int, int]:
    """(message tokens, tool-schema tokens) from compact's one-line summary."""
    match = _SUMMARY.search(" ".join(result.stderr.split()))
    assert match, result.stderr
    return int(match.group(2).replace(",", "")), int((match.group(3) or "0").replace(",", ""))


@pytest.mark.parametrize(
    "flags",
    [
        ["--budget", "20000"],  # no model: both count as for gpt-4o
        ["--model", "gpt-4o"],
        ["--model", "claude-sonnet-4-5"],  # Anthropic framing for both
        ["--model", "acme-llm-7", "--window", "64000"],
    ],
)
def test_count_and_compact_report_the_same_total(
    runner: CliRunner, tmp_path: Path, chat_messages: list[dict[str, Any]], flags: list[str]
) -> None:
    tools = [{"type": "function", "function": {"name": "grep", "parameters": {"type": "object", "properties": {}}}}]
    body = tmp_path / "request.json"
    body.write_text(json.dumps({"model": "x", "tools": tools, "messages": chat_messages}))
    count_flags = [f for f in flags if f not in ("--budget", "20000")]
    counted = runner.invoke(app, ["count", str(body), *count_flags, "--json"])
    assert counted.exit_code == 0, counted.stderr
    data = json.loads(counted.stdout)
    compacted = _compact(runner, str(body), *flags)
    assert compacted.exit_code == 0, compacted.stderr
    messages, schemas = _compact_total(compacted)
    assert messages == data["budget"]["used"]
    assert schemas == data["by_component"]["tool_schemas"] > 0
    assert messages + schemas == data["total_tokens"]


def test_an_unknown_model_error_names_the_flag(runner: CliRunner, chat_file: Path) -> None:
    for command in ("compact", "count"):
        line = _one_error_line(runner.invoke(app, [command, str(chat_file), "--model", "acme-llm-7"]))
        assert "`--window`" in line and "window=" not in line
        assert "max_output=" not in line and "register_model" not in line and "[models." in line


def test_a_file_name_with_brackets_is_printed_as_is(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "run[b]1.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    result = runner.invoke(app, ["count", str(path)])
    assert result.exit_code == 0, result.stderr
    assert "run[b]1.json" in result.stdout


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("deep.json", "[" * 5000 + "]" * 5000),
        ("unclosed.json", "[" * 5000),
        ("deep.jsonl", '{"role": "user", "content": "hi"}\n' + '{"a":' * 5000 + "1" + "}" * 5000 + "\n"),
        ("huge-number.json", '[{"role": "user", "content": "hi", "n": ' + "9" * 5000 + "}]"),
    ],
)
@pytest.mark.parametrize("command", ["count", "compact"])
def test_a_transcript_nested_too_deep_or_with_a_huge_number_is_one_error_line(
    runner: CliRunner, tmp_path: Path, command: str, name: str, text: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    result = runner.invoke(app, [command, str(path), "--model", "gpt-4o"])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"error: {path}") and "unexpected" not in result.stderr
    assert len(result.stderr.splitlines()) == 1

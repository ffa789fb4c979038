"""`sessions list|show|export|import|delete` and `inspect` over a real SQLite store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from contextwarden.cli import app
from contextwarden.session import Session
from contextwarden.stores import open_store


@pytest.fixture
def store_url(tmp_path: Path, chat_messages: list[dict[str, Any]]) -> str:
    """A SQLite store holding one compacted session, ``s1``, written through the library."""
    url = f"sqlite:///{tmp_path / 'cw.db'}"
    with open_store(url) as store:
        session = Session("s1", model="gpt-4", window=8192, store=store)
        for i in range(0, len(chat_messages), 6):
            session.add(chat_messages[i : i + 6])
            session.prepare()
        session.save_status()
    return url


def invoke(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(app, list(args))


def test_list_json_and_table(runner: CliRunner, store_url: str, chat_messages: list[dict[str, Any]]) -> None:
    result = invoke(runner, "sessions", "list", "--store", store_url, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert [s["session_id"] for s in data["sessions"]] == ["s1"]
    assert data["sessions"][0]["message_count"] == len(chat_messages)
    table = invoke(runner, "sessions", "list", "--store", store_url)
    assert table.exit_code == 0 and "s1" in table.stdout and "gpt-4" in table.stdout


def test_default_store_is_sqlite_in_the_user_dir(runner: CliRunner, user_dir: Path) -> None:
    result = invoke(runner, "sessions", "list", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["store"] == f"sqlite:///{user_dir / 'sessions.db'}"
    assert (user_dir / "sessions.db").is_file()


def test_store_url_from_environment(runner: CliRunner, store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTWARDEN_STORE__URL", store_url)
    result = invoke(runner, "sessions", "list", "--json")
    assert json.loads(result.stdout)["store"] == store_url


def test_show(runner: CliRunner, store_url: str) -> None:
    result = invoke(runner, "sessions", "show", "s1", "--store", store_url, "--tail", "2", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["session"]["model"] == "gpt-4" and len(data["tail"]) == 2
    assert data["snapshots"] > 0
    table = invoke(runner, "sessions", "show", "s1", "--store", store_url)
    assert "last 10 message(s)" in table.stdout


def test_export_import_round_trip(runner: CliRunner, store_url: str, tmp_path: Path) -> None:
    out = tmp_path / "s1.jsonl"
    result = invoke(runner, "sessions", "export", "s1", "--store", store_url, "--out", str(out))
    assert result.exit_code == 0, result.stderr
    lines = out.read_text().splitlines()
    assert len(lines) > 10
    result = invoke(runner, "sessions", "import", str(out), "--store", store_url, "--id", "s2")
    assert result.exit_code == 0, result.stderr
    with open_store(store_url) as store:
        assert store.load_messages("s2") == store.load_messages("s1")
    again = invoke(runner, "sessions", "import", str(out), "--store", store_url, "--id", "s2")
    assert again.exit_code == 1
    assert again.stderr.startswith("error: ") and len(again.stderr.strip().splitlines()) == 1


def test_export_to_stdout(runner: CliRunner, store_url: str) -> None:
    result = invoke(runner, "sessions", "export", "s1", "--store", store_url)
    assert result.exit_code == 0
    assert all(json.loads(line) for line in result.stdout.splitlines())


def test_import_errors(runner: CliRunner, store_url: str, tmp_path: Path) -> None:
    missing = invoke(runner, "sessions", "import", str(tmp_path / "nope.jsonl"), "--store", store_url)
    assert missing.exit_code == 2 and "no such file" in missing.stderr
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n")
    bad = invoke(runner, "sessions", "import", str(junk), "--store", store_url)
    assert bad.exit_code == 1 and bad.stderr.startswith("error: ")


def test_delete_asks_then_deletes(runner: CliRunner, store_url: str) -> None:
    declined = runner.invoke(app, ["sessions", "delete", "s1", "--store", store_url], input="n\n")
    assert declined.exit_code == 1
    with open_store(store_url) as store:
        assert store.get_session("s1").session_id == "s1"
    result = invoke(runner, "sessions", "delete", "s1", "--store", store_url, "--yes")
    assert result.exit_code == 0
    listed = invoke(runner, "sessions", "list", "--store", store_url, "--json")
    assert json.loads(listed.stdout)["sessions"] == []


def test_unknown_session(runner: CliRunner, store_url: str) -> None:
    for args in (("sessions", "show", "nope"), ("sessions", "export", "nope"), ("inspect", "nope")):
        result = invoke(runner, *args, "--store", store_url)
        assert result.exit_code == 1
        assert result.stderr.strip() == (
            "error: no session 'nope' in the store; list them with `contextwarden sessions list`."
        )


def test_bad_store_url(runner: CliRunner) -> None:
    result = invoke(runner, "sessions", "list", "--store", "ftp://x")
    assert result.exit_code == 2
    assert "unknown scheme 'ftp'" in result.stderr and "memory://" in result.stderr


def test_inspect_resumes_the_stored_view(runner: CliRunner, store_url: str) -> None:
    with open_store(store_url) as store:
        expected = Session("s1", model="gpt-4", window=8192, store=store).status()
        audit_before = len(store.read_audit("s1"))
    result = invoke(runner, "inspect", "s1", "--store", store_url, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["figures"]["used"] == expected.used
    assert data["figures"]["compactions"] == expected.compactions and expected.compactions
    assert data["figures"]["last_layer"] == expected.last_layer and expected.last_layer
    assert data["snapshots"]["count"] > 0
    assert data["audit"]["compactions_by_layer"]
    assert data["ledger"]
    with open_store(store_url) as store:
        assert len(store.read_audit("s1")) == audit_before, "inspect writes nothing"
    table = invoke(runner, "inspect", "s1", "--store", store_url)
    assert "progress ledger" in table.stdout and "audit log" in table.stdout


def test_errors_name_the_flag_or_argument_not_the_parameter(runner: CliRunner, store_url: str, tmp_path: Path) -> None:
    export = tmp_path / "s1.jsonl"
    assert invoke(runner, "sessions", "export", "s1", "--store", store_url, "--out", str(export)).exit_code == 0
    empty = invoke(runner, "sessions", "import", str(export), "--store", store_url, "--id", "")
    assert empty.exit_code == 2 and "`--id` is empty" in empty.stderr and "session_id" not in empty.stderr
    taken = invoke(runner, "sessions", "import", str(export), "--store", store_url)
    assert "already exists" in taken.stderr and "another `--id`" in taken.stderr
    long_id = invoke(runner, "inspect", "x" * 300, "--store", store_url)
    assert long_id.exit_code == 2 and "the SESSION_ID argument" in long_id.stderr
    assert "session_id" not in long_id.stderr


def test_store_help_shows_the_config_section_name(runner: CliRunner) -> None:
    for command in (["sessions", "list"], ["inspect"], ["demo"]):
        result = runner.invoke(app, [*command, "--help"])
        text = " ".join(result.stdout.replace("│", " ").split())
        assert "(default: [store] url" in text, result.stdout  # rich markup would swallow it unescaped


def test_stored_text_that_looks_like_markup_is_shown_as_is(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with open_store(url) as store:
        session = Session("[b]odd[/b]", window=8000, counter="heuristic", store=store)
        session.add([{"role": "user", "content": "why does [/red] break the [bold] log?"}])
    shown = invoke(runner, "sessions", "show", "[b]odd[/b]", "--store", url)
    assert shown.exit_code == 0, shown.stderr
    assert "[b]odd[/b]" in shown.stdout and "[/red]" in shown.stdout
    listed = invoke(runner, "sessions", "list", "--store", url)
    assert "[b]odd[/b]" in listed.stdout

"""Every command's error paths through the real command line: bad flags, missing files, bad store URLs,
unreachable servers, bad config. Each error is one line that names what the user can change (a flag, a
config key, a file), never a library parameter, with no traceback and a non-zero exit code."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from contextwarden.cli import app

UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1: refused at once

# (arguments, what the message must name); files are made by the `files` fixture in the working directory
CASES: dict[str, tuple[list[str], str]] = {
    "demo: turns below the minimum": (["demo", "--turns", "3"], "--turns"),
    "demo: window below the minimum": (["demo", "--window", "10"], "--window"),
    "demo: negative delay": (["demo", "--delay", "-1"], "--delay"),
    "demo: seed not a number": (["demo", "--seed", "abc"], "--seed"),
    "demo: unknown store scheme": (["demo", "--turns", "30", "--no-live", "--store", "bogus://x"], "memory://"),
    "demo: unreachable store": (["demo", "--turns", "30", "--no-live", "--store", UNREACHABLE_REDIS], "--store"),
    "compact: missing file": (["compact", "missing.json", "--budget", "1000"], "missing.json"),
    "compact: file not JSON": (["compact", "bad.json", "--budget", "1000"], "bad.json"),
    "compact: no message list": (["compact", "object.json", "--budget", "1000"], "object.json: no message list"),
    "compact: no budget at all": (["compact", "ok.json"], "--budget"),
    "compact: zero budget": (["compact", "ok.json", "--budget", "0"], "--budget"),
    "compact: unknown format": (["compact", "ok.json", "--budget", "1000", "--format", "bogus"], "--format"),
    "compact: output directory missing": (["compact", "ok.json", "-b", "900", "--out", "no/dir/x.json"], "no/dir"),
    "compact: budget below the transcript's protected part": (["compact", "ok.json", "--budget", "9"], "--budget"),
    "count: missing file": (["count", "missing.json"], "missing.json"),
    "count: unknown model": (["count", "ok.json", "--model", "no-such-model"], "--window"),
    "count: zero window": (["count", "ok.json", "--window", "0"], "--window"),
    "inspect: no such session": (["inspect", "nope", "--store", "sqlite:///s.db"], "sessions list"),
    "inspect: unknown store scheme": (["inspect", "nope", "--store", "bogus://x"], "memory://"),
    "inspect: unreachable store": (["inspect", "nope", "--store", UNREACHABLE_REDIS], "--store"),
    "inspect: negative ledger tokens": (["inspect", "nope", "--ledger-tokens", "-1"], "--ledger-tokens"),
    "eval: missing file": (["eval", "missing.json"], "missing.json"),
    "eval: base URL not http": (["eval", "ok.json", "-b", "900", "--judge", "m", "--base-url", "nope"], "--base-url"),
    "eval: unreachable judge": (
        ["eval", "ok.json", "-b", "900", "--judge", "m", "--base-url", "http://127.0.0.1:1/v1"],
        "--base-url",
    ),
    "eval: key variable unset": (
        ["eval", "ok.json", "-b", "900", "--judge", "m", "--api-key-env", "CW_NO_SUCH_VARIABLE"],
        "--api-key-env",
    ),
    "eval: zero questions": (["eval", "ok.json", "--n-questions", "0"], "--n-questions"),
    "replay: missing file": (["replay", "missing.json", "--budget", "1000"], "missing.json"),
    "replay: no budget at all": (["replay", "ok.json"], "--budget"),
    "replay: missing config": (["replay", "ok.json", "--budget", "900", "--config", "missing.toml"], "--config"),
    "replay: broken config": (["replay", "ok.json", "--budget", "900", "--config", "broken.toml"], "broken.toml"),
    "replay: file and session": (["replay", "ok.json", "--session", "s", "--budget", "900"], "--session"),
    "serve: port out of range": (["serve", "--port", "99999"], "--port"),
    "serve: upstream not a URL": (["serve", "--upstream", "not-a-url"], "--upstream"),
    "serve: unknown store scheme": (["serve", "--store", "bogus://x"], "memory://"),
    "serve: unknown log level": (["serve", "--log-level", "loud"], "--log-level"),
    "serve: host cannot be bound": (["serve", "--host", "999.1.1.1", "--port", "0"], "--host"),
    "serve: missing config": (["serve", "--config", "missing.toml"], "missing.toml"),
    "serve: invalid config": (["serve", "--config", "invalid.toml"], "service.port"),
    "doctor: upstream not a URL": (["doctor", "--upstream", "not-a-url"], "--upstream"),
    "doctor: unreachable upstream": (["doctor", "--upstream", "http://127.0.0.1:1/v1", "--store", "memory://"], "fix:"),
    "doctor: unknown store scheme": (["doctor", "--store", "bogus://x"], "memory://"),
    "sessions list: unreachable store": (["sessions", "list", "--store", UNREACHABLE_REDIS], "--store"),
    "sessions list: zero limit": (["sessions", "list", "--limit", "0"], "--limit"),
    "sessions show: no such session": (["sessions", "show", "nope", "--store", "sqlite:///s.db"], "sessions list"),
    "sessions show: negative tail": (["sessions", "show", "nope", "--tail", "-1"], "--tail"),
    "sessions export: no such session": (["sessions", "export", "nope", "--store", "sqlite:///s.db"], "sessions list"),
    "sessions import: missing file": (["sessions", "import", "missing.jsonl", "--store", "sqlite:///s.db"], "missing"),
    "sessions import: not JSON": (["sessions", "import", "bad.json", "--store", "sqlite:///s.db"], "bad.json"),
    "sessions import: a transcript": (["sessions", "import", "ok.json", "--store", "sqlite:///s.db"], "ok.json"),
    "sessions delete: no such session": (["sessions", "delete", "nope", "-y", "--store", "sqlite:///s.db"], "list"),
    "config show: unknown model": (["config", "show", "--model", "no-such-model"], "[models."),
    "config show: missing config": (["--config", "missing.toml", "config", "show"], "missing.toml"),
    "config show: invalid config": (["--config", "invalid.toml", "config", "show"], "config validate"),
    "config validate: missing file": (["config", "validate", "missing.toml"], "missing.toml"),
    "config validate: invalid file": (["config", "validate", "invalid.toml"], "service.port"),
    "bench probes: missing data": (["bench", "probes", "--data", "missing.json"], "--data"),
    "bench probes: budgets not numbers": (["bench", "probes", "--budgets", "abc"], "--budgets"),
    "bench probes: unknown mode": (["bench", "probes", "--mode", "bogus"], "--mode"),
    "bench fidelity: zero budget": (["bench", "fidelity", "--budgets", "0"], "--budgets"),
    "bench stores: unknown backend": (["bench", "stores", "--backends", "bogus"], "--backends"),
    "bench stores: unreachable redis": (
        ["bench", "stores", "--backends", "redis", "--redis-url", UNREACHABLE_REDIS, "--messages", "100"],
        "--redis-url",
    ),
    "bench tokens: missing harness": (["bench", "tokens", "--bench-script", "missing.py"], "builtin"),
    "bench trim: sizes not numbers": (["bench", "trim", "--sizes", "abc"], "--sizes"),
    "bench trim: zero window": (["bench", "trim", "--window", "0"], "--window"),
    "bench locomo: unknown embedder": (["bench", "locomo", "--embedder", "bogus"], "--embedder"),
    "bench memory: zero memories": (["bench", "memory", "--memories", "0"], "--memories"),
    "bench proxy: unknown store": (["bench", "proxy", "--stores", "bogus"], "--stores"),
    "bench proxy: bad redis URL": (["bench", "proxy", "--stores", "redis", "--redis-url", "bogus://x"], "--redis-url"),
}

LIBRARY_WORDS = re.compile(r"`[a-z_]+=`|register_model|ModelInfo|\bbase_url\b|\bsession_id\b|\bmax_tokens=")
"""How a library parameter shows in a message written for Python callers."""


def _leaf_commands() -> set[str]:
    found: set[str] = set()

    def walk(command: Any, path: list[str]) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                walk(sub, [*path, name])
        else:
            found.add(" ".join(path))

    walk(typer.main.get_command(app), [])
    return found


def _command_of(args: list[str]) -> str:
    leaves = _leaf_commands()
    if args[0] == "--config":  # the root's option and its value come first
        args = args[2:]
    words = [a for a in args if not a.startswith("-")]
    for size in (2, 1):
        if " ".join(words[:size]) in leaves:
            return " ".join(words[:size])
    raise AssertionError(f"no command in {args}")


@pytest.fixture
def files() -> None:
    """The files the cases name, in the working directory (a temporary one, see conftest)."""
    Path("ok.json").write_text('[{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]')
    Path("bad.json").write_text("not json")
    Path("object.json").write_text("{}")
    Path("broken.toml").write_text("this is = = not toml")
    Path("invalid.toml").write_text('[service]\nport = "abc"\n')


def _check(result: Any, expected: str) -> None:
    shown = result.stderr + result.stdout
    assert result.exit_code != 0, shown
    assert "Traceback" not in shown
    assert expected in shown, shown
    assert not LIBRARY_WORDS.search(shown), shown
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) <= 1 and all(not line.startswith(" ") for line in errors), result.stderr


@pytest.mark.parametrize("case", CASES)
def test_an_error_names_what_the_user_can_change(runner: CliRunner, files: None, case: str) -> None:
    args, expected = CASES[case]
    _check(runner.invoke(app, args), expected)


def test_every_command_has_its_error_cases() -> None:
    covered = {_command_of(args) for args, _ in CASES.values()}
    assert covered == _leaf_commands()


@pytest.mark.parametrize("command", sorted(_leaf_commands()))
def test_an_unknown_flag_is_a_usage_error_naming_it(runner: CliRunner, command: str) -> None:
    result = runner.invoke(app, [*command.split(), "--no-such-flag"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: No such option: --no-such-flag"), result.stderr
    assert f"{command} --help" in result.stderr

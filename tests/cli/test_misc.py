"""The root command: help, version, unknown commands, placeholders, --debug."""

from __future__ import annotations

from typer.testing import CliRunner

from contextwarden import __version__
from contextwarden.cli import app


def test_no_arguments_shows_help_with_usage_exit_code(runner: CliRunner) -> None:
    result = runner.invoke(app, [])
    assert result.exit_code == 2
    for command in ("demo", "compact", "count", "inspect", "sessions", "config", "bench", "serve"):
        assert command in result.stdout


def test_version(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"contextwarden {__version__}"


def test_unknown_command_is_one_line_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(app, ["nonsense"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: No such command 'nonsense'")


def test_bad_option_value_is_one_line_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(app, ["compact", "x.json", "--budget", "-3"])
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "--budget" in result.stderr


def test_serve_refuses_a_bad_log_level_in_one_line(runner: CliRunner) -> None:
    result = runner.invoke(app, ["serve", "--log-level", "loud"])
    assert result.exit_code == 2
    assert "--log-level" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_debug_shows_the_traceback_instead_of_one_line(runner: CliRunner, tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "t.json"
    missing.write_text('[{"role": "user", "content": "hi"}]')
    plain = runner.invoke(app, ["compact", str(missing), "--model", "no-such-model-xyz"])
    assert plain.exit_code == 2
    assert plain.stderr.startswith("error: unknown model 'no-such-model-xyz'")
    assert plain.exception is None or isinstance(plain.exception, SystemExit)
    debug = runner.invoke(app, ["--debug", "compact", str(missing), "--model", "no-such-model-xyz"])
    assert debug.exit_code == 1
    assert type(debug.exception).__name__ == "UnknownModelError"

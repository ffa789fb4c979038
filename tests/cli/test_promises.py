"""What the command line promises: plain flags and real defaults in the help, every config problem in one
run, the state's rule next to the state, errors in the user's words, output not wrapped when piped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextwarden.cli import app
from contextwarden.cli._common import command_prefix


@pytest.mark.parametrize("command", [["demo"], ["sessions", "list"], ["inspect"], ["config", "show"], ["serve"]])
def test_help_shows_flags_without_a_value_type(runner: CliRunner, command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    assert "--help " in result.output


def test_serve_help_shows_the_real_defaults(runner: CliRunner) -> None:
    result = runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    text = " ".join(result.output.split())
    assert "(default: 127.0.0.1, or `[service] host`)" in text
    assert "(default: 8787, or `[service] port`)" in text
    assert "default:  " not in text  # no default left empty by markup eating `[service]`


def test_validate_reports_a_schema_error_and_the_other_problems_in_one_run(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "cw.toml"
    config.write_text(
        '[service]\nport = 99999\n\n[compaction]\nhigh_water = 0.5\nlow_water = 0.6\n\n[store]\nurl = "bogus://x"\n'
    )
    result = runner.invoke(app, ["config", "validate", str(config), "--json"])
    assert result.exit_code == 1
    keys = [p["key"] for p in json.loads(result.stdout)["problems"]]
    assert "service.port" in keys and "store.url" in keys
    assert any(k.startswith("compaction.") for k in keys)


def test_config_show_says_which_state_rule_applies(runner: CliRunner, tmp_path: Path) -> None:
    shown = runner.invoke(app, ["config", "show", "--json"])
    rule = json.loads(shown.stdout)["derived"]["state_rule"]
    assert rule["mode"] == "band" and set(rule["marks"]) == {"low water", "high water", "overflow"}
    text = " ".join(runner.invoke(app, ["config", "show"]).stdout.split())
    assert "state rule: band:" in text and "apply only with compaction.pressure_states = 'ratio'" in text
    config = tmp_path / "ratio.toml"
    config.write_text('[compaction]\npressure_states = "ratio"\n')
    shown = runner.invoke(app, ["--config", str(config), "config", "show", "--json"])
    assert shown.exit_code == 0, shown.output
    rule = json.loads(shown.stdout)["derived"]["state_rule"]
    assert rule["mode"] == "ratio" and set(rule["marks"]) == {"warning", "error", "critical", "overflow"}


def test_an_error_names_the_flag_not_the_library_parameter(runner: CliRunner, tmp_path: Path) -> None:
    transcript = tmp_path / "t.json"
    transcript.write_text('[{"role": "user", "content": "hi"}]')
    result = runner.invoke(app, ["count", str(transcript), "--model", "no-such-model"])
    assert result.exit_code != 0
    assert "--window" in result.stderr and "window=" not in result.stderr
    assert "register_model" not in result.stderr


def test_piped_output_is_not_wrapped(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cw.db'}"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"CONTEXTWARDEN_HOME": str(tmp_path / "home")}
    run = [sys.executable, "-m", "contextwarden"]
    args = ["demo", "--turns", "30", "--no-live", "--store", store, "--report", str(tmp_path / "r.html")]
    done = subprocess.run([*run, *args], capture_output=True, text=True, env=env, timeout=300, check=True)
    session_line = next(line for line in done.stdout.splitlines() if "session " in line and "inspect" in line)
    # one line, not cut at 80 columns; the command runs as printed (this interpreter when its script is not on PATH)
    assert f"({command_prefix()} inspect demo-7 --store {store})" in session_line
    listed = subprocess.run(
        [*run, "sessions", "list", "--store", store], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    assert any("demo-7" in line and "band" in line for line in listed.stdout.splitlines())

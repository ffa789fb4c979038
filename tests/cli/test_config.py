"""`config show` and `config validate`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextwarden.cli import app


def test_show_layers_file_and_environment(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_dir: Path
) -> None:
    cfg = tmp_path / "cw.toml"
    cfg.write_text("[compaction]\nlow_water = 0.4\nhigh_water = 0.9\n[agent_context]\nmin_keep_recent_rounds = 5\n")
    monkeypatch.setenv("CONTEXTWARDEN_COMPACTION__HIGH_WATER", "0.95")
    result = runner.invoke(app, ["--config", str(cfg), "config", "show", "--json", "--model", "gpt-4o"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["config_file"] == str(cfg)
    assert data["user_dir"] == str(user_dir)
    assert "CONTEXTWARDEN_COMPACTION__HIGH_WATER" in data["environment"]
    compaction = data["derived"]["compaction"]
    assert compaction["low_water"] == 0.4  # file
    assert compaction["high_water"] == 0.95  # environment beats the file
    assert compaction["keep_recent_rounds"] == 5  # seed key mapped
    assert data["derived"]["model"]["window"] == 128_000
    table = runner.invoke(app, ["--config", str(cfg), "config", "show"])
    assert "keep_recent_rounds" in table.stdout and "config" in table.stdout


def test_show_finds_the_user_config(runner: CliRunner, user_dir: Path) -> None:
    user_dir.mkdir(parents=True)
    (user_dir / "config.yaml").write_text("agent_context:\n  warning_threshold: 0.6\n")
    result = runner.invoke(app, ["config", "show", "--json"])
    data = json.loads(result.stdout)
    assert data["config_file"] == str(user_dir / "config.yaml")
    assert data["derived"]["thresholds"]["warning"] == 0.6


def test_validate_ok(runner: CliRunner, tmp_path: Path) -> None:
    cfg = tmp_path / "ok.toml"
    cfg.write_text('model = "gpt-4o"\n[compaction]\neviction_policy = "lru"\n')
    result = runner.invoke(app, ["config", "validate", str(cfg)])
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok: ")


def test_validate_lists_every_problem_with_line_and_allowed_values(runner: CliRunner, tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(
        "[agent_context]\n"  # 1
        "warning_threshold = 0.7\n"  # 2
        "max_compact_failures = 0\n"  # 3
        "colour = 'blue'\n"  # 4
        "\n"  # 5
        "[compaction]\n"  # 6
        "eviction_policy = 'lifo'\n"  # 7
        "layers = ['clear', 'drop']\n"  # 8
    )
    result = runner.invoke(app, ["config", "validate", str(cfg), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    problems = {(p["key"], p["line"]): p for p in data["problems"]}
    assert set(problems) == {
        ("agent_context.max_compact_failures", 3),
        ("agent_context.colour", 4),
        ("compaction.eviction_policy", 7),
        ("compaction.layers.1", 8),
    }
    assert "max_context_tokens" in problems[("agent_context.colour", 4)]["allowed"]
    assert "'fifo'" in problems[("compaction.eviction_policy", 7)]["allowed"]
    assert ">= 1" in problems[("agent_context.max_compact_failures", 3)]["allowed"]
    text = runner.invoke(app, ["config", "validate", str(cfg)])
    assert f"{cfg}:7: compaction.eviction_policy" in text.stdout
    assert "4 problem(s)" in text.stderr


def test_validate_missing_file(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["config", "validate", str(tmp_path / "nope.toml")])
    assert result.exit_code == 2
    assert "no such file" in result.stderr


def test_invalid_config_breaks_other_commands_with_one_line(runner: CliRunner, tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[compaction]\nhigh_water = 'high'\n")
    result = runner.invoke(app, ["--config", str(cfg), "sessions", "list"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "compaction.high_water" in lines[0] and "config validate" in lines[0]


def test_missing_config_file_flag(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["--config", str(tmp_path / "nope.toml"), "config", "show"])
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


def _documented_toml() -> str:
    """The example config file of the configuration guide (its first ```toml block)."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "configuration.md").read_text(encoding="utf-8")
    return guide.split("```toml\n", 1)[1].split("```", 1)[0]


def test_the_documented_example_config_validates_and_works_at_use(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "me"))  # the example's store lives under ~
    cfg = tmp_path / "contextwarden.toml"
    cfg.write_text(_documented_toml(), encoding="utf-8")
    validated = runner.invoke(app, ["--config", str(cfg), "config", "validate"])
    assert validated.exit_code == 0, validated.stdout + validated.stderr
    listed = runner.invoke(app, ["--config", str(cfg), "sessions", "list", "--json"])
    assert listed.exit_code == 0, listed.stderr
    store = json.loads(listed.stdout)["store"]
    assert "<" not in store and store.startswith(f"sqlite:///{tmp_path / 'me'}")
    assert Path(store.removeprefix("sqlite:///")).is_file()


def test_validate_catches_a_placeholder_store_path(runner: CliRunner, tmp_path: Path) -> None:
    cfg = tmp_path / "cw.toml"
    cfg.write_text('[store]\nurl = "sqlite:///<user dir>/sessions.db"\n')
    result = runner.invoke(app, ["config", "validate", str(cfg)])
    assert result.exit_code == 1
    assert f"{cfg}:2: store.url:" in result.stdout and "placeholder" in result.stdout
    # and using it fails the same way, before anything is created
    used = runner.invoke(app, ["--config", str(cfg), "sessions", "list"])
    assert used.exit_code == 2 and "placeholder" in used.stderr
    assert not (tmp_path / "work" / "<user dir>").exists()


def test_validate_checks_store_urls_offline_and_connects_on_request(runner: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[store]\nurl = "redis://localhost:abc/0"\n')
    result = runner.invoke(app, ["config", "validate", str(bad), "--json"])
    assert result.exit_code == 1
    [problem] = json.loads(result.stdout)["problems"]
    assert problem["key"] == "store.url" and "port 'abc'" in problem["message"]
    dead = tmp_path / "dead.toml"
    dead.write_text('[store]\nurl = "redis://127.0.0.1:1/0"\n')  # nothing listens on port 1
    offline = runner.invoke(app, ["config", "validate", str(dead)])
    assert offline.exit_code == 0, offline.stdout  # no connection by default
    online = runner.invoke(app, ["config", "validate", str(dead), "--connect"])
    assert online.exit_code == 1 and "cannot use the store" in online.stdout
    ok = tmp_path / "ok.toml"
    ok.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "db" / "cw.db"}"\n')
    connected = runner.invoke(app, ["config", "validate", str(ok), "--connect"])
    assert connected.exit_code == 0, connected.stdout


def test_validate_refuses_a_yaml_alias_bomb(runner: CliRunner, tmp_path: Path) -> None:
    levels = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    levels += [f"{c}: &{c} [{','.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(levels) + "\n")
    result = runner.invoke(app, ["config", "validate", str(bomb)])
    assert result.exit_code == 1 and "(limits)" in result.stdout and "aliases" in result.stdout

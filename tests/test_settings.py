"""Settings: user dir, layering (defaults < file < env < flags), seed keys, validation with lines."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextwarden.budget import Thresholds
from contextwarden.compaction.config import CompactionConfig
from contextwarden.exceptions import ConfigError
from contextwarden.settings import (
    CompactionSection,
    Settings,
    find_config_file,
    load_settings,
    user_dir,
    validate_config_file,
)


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in list(os.environ):
        if key.startswith("CONTEXTWARDEN_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("CONTEXTWARDEN_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    yield


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_user_dir_from_env_else_platform_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert user_dir() == tmp_path / "home"
    monkeypatch.delenv("CONTEXTWARDEN_HOME")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr("sys.platform", "linux")
    assert user_dir() == tmp_path / "xdg" / "contextwarden"
    monkeypatch.setattr("sys.platform", "darwin")
    assert user_dir() == Path.home() / "Library" / "Application Support" / "contextwarden"


def test_defaults_build_the_library_defaults() -> None:
    s = load_settings()
    assert s.compaction_config() == CompactionConfig()
    assert s.thresholds() == Thresholds()
    assert s.store_url == f"sqlite:///{user_dir() / 'sessions.db'}"
    assert s.summarizer.model == "none"


def test_every_compaction_option_is_a_config_key() -> None:
    keys = set(CompactionSection.model_fields) - {"profile"}
    assert keys == {f.name for f in dataclasses.fields(CompactionConfig)}


def test_layering_file_then_env_then_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = write(tmp_path / "cw.toml", "[compaction]\nlow_water = 0.4\nhigh_water = 0.9\nkeep_recent_rounds = 4\n")
    assert load_settings(cfg).compaction_config().high_water == 0.9
    monkeypatch.setenv("CONTEXTWARDEN_COMPACTION__HIGH_WATER", "0.95")
    s = load_settings(cfg)
    config = s.compaction_config()
    assert (config.low_water, config.high_water, config.keep_recent_rounds) == (0.4, 0.95, 4)
    flagged = load_settings(cfg, compaction={"high_water": 0.8})
    assert flagged.compaction_config().high_water == 0.8
    assert flagged.compaction_config().low_water == 0.4  # flags merge with the lower layers, key by key


def test_toml_and_yaml_read_the_same(tmp_path: Path) -> None:
    toml = write(
        tmp_path / "a.toml",
        'model = "gpt-4o"\n[agent_context]\nmax_context_tokens = 64000\nwarning_threshold = 0.6\n'
        '[compaction]\neviction_policy = "hybrid"\n[compaction.hybrid_weights]\nfreshness = 0.5\n'
        '[models."my-llama"]\ncontext_length = 8192\n',
    )
    yaml = write(
        tmp_path / "a.yaml",
        "model: gpt-4o\nagent_context:\n  max_context_tokens: 64000\n  warning_threshold: 0.6\n"
        "compaction:\n  eviction_policy: hybrid\n  hybrid_weights:\n    freshness: 0.5\n"
        "models:\n  my-llama:\n    context_length: 8192\n",
    )
    a, b = load_settings(toml), load_settings(yaml)
    assert a.model_dump() == b.model_dump()
    assert a.compaction_config().hybrid_weights.freshness == 0.5
    assert a.compaction_config().hybrid_weights.priority == 0.3  # unset weight keeps its default


def test_seed_keys_map_onto_the_library(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "seed.toml",
        "[agent_context]\n"
        "max_context_tokens = 50000\nreserved_tokens = 4000\n"
        "warning_threshold = 0.6\nerror_threshold = 0.8\ncritical_threshold = 0.9\n"
        "min_keep_recent_rounds = 6\nmax_observation_age_rounds = 8\ntruncated_observation_max_chars = 300\n"
        "max_compact_failures = 5\nmin_keep_tokens = 30000\n",
    )
    s = load_settings(cfg)
    assert s.window_for("gpt-4o") == 50_000
    assert s.reserved_output_for("gpt-4o", 50_000) == 4000
    assert s.thresholds() == Thresholds(warning=0.6, error=0.8, critical=0.9)
    config = s.compaction_config(effective=46_000)
    assert config.keep_recent_rounds == 6
    assert config.clear_after_rounds == 8
    assert config.cleared_head_chars == 300
    assert config.max_summarizer_failures == 5
    # min_keep_tokens: compaction never cuts below 30,000 of 46,000 tokens
    assert config.low_water == pytest.approx(30_000 / 46_000, abs=1e-3)
    assert config.min_low_water == config.low_water


def test_seed_profile_compacts_from_the_warning_threshold(tmp_path: Path) -> None:
    cfg = write(tmp_path / "p.toml", '[agent_context]\nwarning_threshold = 0.65\n[compaction]\nprofile = "seed"\n')
    config = load_settings(cfg).compaction_config()
    assert config.high_water == 0.65
    assert config.gate("summarize") == 0.9
    assert config.low_water == pytest.approx(0.55)


def test_a_seed_key_and_its_new_name_must_agree(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "c.toml", "[agent_context]\nmin_keep_recent_rounds = 2\n[compaction]\nkeep_recent_rounds = 4\n"
    )
    with pytest.raises(ConfigError, match="keep_recent_rounds"):
        load_settings(cfg).compaction_config()
    problems = validate_config_file(cfg, environment=False)
    assert [(p.key, p.line) for p in problems] == [("agent_context.min_keep_recent_rounds", 2)]


def test_model_overrides_the_registry(tmp_path: Path) -> None:
    cfg = write(tmp_path / "m.toml", '[models."GPT-4o"]\ncontext_length = 32000\nmax_output = 2000\n')
    s = load_settings(cfg)
    assert s.window_for("gpt-4o") == 32_000
    assert s.reserved_output_for("gpt-4o", 32_000) == 2000
    assert s.window_for("gpt-4o", 9000) == 9000  # the flag wins
    assert s.window_for("claude-sonnet-4") is None  # registry


def test_config_file_discovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_config_file() is None
    home = tmp_path / "home"
    home.mkdir()
    user_cfg = write(home / "config.toml", "")
    assert find_config_file() == user_cfg
    local = write(tmp_path / "contextwarden.yaml", "")
    assert find_config_file() == tmp_path / local.name
    named = write(tmp_path / "other.toml", "")
    monkeypatch.setenv("CONTEXTWARDEN_CONFIG", str(named))
    assert find_config_file() == named
    with pytest.raises(ConfigError, match="does not exist"):
        find_config_file(tmp_path / "missing.toml")


def test_invalid_settings_fail_loudly_naming_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTWARDEN_AGENT_CONTEXT__RESERVED_TOKENS", "-5")
    with pytest.raises(ConfigError, match=r"agent_context\.reserved_tokens"):
        load_settings()


def test_unrelated_variables_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTWARDEN_REQUIRE_SERVICES", "1")
    monkeypatch.setenv("CONTEXTWARDEN_DEBUG", "1")
    assert load_settings().compaction_config() == CompactionConfig()


def test_validate_toml_reports_every_problem_with_line_and_allowed(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "bad.toml",
        "model = 3\n"  # 1: a number is not a string
        "\n"
        "[agent_context]\n"  # 3
        "warning_threshold = 'high'\n"  # 4
        "typo_key = 1\n"  # 5
        "[compaction]\n"  # 6
        "eviction_policy = 'random'\n"  # 7
        "[compaction.hybrid_weights]\n"  # 8
        "speed = 1.0\n"  # 9
        "[store]\n"  # 10
        "url = 5\n",  # 11
    )
    problems = validate_config_file(cfg, environment=False)
    found = {p.key: p for p in problems}
    assert {k: p.line for k, p in found.items()} == {
        "model": 1,
        "agent_context.warning_threshold": 4,
        "agent_context.typo_key": 5,
        "compaction.eviction_policy": 7,
        "compaction.hybrid_weights.speed": 9,
        "store.url": 11,
    }
    assert found["agent_context.warning_threshold"].allowed == "a number > 0.0 and < 2.0"
    assert "max_context_tokens" in found["agent_context.typo_key"].allowed
    assert "'semantic-merge'" in found["compaction.eviction_policy"].allowed
    assert found["compaction.hybrid_weights.speed"].allowed.startswith("keys freshness")
    assert all(p.source == str(cfg) for p in problems)
    assert found["model"].render().startswith(f"{cfg}:1: model: ")


def test_validate_yaml_lines_and_semantic_problems(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "bad.yaml",
        "agent_context:\n"  # 1
        "  warning_threshold: 0.95\n"  # 2
        "  error_threshold: 0.9\n"  # 3
        "compaction:\n"  # 4
        "  low_water: 0.9\n"  # 5
        "  high_water: 0.8\n"  # 6
        "store:\n"  # 7
        "  url: ftp://nowhere\n",  # 8
    )
    problems = validate_config_file(cfg, environment=False)
    assert [(p.key, p.line) for p in problems] == [
        ("agent_context.thresholds", 2),
        ("compaction.low_water", 5),
        ("store.url", 8),
    ]
    assert "0 < low_water < high_water" in problems[1].allowed


def test_validate_syntax_errors_name_the_line(tmp_path: Path) -> None:
    toml = write(tmp_path / "s.toml", "[compaction]\nlow_water = = 1\n")
    [problem] = validate_config_file(toml, environment=False)
    assert (problem.key, problem.line, problem.allowed) == ("(syntax)", 2, "valid TOML")
    yaml = write(tmp_path / "s.yaml", "compaction:\n  low_water: [1,\n  high: 2\n  x: {\n")
    [problem] = validate_config_file(yaml, environment=False)
    assert problem.key == "(syntax)" and problem.line is not None and problem.allowed == "valid YAML"


def test_validate_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTWARDEN_COMPACTION__LOW_WATER", "lots")
    [problem] = validate_config_file(None)
    assert problem.source == "environment"
    assert problem.key == "CONTEXTWARDEN_COMPACTION__LOW_WATER"
    assert problem.allowed.startswith("a number")


def test_settings_alone_read_only_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTWARDEN_MODEL", "gpt-4o-mini")
    assert Settings().model == "gpt-4o-mini"

"""The settings loader checks types, ranges, store URLs and file limits before anything runs."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from contextwarden._store_url import check_store_url, expand_store_url
from contextwarden.exceptions import ConfigError
from contextwarden.messages import Message
from contextwarden.session import Session
from contextwarden.settings import (
    MAX_CONFIG_BYTES,
    MAX_YAML_ALIASES,
    load_settings,
    read_config_file,
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


# --- types and ranges ----------------------------------------------------------------------------


def test_booleans_decimals_and_nan_are_refused_with_their_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.toml",
        "[agent_context]\n"
        "max_context_tokens = true\n"  # 2
        "warning_threshold = nan\n"  # 3
        "min_keep_recent_rounds = 2.0\n"  # 4
        "[compaction]\n"
        "keep_recent_rounds = true\n"  # 6
        "thrash_deepen_by = nan\n"  # 7
        "ledger_max_entries = -1\n"  # 8
        "clear_after_rounds = 2.5\n"  # 9
        "[models.x]\n"
        "context_length = false\n"  # 11
        "[budgets]\n"
        "shares = { system = inf }\n",  # 13
    )
    problems = {p.key: p for p in validate_config_file(path, environment=False)}
    expected = {
        "agent_context.max_context_tokens": (2, "boolean"),
        "agent_context.warning_threshold": (3, "finite"),
        "agent_context.min_keep_recent_rounds": (4, "decimal"),
        "compaction.keep_recent_rounds": (6, "boolean"),
        "compaction.thrash_deepen_by": (7, "finite"),
        "compaction.ledger_max_entries": (8, "greater than or equal to 1"),
        "compaction.clear_after_rounds": (9, "decimal"),
        "models.x.context_length": (11, "boolean"),
        "budgets.shares.system": (13, "finite"),
    }
    for key, (line, words) in expected.items():
        assert key in problems, (key, sorted(problems))
        assert problems[key].line == line and words in problems[key].message, problems[key].render()
    assert "an integer >= 1 and <= 1000000000" in problems["compaction.ledger_max_entries"].allowed
    with pytest.raises(ConfigError, match="ledger_max_entries"):
        load_settings(path)


def test_tables_of_the_compaction_section_are_checked_by_the_library(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "[compaction]\nsource_weights = { robot = 1.0 }\ntype_ttl = { tool = 2 }\n")
    problems = validate_config_file(path, environment=False)
    assert [p.key for p in problems] == ["compaction.source_weights"]
    assert problems[0].line == 2 and "keys among assistant, developer" in problems[0].allowed


def test_environment_strings_still_read_as_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTWARDEN_COMPACTION__KEEP_RECENT_ROUNDS", "4")
    monkeypatch.setenv("CONTEXTWARDEN_COMPACTION__LOW_WATER", "0.4")
    config = load_settings().compaction_config()
    assert config.keep_recent_rounds == 4 and config.low_water == 0.4
    monkeypatch.setenv("CONTEXTWARDEN_COMPACTION__LOW_WATER", "nan")
    with pytest.raises(ConfigError, match="compaction.low_water"):
        load_settings()


# --- file limits ---------------------------------------------------------------------------------

BILLION_LAUGHS = "".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n',
        *(f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)),
    ]
)


def test_a_yaml_alias_bomb_is_refused_quickly_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path / "bomb.yaml", BILLION_LAUGHS)
    assert len(BILLION_LAUGHS.encode()) < 400
    started = time.perf_counter()
    problems = validate_config_file(path, environment=False)
    assert time.perf_counter() - started < 5
    assert len(problems) == 1 and problems[0].key == "(limits)"
    assert "expands to more than" in problems[0].message and problems[0].line is not None
    assert "aliases" in problems[0].allowed
    with pytest.raises(ConfigError, match="YAML over the limits") as info:
        read_config_file(path)
    assert info.value.key == "config.limits"


def test_aliases_are_counted(tmp_path: Path) -> None:
    lines = ["base: &b {context_length: 1000}", "models:"]
    lines += [f"  m{i}: *b" for i in range(MAX_YAML_ALIASES + 1)]
    path = write(tmp_path / "many.yaml", "\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=f"more than {MAX_YAML_ALIASES} aliases"):
        read_config_file(path)
    few = write(tmp_path / "few.yaml", "\n".join(lines[: 2 + 5]) + "\n")
    assert len(read_config_file(few)["models"]) == 5  # ordinary anchors keep working


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "r.yaml", "models: &r\n  x: *r\n")
    with pytest.raises(ConfigError, match="refers to a value that contains it"):
        read_config_file(path)


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = write(tmp_path / "big.toml", "# " + "x" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(ConfigError, match="larger than 1024 KiB") as info:
        read_config_file(path)
    assert info.value.key == "config.size"
    [problem] = validate_config_file(path, environment=False)
    assert problem.key == "(size)" and "1024 KiB" in problem.allowed


@pytest.mark.parametrize(
    ("name", "text"), [("deep.toml", "a = " + "[" * 5000 + "]" * 5000), ("deep.yaml", "a: " + "[" * 5000 + "]" * 5000)]
)
def test_deep_nesting_is_a_config_error(tmp_path: Path, name: str, text: str) -> None:
    path = write(tmp_path / name, text + "\n")
    with pytest.raises(ConfigError):
        read_config_file(path)
    [problem] = validate_config_file(path, environment=False)
    assert problem.key in ("(limits)", "(syntax)")


def test_moderate_nesting_past_the_limit_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "n.toml", "a = " + "[" * 40 + "]" * 40 + "\n")
    with pytest.raises(ConfigError, match="nested deeper than 32 levels"):
        read_config_file(path)


def test_invalid_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b'model = "gpt-4o"\n[store]\nurl = "\xff"\n')
    with pytest.raises(ConfigError, match=r"c.toml:3: the config file is not UTF-8"):
        read_config_file(path)


# --- store URLs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("sqlite:///<user dir>/sessions.db", "placeholder"),
        ("ftp://host/x", "unknown scheme 'ftp'"),
        ("sessions.db", "has no scheme"),
        ("sqlite://cw.db", "three slashes"),
        ("sqlite:///cw.db?timeout=3", "unknown SQLite option 'timeout'"),
        ("sqlite:///cw.db?busy_timeout=soon", "busy_timeout='soon'"),
        ("redis://localhost:abc/0", "port 'abc'"),
        ("redis://localhost:6379/zero", "database 'zero'"),
        ("redis://localhost:6379/0?ttl=-5", "ttl='-5'"),
        ("redis://", "no host"),
        ("redis+cluster://h1:6379,:6380/", "node ':6380'"),
        ("redis+cluster://h1:6379/3", "only database 0"),
        ("postgresql://u@h:99999/db", "port '99999'"),
        ("postgresql://u@h/db?schema=1bad", "schema='1bad'"),
        ("postgresql://u@h/db?synchronous_commit=maybe", "synchronous_commit='maybe'"),
    ],
)
def test_store_urls_are_checked_without_connecting(url: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_store_url(url)
    assert words in str(info.value) and info.value.key == "store.url"


@pytest.mark.parametrize(
    "url",
    [
        "memory://",
        "sqlite:///:memory:",
        "sqlite:///new/dir/cw.db?busy_timeout=10",
        "redis://localhost:6379/0?prefix=cw&ttl=86400",
        "rediss://user:pw@[::1]:6380/2",
        "unix:///run/redis.sock",
        "redis+cluster://h1:6379,h2:6379/?prefix=cw",
        "postgresql://postgres@127.0.0.1:5432/test?schema=cw&synchronous_commit=off",
        "postgres:///test",
    ],
)
def test_valid_store_urls_pass(url: str) -> None:
    check_store_url(url)


def test_a_sqlite_path_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        check_store_url(f"sqlite:///{tmp_path / 'afile' / 'cw.db'}")
    with pytest.raises(ConfigError, match="is a directory"):
        check_store_url(f"sqlite:///{tmp_path}")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_sqlite_path_in_a_read_only_directory_is_refused(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ConfigError, match="not writable"):
            check_store_url(f"sqlite:///{ro / 'sub' / 'cw.db'}")
    finally:
        ro.chmod(0o700)


def test_tilde_is_expanded_and_validate_checks_the_expanded_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    assert expand_store_url("sqlite:///~/cw/s.db?busy_timeout=2") == f"sqlite:///{tmp_path}/me/cw/s.db?busy_timeout=2"
    assert expand_store_url("redis://~x") == "redis://~x"
    path = write(tmp_path / "c.toml", '[store]\nurl = "sqlite:///~/.config/cw/sessions.db"\n')
    assert validate_config_file(path, environment=False) == []
    assert load_settings(path).store_url == f"sqlite:///{tmp_path}/me/.config/cw/sessions.db"


def test_validate_reports_a_placeholder_in_the_store_url(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", 'model = "gpt-4o"\n[store]\nurl = "sqlite:///<user dir>/sessions.db"\n')
    [problem] = validate_config_file(path, environment=False)
    assert problem.key == "store.url" and problem.line == 3 and "placeholder" in problem.message
    assert "sqlite:///~/path.db" in problem.allowed


# --- any config file: settings that work, or ConfigError ----------------------------------------

_SECTION_KEYS = {
    "agent_context": [
        "max_context_tokens",
        "reserved_tokens",
        "warning_threshold",
        "error_threshold",
        "critical_threshold",
        "min_keep_recent_rounds",
        "max_observation_age_rounds",
        "truncated_observation_max_chars",
        "min_keep_tokens",
        "max_compact_failures",
    ],
    "compaction": [
        "profile",
        "low_water",
        "high_water",
        "keep_recent_rounds",
        "clear_after_rounds",
        "layers",
        "cascade",
        "hybrid_weights",
        "source_weights",
        "type_ttl",
        "thrash_deepen_by",
        "ledger_max_entries",
    ],
    "budgets": ["shares", "soft_ratio"],
    "store": ["url"],
    "summarizer": ["model"],
    "models": ["gpt-4o", "my-llama"],
}
_LEAVES = st.one_of(
    st.integers(-5, 200_000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(0.0, 1.0),
    st.booleans(),
    st.none(),
    st.sampled_from(["extractive", "none", "seed", "fifo", "memory://", "sqlite:///cw.db", "<user dir>", ""]),
    st.text(max_size=6),
)
_ANY = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6,
)


@st.composite
def config_documents(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for section in draw(st.lists(st.sampled_from(sorted(_SECTION_KEYS)), max_size=4, unique=True)):
        keys = draw(st.lists(st.sampled_from(_SECTION_KEYS[section]), max_size=4, unique=True))
        doc[section] = {k: draw(st.one_of(_LEAVES, _LEAVES, _ANY)) for k in keys}
        if draw(st.integers(0, 9)) == 0:
            doc[section] = draw(_ANY)  # a section that is not a table
    if draw(st.integers(0, 5)) == 0:
        doc[draw(st.sampled_from(["model", "tokenizer", "colour"]))] = draw(_LEAVES)
    return doc


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(doc=config_documents())
def test_any_config_file_loads_into_working_settings_or_raises_config_error(
    doc: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "any.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    problems = validate_config_file(path, environment=False)  # never raises: it lists problems
    try:
        loaded = load_settings(path)
        loaded.check()
    except ConfigError:
        assert problems, "load_settings refused a file that config validate passed"
        return
    assert problems == [], [p.render() for p in problems]  # validate and load agree
    try:
        config = loaded.compaction_config(effective=3000)  # min_keep_tokens depends on the budget
    except ConfigError:
        return
    session = Session(window=3000, counter="heuristic", config=config, thresholds=loaded.thresholds())
    for i in range(12):
        session.add([Message.user(f"step {i}: look up ORD-{i}"), Message.assistant("ok " + "details " * 60)])
        prepared = session.prepare(format="internal")
        assert prepared.status.used <= prepared.status.budget

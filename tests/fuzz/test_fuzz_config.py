"""Configuration from outside: `CompactionConfig` dicts and TOML/YAML config files.

A configuration is refused at once with a `ConfigError` naming the key, or accepted and then
works: a session using it adds, compacts and saves without a raw error, and its views are valid
and within budget. Files are read by `load_settings` and `validate_config_file` (the CLI's path).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, strategies as st

from contextwarden.compaction.config import CompactionConfig
from contextwarden.messages import Message, ToolCall
from contextwarden.settings import load_settings, validate_config_file

from ._harness import Failed, fuzz_settings, probe
from ._sessions import check_after, new_session, open_stores
from ._strategies import (
    OPEN_DEFECTS,
    hostile_any,
    hostile_key,
    hostile_number,
    hostile_text,
    mutated,
    shallow_any,
    short_text,
)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with open_stores(tmp_path_factory.mktemp("fuzz-config")) as opened:
        yield opened


DEFAULTS = CompactionConfig().to_dict()
config_keys = st.sampled_from(sorted(DEFAULTS))


# While values nested thousands deep break the config's checks (test_found_defects), only shallow ones here.
config_any = shallow_any if "deep-config" in OPEN_DEFECTS else hostile_any
# While integers too large for a float break the checks of float options (test_found_defects), none here.
config_number = (
    hostile_number.filter(lambda n: not isinstance(n, int) or abs(n) < 10**300)
    if "huge-config-number" in OPEN_DEFECTS
    else hostile_number
)
if "huge-config-number" in OPEN_DEFECTS:
    config_any = config_any.filter(lambda v: not isinstance(v, int) or abs(v) < 10**300)


def _scalar_for(value: Any) -> st.SearchStrategy[Any]:
    """Values near a field's default: the right type, out of range, or the wrong type."""
    if isinstance(value, bool):
        return st.one_of(st.booleans(), config_any)
    if isinstance(value, int | float):
        return st.one_of(config_number, st.just(value), st.just(-value), st.just(value * 1000))
    return config_any


config_dicts = st.one_of(
    st.dictionaries(config_keys, st.one_of(config_any, config_number), max_size=3),
    st.builds(
        lambda key, value: {key: value},
        config_keys,
        st.just(None),
    ),
    mutated(st.just(DEFAULTS), max_mutations=2, values=config_any),
    config_keys.flatmap(lambda k: _scalar_for(DEFAULTS[k]).map(lambda v: {k: v})),
    st.dictionaries(hostile_key, config_any, max_size=2),
    st.fixed_dictionaries({"profile": st.one_of(st.sampled_from(["seed", "default"]), short_text)}),
    config_any,
)


def _work(session: Any) -> None:
    """Rounds of tool calls and long outputs: enough to run every layer."""
    for i in range(4):
        call = ToolCall(call_id=f"call_w{i}", name="read_file", arguments=json.dumps({"path": f"src/m{i}.py"}))
        session.add(
            [
                Message.assistant(f"Reading module {i}.", tool_calls=[call]),
                Message.tool_result(call.call_id, f"line {i}: value = {i}\n" * 120, name="read_file"),
                Message.user(f"Now module {i + 1}."),
            ]
        )


def _run_with(entry: str, store: Any, config: Any, *, counted: bool = False) -> None:
    made = (probe.check if counted else probe.call)(entry, new_session, store, config=config)
    if not made.ok:
        return  # refused at construction, with a typed error
    session, before = made.value
    added = probe.check(entry, _work, session)
    if not added.ok:
        raise Failed(f"{entry}: the configuration was accepted, then adding messages failed: {added.error!r}")
    check_after(entry, session, [m.message_id for m in session.transcript])


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_compaction_config_dicts(backend: str, stores: dict[str, Any]) -> None:
    @fuzz_settings(80)
    @given(config=config_dicts)
    def run(config: Any) -> None:
        _run_with("CompactionConfig (dict)", stores[backend], config)

    run()


# --- files ------------------------------------------------------------------------------------
SECTIONS: dict[str, tuple[str, ...]] = {
    "agent_context": (
        "max_context_tokens",
        "reserved_tokens",
        "warning_threshold",
        "error_threshold",
        "critical_threshold",
        "min_keep_recent_rounds",
        "max_observation_age_rounds",
        "truncated_observation_max_chars",
        "max_compact_failures",
        "min_keep_tokens",
    ),
    "compaction": tuple(sorted(DEFAULTS)) + ("profile",),
    "budgets": ("soft_ratio", "shares"),
    "store": ("url",),
    "summarizer": ("model",),
}
file_value = st.one_of(hostile_number, hostile_text, st.booleans(), st.lists(hostile_number, max_size=2), hostile_any)
settings_data = st.dictionaries(
    st.sampled_from([*SECTIONS, "model", "tokenizer", "models", "bogus"]), st.just(None), max_size=4
).flatmap(
    lambda shape: st.fixed_dictionaries(
        {
            name: (
                st.dictionaries(st.sampled_from(SECTIONS[name]) | hostile_key, file_value, max_size=3)
                if name in SECTIONS
                else st.dictionaries(
                    short_text,
                    st.dictionaries(st.sampled_from(["context_length", "max_output"]), file_value, max_size=2),
                    max_size=2,
                )
                if name == "models"
                else file_value
            )
            for name in shape
        }
    )
)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if value.bit_length() < 10_000 else "1" * 5000
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string, escapes included
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return '""' if value is None else json.dumps(str(value))


def to_toml(data: dict[str, Any]) -> str:
    """A TOML text for ``data`` (values TOML cannot hold come out as invalid TOML: hostile too)."""
    try:
        return _to_toml(data)
    except RecursionError:  # a value nested thousands deep: write it as TOML nested as deep
        return "a = " + "[" * 5000 + "]" * 5000 + "\n"


def _to_toml(data: dict[str, Any]) -> str:
    lines = [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for name, table in data.items():
        if isinstance(table, dict):
            lines.append(f"[{json.dumps(name)}]")
            lines += [f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def to_yaml(data: dict[str, Any]) -> str:
    try:
        return yaml.safe_dump(data, allow_unicode=True)
    except (yaml.YAMLError, RecursionError, ValueError):
        return "a: [" * 200


RAW_FILES = (
    b"",
    b"\x00\x00",
    b"\xff\xfe[compaction]\n",
    b"[compaction]\nlow_water = 0.4\nlow_water = 0.5\n",
    b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n",
    b"model = '" + b"x" * 2_000_000 + b"'\n",
    b"[compaction]\nkeep_recent_rounds = 2.5\nclear_after_rounds = nan\nledger_max_entries = -1\n",
    b"[compaction]\nthrash_deepen_by = nan\nhybrid_weights = 3\n",
    b"compaction = [1, 2]\n",
    *(
        []
        if "int-too-long-to-print" in OPEN_DEFECTS
        else [b"[compaction]\nkeep_recent_rounds = " + b"9" * 5000 + b"\n"]
    ),
)
RAW_YAML = (
    b'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n'
    b"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    b"f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n",
    b"compaction: !!python/object/apply:os.system ['true']\n",
    b"- 1\n- 2\n",
    b"a: " + b"[" * 3000 + b"]" * 3000 + b"\n",
    b"compaction: {low_water: .nan, high_water: .inf}\n",
    b"compaction:\n  low_water: 0.4\n  low_water: 0.9\n",
    b"&a a: *a\n",
)

config_files = st.one_of(
    st.tuples(st.just(".toml"), settings_data.map(to_toml).map(lambda t: t.encode("utf-8", "surrogatepass"))),
    st.tuples(st.just(".yaml"), settings_data.map(to_yaml).map(lambda t: t.encode("utf-8", "surrogatepass"))),
    st.tuples(st.just(".toml"), st.sampled_from(RAW_FILES)),
    st.tuples(st.just(".yaml"), st.sampled_from(RAW_YAML + RAW_FILES[:3])),
)


def test_config_files(tmp_path: Path, stores: dict[str, Any]) -> None:
    entry = "config file"

    @fuzz_settings(40)
    @given(file=config_files)
    def run(file: tuple[str, bytes]) -> None:
        suffix, raw = file
        path = tmp_path / f"contextwarden{suffix}"
        path.write_bytes(raw)
        checked = probe.check(entry, validate_config_file, path, environment=False)
        loaded = probe.call(entry, load_settings, path)
        if checked.ok and not checked.value and not loaded.ok:
            raise Failed(f"{entry}: `config validate` found no problem, but loading failed: {loaded.error!r}")
        if not loaded.ok:
            return
        settings = loaded.value
        config = probe.check(entry, settings.compaction_config, effective=2600)
        if not config.ok:
            raise Failed(f"{entry}: the settings loaded, but their compaction config fails: {config.error!r}")
        _run_with(entry, stores["memory"], config.value, counted=True)

    run()

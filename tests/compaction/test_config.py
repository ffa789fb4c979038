"""CompactionConfig checks every option's type and range when it is built, never at the first compaction."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from contextwarden import toolpairs
from contextwarden.compaction.config import (
    FLOAT_FIELDS,
    INT_FIELDS,
    CompactionConfig,
    HybridWeights,
)
from contextwarden.exceptions import ConfigError
from contextwarden.messages import Message
from contextwarden.session import Session

from ._helpers import make_text, tool_round

FIELDS = {f.name for f in dataclasses.fields(CompactionConfig)}


def test_every_option_has_a_type_and_range_check() -> None:
    # a new option must be added to a checked table (or to the hand-written checks below it)
    by_hand = {"layers", "cascade", "eviction_policy", "hybrid_weights", "source_weights", "type_ttl"}
    by_hand |= {"require_user_first", "pressure_states"}
    assert set(INT_FIELDS) | set(FLOAT_FIELDS) | by_hand == FIELDS


@pytest.mark.parametrize(
    ("options", "key", "allowed"),
    [
        ({"keep_recent_rounds": 2.5}, "keep_recent_rounds", "an integer in [1, "),
        ({"clear_after_rounds": 2.0}, "clear_after_rounds", "an integer in [1, "),
        ({"clear_after_rounds": math.nan}, "clear_after_rounds", "an integer"),
        ({"ledger_max_entries": -1}, "ledger_max_entries", "an integer in [1, "),
        ({"thrash_deepen_by": math.nan}, "thrash_deepen_by", "a finite number in [0, 1)"),
        ({"thrash_deepen_by": 1e-300}, "thrash_deepen_by", "0 (never deepen) or a share in [0.001, 1)"),
        ({"prepare_slice_ms": 0}, "prepare_slice_ms", "a finite number in (0, "),
        ({"high_water": math.inf}, "high_water", "a finite number in (0, 1]"),
        ({"keep_recent_rounds": True}, "keep_recent_rounds", "an integer"),
        ({"require_user_first": 1}, "require_user_first", "true or false"),
        ({"reactive_retries": 10**6}, "reactive_retries", "an integer in [0, 10]"),
        ({"summary_max_tokens": "1500"}, "summary_max_tokens", "an integer in [1, "),
        ({"hybrid_weights": {"freshness": "high"}}, "hybrid_weights.freshness", "a finite number in [0, 1000]"),
        ({"hybrid_weights": {"recency": 0.3}}, "hybrid_weights", "keys among freshness, priority, type, references"),
        ({"hybrid_weights": [0.3, 0.3]}, "hybrid_weights", "a table with freshness, priority, type and references"),
        ({"source_weights": {"user": math.nan}}, "source_weights.user", "a finite number in [0, 1000]"),
        ({"source_weights": {"robot": 1.0}}, "source_weights", "keys among assistant, developer, system, tool, user"),
        ({"source_weights": {1: 1.0}}, "source_weights", "keys among"),
        ({"type_ttl": {"tool": 2.5}}, "type_ttl.tool", "an integer in [0, "),
        ({"type_ttl": "tool=3"}, "type_ttl", "a table of content type = rounds"),
        ({"cascade": {"evict": "0.8"}}, "cascade.evict", "a finite number in (0, 2]"),
        ({"cascade": [0.8]}, "cascade", "a table of layer = utilization"),
        ({"layers": "clear"}, "layers", "a list of distinct layer names"),
        ({"layers": ["clear", "clear"]}, "layers", "a list of distinct layer names"),
        ({"layers": ["clear", 3]}, "layers", "a list of distinct layer names"),
        ({"eviction_policy": ["fifo"]}, "eviction_policy", "fifo, lru, priority"),
        ({"pressure_states": "fixed"}, "pressure_states", "'band' or 'ratio'"),
        ({"profile": ["seed"]}, "profile", "'default' or 'seed'"),
    ],
)
def test_a_bad_option_is_refused_naming_the_key_and_its_range(options: dict[str, Any], key: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as info:
        CompactionConfig.from_dict(options)
    assert info.value.key == key
    assert f"{key}=" in str(info.value) or key == "profile"
    assert allowed in str(info.value)


def test_the_constructor_checks_like_from_dict() -> None:
    with pytest.raises(ConfigError, match="keep_recent_rounds=2.5"):
        CompactionConfig(keep_recent_rounds=2.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="hybrid_weights.type"):
        HybridWeights(type=-1.0)
    # a list of layers and a dict of weights are accepted and normalized
    config = CompactionConfig(layers=["clear"], hybrid_weights={"freshness": 1.0})  # type: ignore[arg-type]
    assert config.layers == ("clear",) and config.hybrid_weights == HybridWeights(freshness=1.0)


@pytest.mark.parametrize("config", [["keep_recent_rounds", 3], "low_water=0.4", 3, b"x"])
def test_a_config_that_is_not_a_table_is_refused(config: Any) -> None:
    with pytest.raises(ConfigError, match="is not a table of options") as info:
        Session(window=4000, counter="heuristic", config=config)
    assert info.value.key == "config"


def test_an_empty_list_is_not_taken_for_the_defaults() -> None:
    with pytest.raises(ConfigError):
        Session(window=4000, counter="heuristic", config=[])  # type: ignore[arg-type]


# --- any dict: a working config, or ConfigError --------------------------------------------------

_NUMBERS = st.one_of(
    st.integers(-3, 60),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(-0.5, 1.5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 0.0, 1.0, 1e-300, 5e-324, 2**63]),
)
_SCALARS = st.one_of(_NUMBERS, st.booleans(), st.none(), st.text(max_size=8))
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=10), st.integers()), inner, max_size=4),
    ),
    max_leaves=8,
)
_WEIGHTS = st.one_of(st.floats(0.0, 3.0), st.integers(0, 3))
_KNOWN_TABLE_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "layers": st.lists(st.sampled_from(["clear", "evict", "summarize", "trim"]), max_size=4),
    "cascade": st.dictionaries(
        st.sampled_from(["clear", "evict", "summarize", "delegation", "tool-results", "progressive", "conversation"]),
        st.floats(0.1, 1.5),
    ),
    "eviction_policy": st.sampled_from(["fifo", "lru", "priority", "type-ttl", "semantic-merge", "hybrid", "random"]),
    "hybrid_weights": st.dictionaries(st.sampled_from(["freshness", "priority", "type", "references"]), _WEIGHTS),
    "source_weights": st.dictionaries(st.sampled_from(["user", "tool", "assistant", "system", "developer"]), _WEIGHTS),
    "type_ttl": st.dictionaries(st.sampled_from(["tool", "thinking", "message"]), st.integers(0, 50)),
    "profile": st.sampled_from(["default", "seed", "fast"]),
    "require_user_first": st.one_of(st.booleans(), _NUMBERS),
    "pressure_states": st.sampled_from(["band", "ratio", "fixed", ""]),
}


@st.composite
def config_dicts(draw: st.DrawFn) -> dict[Any, Any]:
    """Mostly known keys with plausible, edge or absurd values; sometimes unknown keys or junk."""
    keys = draw(st.lists(st.sampled_from(sorted(FIELDS | {"profile"})), max_size=6, unique=True))
    out: dict[Any, Any] = {}
    for key in keys:
        if key in INT_FIELDS:
            plausible: st.SearchStrategy[Any] = st.integers(1, 40)
        elif key in FLOAT_FIELDS:
            plausible = st.floats(0.05, 0.95)
        else:
            plausible = _KNOWN_TABLE_VALUES[key]
        # mostly plausible values (so that many configs build and run), else edge and absurd ones
        kind = draw(st.integers(0, 7))
        out[key] = draw(_NUMBERS if kind == 0 else _VALUES if kind == 1 else plausible)
    if draw(st.integers(0, 19)) == 0:
        out[draw(st.one_of(st.text(max_size=10), st.integers()))] = draw(_VALUES)
    return out


def _history(rounds: int) -> list[Message]:
    msgs = [Message.system("You are a careful agent."), Message.user("Reconcile the ledger for ACC-1042.")]
    for i in range(rounds):
        msgs += tool_round(f"c{i}", make_text(900, seed=i, error=i % 4 == 1), name="grep", q=f"q{i}")
        if i % 3 == 2:
            msgs += [Message.user(f"Next: check ORD-{2000 + i}."), Message.assistant(f"Checked ORD-{2000 + i}.")]
    return msgs


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(options=config_dicts())
def test_any_dict_builds_a_working_config_or_raises_config_error(options: dict[Any, Any]) -> None:
    try:
        session = Session(window=3000, counter="heuristic", config=options)
    except ConfigError as exc:
        assert str(exc)
        return
    history = _history(14)
    for start in range(0, len(history), 6):  # several turns, so compactions, thrashing checks, the ledger run
        session.add(history[start : start + 6])
        prepared = session.prepare(format="internal")
        assert toolpairs.validate(prepared.view) == []
        assert prepared.status.used <= prepared.status.budget
    emergency = session.on_context_overflow(
        format="internal"
    )  # the reactive layer: reactive_low_water, reactive_keep_rounds
    assert toolpairs.validate(emergency.view) == []
    assert emergency.status.used <= emergency.status.budget

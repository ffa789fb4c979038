"""Every threshold and policy of the compaction cascade, with its default and why.

Hysteresis: compaction starts when the view passes ``high_water`` (a share of the effective
budget) and runs layers until the view is under ``low_water``. Between the two the view only
appends, so the provider's prompt cache keeps serving the unchanged prefix. A wide band means
few compactions and high prefix reuse, at the price of dropping more of the oldest history at
each one; a narrow band keeps more history but rewrites the prefix every few turns. Measured on
the trim workload (README, Benchmarks): high 1.0 / low 0.45 keeps prefix reuse at 0.97 (128k)
and 0.905 (32k), where cutting to 60% gives 0.89 at 32k. The ``seed`` profile reproduces the
seed design (clear and evict from the warning state, summarize from the error state, cut to
just under warning). The ``cascade`` table gates each layer by utilization, keyed by layer name
(``clear`` at 0.75, ``evict`` 0.85, ``summarize`` 0.92, and ``delegation`` 0.95). A configuration
written with the seed design's strategy names (``tool-results``, ``progressive``,
``conversation``) is read too: `SEED_CASCADE_NAMES` translates them where the table is read, and
nothing past that point sees them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._brief import brief
from ..events import OptionalLayer
from ..exceptions import ConfigError
from ..messages import ROLES

__all__ = [
    "CASCADE_GATES",
    "CASCADE_LAYERS",
    "DEFAULT_CASCADE",
    "EVICTION_POLICIES",
    "SEED_CASCADE_NAMES",
    "CascadeGate",
    "CompactionConfig",
    "EvictionPolicyName",
    "HybridWeights",
]

EvictionPolicyName = Literal["fifo", "lru", "priority", "type-ttl", "semantic-merge", "hybrid"]
EVICTION_POLICIES: tuple[str, ...] = ("fifo", "lru", "priority", "type-ttl", "semantic-merge", "hybrid")
CascadeGate = OptionalLayer | Literal["delegation"]
"""What the ``cascade`` table gates: the three optional layers (`LayerName`) and delegation."""
CASCADE_GATES: tuple[CascadeGate, ...] = ("clear", "evict", "summarize", "delegation")
"""The ``cascade`` table's keys, cheapest first (the order in which a compaction uses them)."""
CASCADE_LAYERS: tuple[OptionalLayer, ...] = ("clear", "evict", "summarize")
"""The layers ``layers`` may list, cheapest first."""
DEFAULT_CASCADE: Mapping[str, float] = {
    "clear": 0.75,
    "evict": 0.85,
    "summarize": 0.92,
    "delegation": 0.95,
}
SEED_CASCADE_NAMES: Mapping[str, CascadeGate] = {
    "tool-results": "clear",
    "progressive": "evict",
    "conversation": "summarize",
}
"""The seed design's strategy names, read in a ``cascade`` table and translated to the layer they gate."""

_CASCADE_TABLE = 'a table of layer = utilization in (0, 2], e.g. {"clear": 0.75, "evict": 0.85}'
CONTENT_TYPES: tuple[str, ...] = ("tool", "thinking", "message")
"""Content types of the ``type_ttl`` table."""

_MAX_INT = 1_000_000_000
MAX_WEIGHT = 1000.0
"""The largest a configured weight (hybrid eviction, role weights) may be."""


def _bad(key: str, value: object, allowed: str) -> ConfigError:
    return ConfigError(f"compaction config: {key}={brief(value)} is invalid; allowed: {allowed}.", key=key)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    """An int or a finite float (never a bool, NaN or infinity)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return _is_int(value) or math.isfinite(value)


def _check_int(key: str, value: object, low: int, high: int = _MAX_INT) -> None:
    if not _is_int(value) or not low <= value <= high:  # type: ignore[operator]
        raise _bad(key, value, f"an integer in [{low}, {high}]")


def _check_share(key: str, value: object, low: float, high: float, *, low_open: bool, high_open: bool) -> None:
    ok = _is_number(value)
    if ok:
        try:
            number = float(value)  # type: ignore[arg-type]
        except OverflowError:  # an integer beyond any float is out of every range
            raise _bad(key, value, "a finite number") from None
        ok = (low < number if low_open else low <= number) and (number < high if high_open else number <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise _bad(key, value, f"a finite number in {interval}")


@dataclass(frozen=True, kw_only=True)
class HybridWeights:
    """Weights of the hybrid eviction score (higher score = kept longer)."""

    freshness: float = 0.3
    priority: float = 0.3
    type: float = 0.2
    references: float = 0.2

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_share(
                f"hybrid_weights.{f.name}", getattr(self, f.name), 0.0, MAX_WEIGHT, low_open=False, high_open=False
            )


INT_FIELDS: dict[str, tuple[int, int]] = {
    "tool_result_min_tokens": (1, _MAX_INT),
    "progressive_line_after": (1, _MAX_INT),
    "keep_recent_rounds": (1, _MAX_INT),
    "clear_after_rounds": (1, _MAX_INT),
    "cleared_head_chars": (0, _MAX_INT),
    "cleared_max_facts": (0, _MAX_INT),
    "scan_chars": (0, _MAX_INT),
    "min_clear_tokens": (0, _MAX_INT),
    "preview_head_chars": (0, _MAX_INT),
    "preview_tail_chars": (0, _MAX_INT),
    "ledger_max_tokens": (1, _MAX_INT),
    "ledger_max_entries": (1, _MAX_INT),
    "instructions_max_tokens": (0, _MAX_INT),
    "summary_max_tokens": (1, _MAX_INT),
    "max_summarizer_failures": (1, _MAX_INT),
    "reactive_keep_rounds": (0, _MAX_INT),
    "reactive_retries": (0, 10),
    "thrash_window_turns": (1, _MAX_INT),
    "thrash_repeats": (1, _MAX_INT),
    "prepare_after_rounds": (0, _MAX_INT),
}
"""Integer options and their inclusive range."""

FLOAT_FIELDS: dict[str, tuple[float, float, bool, bool]] = {
    "high_water": (0.0, 1.0, True, False),
    "low_water": (0.0, 1.0, True, True),
    "prepare_slice_ms": (0.0, 1e12, True, False),
    "merge_similarity": (0.0, 1.0, True, False),
    "ledger_share": (0.0, 0.9, True, False),
    "working_set_share": (0.0, 1.0, False, False),
    "instructions_share": (0.0, 0.9, False, False),
    "summary_min_identifiers": (0.0, 1.0, False, False),
    "breaker_cooldown_s": (0.0, 1e12, False, False),
    "reactive_low_water": (0.0, 1.0, True, True),
    "thrash_deepen_by": (0.0, 1.0, False, True),
    "min_low_water": (0.0, 1.0, True, True),
}
"""Number options: (low, high, low excluded, high excluded)."""


def _check_table(key: str, value: object, keys: tuple[str, ...], check: Any, example: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad(key, value, f"a table of {example}")
    for name, item in value.items():
        if not isinstance(name, str) or name not in keys:
            raise _bad(key, dict(value), f"keys among {', '.join(keys)} ({example})")
        check(f"{key}.{name}", item)
    return dict(value)


def seed_names_translated(table: Mapping[Any, Any]) -> dict[Any, Any]:
    """A ``cascade`` table with the seed design's strategy names translated (anything else as it is).

    Raises:
        ConfigError: a layer given under both its names.
    """
    if not any(name in SEED_CASCADE_NAMES for name in table):
        return dict(table)
    out: dict[Any, Any] = {}
    for name, value in table.items():
        key = SEED_CASCADE_NAMES.get(name, name) if isinstance(name, str) else name
        if key in out:
            raise _bad("cascade", dict(table), f"each layer once ({key!r} is also named {name!r})")
        out[key] = value
    return out


def _check_fields(config: CompactionConfig) -> None:
    """Type and range of every option on its own (the order between options is checked after)."""
    for key, (low, high) in INT_FIELDS.items():
        _check_int(key, getattr(config, key), low, high)
    for key, (flow, fhigh, low_open, high_open) in FLOAT_FIELDS.items():
        _check_share(key, getattr(config, key), flow, fhigh, low_open=low_open, high_open=high_open)
    if 0.0 < config.thrash_deepen_by < 0.001:
        raise _bad("thrash_deepen_by", config.thrash_deepen_by, "0 (never deepen) or a share in [0.001, 1)")
    if not isinstance(config.require_user_first, bool):
        raise _bad("require_user_first", config.require_user_first, "true or false")
    if not isinstance(config.eviction_policy, str) or config.eviction_policy not in EVICTION_POLICIES:
        raise _bad("eviction_policy", config.eviction_policy, ", ".join(EVICTION_POLICIES))
    if config.pressure_states not in ("band", "ratio"):
        raise _bad("pressure_states", config.pressure_states, "'band' or 'ratio'")
    layers = config.layers
    if (
        isinstance(layers, str | bytes)
        or not isinstance(layers, tuple | list)
        or any(not isinstance(layer, str) or layer not in CASCADE_LAYERS for layer in layers)
        or len(set(layers)) != len(layers)
    ):
        raise _bad("layers", layers, "a list of distinct layer names among 'clear', 'evict', 'summarize'")
    object.__setattr__(config, "layers", tuple(layers))
    cascade = _check_table(
        "cascade",
        seed_names_translated(config.cascade) if isinstance(config.cascade, Mapping) else config.cascade,
        CASCADE_GATES,
        lambda k, v: _check_share(k, v, 0.0, 2.0, low_open=True, high_open=False),
        'layer = utilization in (0, 2] (above 1 disables the layer), e.g. {"clear": 0.75}',
    )
    object.__setattr__(config, "cascade", cascade)
    weights = config.hybrid_weights
    if isinstance(weights, Mapping):
        names = tuple(f.name for f in dataclasses.fields(HybridWeights))
        _check_table("hybrid_weights", weights, names, lambda k, v: None, "weight = number >= 0")
        weights = HybridWeights(**weights)
        object.__setattr__(config, "hybrid_weights", weights)
    if not isinstance(weights, HybridWeights):
        raise _bad("hybrid_weights", weights, "a table with freshness, priority, type and references (numbers >= 0)")
    source_weights = _check_table(
        "source_weights",
        config.source_weights,
        tuple(sorted(ROLES)),
        lambda k, v: _check_share(k, v, 0.0, MAX_WEIGHT, low_open=False, high_open=False),
        f"role = weight in [0, {MAX_WEIGHT:g}]",
    )
    object.__setattr__(config, "source_weights", source_weights)
    type_ttl = _check_table(
        "type_ttl",
        config.type_ttl,
        CONTENT_TYPES,
        lambda k, v: _check_int(k, v, 0),
        f"content type = rounds in [0, {_MAX_INT}]",
    )
    object.__setattr__(config, "type_ttl", type_ttl)


@dataclass(frozen=True, kw_only=True)
class CompactionConfig:
    """Thresholds and policies of the cascade. Shares are of the effective budget."""

    high_water: float = 1.0
    """Compact when the view passes this share of the effective budget (1.0: when it would not fit)."""
    low_water: float = 0.45
    """Compact down to this share; the band below ``high_water`` is what the next turns append into."""
    layers: tuple[OptionalLayer, ...] = ("clear", "evict", "summarize")
    """Layers in cascade order; remove one to disable it."""
    cascade: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_CASCADE))
    """Utilization (view / effective budget) from which each layer may run, and delegation.

    ``clear``: old outputs, and outputs of ``tool_result_min_tokens`` or more once the agent has
    used them, become key findings plus a snapshot reference. ``evict``: by age tiers — full for
    the newest rounds, key points (cleared) past ``clear_after_rounds``, one ledger line past
    ``progressive_line_after`` (evicted first), a rolled-up count beyond what the ledger lists.
    ``summarize``: a fresh view of summary + notes + ledger + recent rounds. ``delegation``: before
    a model call, sub-tasks the caller marked delegable run in isolated sessions and only their
    results enter. The seed design's names (``tool-results``, ``progressive``, ``conversation``)
    are read as ``clear``, ``evict`` and ``summarize``.

    A compaction started at utilization *u* uses the layers whose threshold is at most *u*,
    cheapest first, each only while the view is above the low-water target. With the default
    ``high_water`` of 1.0 every layer is open when a compaction starts; lower ``high_water``
    (the ``seed`` profile) to let utilization pick them. A view that would not fit the budget, and
    an emergency compaction (the reactive layer), may use every layer. A threshold above 1 disables a layer
    except in those two cases (delegation: entirely).
    """
    tool_result_min_tokens: int = 500
    """Outputs this large are cleared once used, whatever their age (the ``clear`` layer)."""
    progressive_line_after: int = 20
    """Rounds further back than this leave the view first, as one ledger line (the ``evict`` layer)."""
    keep_recent_rounds: int = 3
    """Newest rounds kept whole while the budget allows (``min_keep_recent_rounds``)."""
    clear_after_rounds: int = 5
    """Tool outputs older than this many rounds may be cleared (``max_observation_age_rounds``)."""
    cleared_head_chars: int = 120
    """Characters of a cleared output kept as its head (``truncated_observation_max_chars``)."""
    cleared_max_facts: int = 12
    """Identifiers kept verbatim in a cleared output's stand-in."""
    scan_chars: int = 600
    """Characters of an output scanned for identifiers and key lines when it is cleared (cost bound)."""
    prepare_after_rounds: int = 4
    """Rounds a compaction prepares itself (stand-ins, snapshots, ledger entries); once more wait,
    the next long turn prepares them ahead (see `contextwarden.compaction.ahead`).

    Each round takes about 0.1-0.3 ms to prepare. The rounds a compaction prepares itself are
    the slowest part of the slowest turns, while a long turn that prepares is slow already, so a
    small number keeps compaction turns short at little cost to the median turn."""
    prepare_slice_ms: float = 5.0
    """Most time a long turn (more new tokens than 60% of recent turns) spends preparing ahead."""
    min_clear_tokens: int = 120
    """Outputs smaller than this are not worth clearing."""
    preview_head_chars: int = 600
    """Head kept when an oversized item is offloaded or a protected output must shrink."""
    preview_tail_chars: int = 300
    """Tail kept with that head (the end of a log or stack trace is often what matters)."""
    eviction_policy: EvictionPolicyName = "fifo"
    """Order in which old rounds leave the view (evict layer): fifo, lru, priority, type-ttl, semantic-merge, hybrid."""
    hybrid_weights: HybridWeights = field(default_factory=HybridWeights)
    """Weights of freshness, priority, type and references in the hybrid policy's keep-score."""
    source_weights: Mapping[str, float] = field(
        default_factory=lambda: {"user": 1.0, "tool": 0.5, "assistant": 0.6, "system": 1.0}
    )
    """Priority of a round by the role that started it (priority and hybrid policies)."""
    type_ttl: Mapping[str, int] = field(default_factory=lambda: {"tool": 10, "thinking": 3, "message": 40})
    """Rounds after which a content type expires (type-ttl and hybrid policies)."""
    merge_similarity: float = 0.85
    """Jaccard similarity at which two rounds count as near-duplicates (semantic-merge)."""
    ledger_share: float = 0.35
    """Largest share of the budget the progress ledger may take."""
    ledger_max_tokens: int = 1000
    """Absolute cap on the rendered ledger."""
    working_set_share: float = 0.7
    """Largest share of the context block the working set (files, commands, errors the agent acted
    on) may take; the ledger gets what it leaves. 0 turns the working set off."""
    ledger_max_entries: int = 200
    """Entries kept in the ledger; older ones roll up into counts per status and tool."""
    instructions_share: float = 0.25
    """Largest share of the budget the user's instructions may take (the context block's first section,
    on top of the ledger's room). Users write little: the section is usually far smaller. 0 turns it off."""
    instructions_max_tokens: int = 3000
    """Absolute cap on the user's instructions section; past it, requests leave first and every step
    left out is named (see `contextwarden.instructions`)."""
    summary_max_tokens: int = 1500
    """Largest running summary (summarize layer)."""
    summary_min_identifiers: float = 0.3
    """A summary must keep at least this share of the ids, dates and codes of what it replaces."""
    max_summarizer_failures: int = 3
    """Consecutive summarizer failures that open its circuit breaker (``max_compact_failures``)."""
    breaker_cooldown_s: float = 60.0
    """Seconds before an open breaker lets one trial summary through (half-open)."""
    reactive_low_water: float = 0.35
    """Target of the emergency compaction after a provider context-length error."""
    reactive_keep_rounds: int = 2
    """Newest rounds the emergency compaction keeps whole."""
    reactive_retries: int = 1
    """Retries of a model call after a context-length error (each after an emergency compaction)."""
    thrash_window_turns: int = 3
    """A refill to high water within this many turns of a compaction counts as thrashing."""
    thrash_repeats: int = 3
    """Thrashing this many times in a row raises an alert and deepens the next compaction."""
    thrash_deepen_by: float = 0.1
    """How much lower the low-water mark goes each time thrashing is detected."""
    min_low_water: float = 0.2
    """Floor of the deepened low-water mark."""
    require_user_first: bool = True
    """Make the first non-system message of the view a user message (Anthropic and Gemini require it)."""
    pressure_states: Literal["band", "ratio"] = "band"
    """What the pressure states mean. ``band``: relative to compaction (warning = a compaction is due
    within 3 turns, error = compaction is not keeping up, critical = the protected part nearly fills
    the budget); ``ratio``: the fixed thresholds (warning 0.70, error 0.90, critical 0.95) of the budget."""

    def __post_init__(self) -> None:
        _check_fields(self)
        if not self.low_water < self.high_water:
            raise _bad(
                "low_water/high_water",
                (self.low_water, self.high_water),
                "0 < low_water < high_water <= 1.0 (e.g. 0.5 and 1.0)",
            )
        if not self.reactive_low_water <= self.low_water:
            raise _bad("reactive_low_water", self.reactive_low_water, f"a share in (0, low_water={self.low_water}]")
        if not self.min_low_water <= self.low_water:
            raise _bad("min_low_water", self.min_low_water, f"a share in (0, low_water={self.low_water}]")
        if self.progressive_line_after < self.clear_after_rounds:
            raise _bad(
                "progressive_line_after",
                self.progressive_line_after,
                f"an integer >= clear_after_rounds ({self.clear_after_rounds}): one-line tier after key points",
            )

    def gate(self, name: CascadeGate) -> float:
        """The utilization from which the layer ``name`` (or delegation) may run: its entry in ``cascade``,
        or its default."""
        return float(self.cascade.get(name, DEFAULT_CASCADE[name]))

    @classmethod
    def profile(cls, name: Literal["default", "seed"], **overrides: Any) -> CompactionConfig:
        """A named profile. ``seed``: clear/evict from warning (0.70), summarize from error (0.90)."""
        if name == "default":
            return cls(**overrides)
        if name == "seed":
            seed_cascade = {**DEFAULT_CASCADE, "clear": 0.70, "evict": 0.70, "summarize": 0.90}
            base: dict[str, Any] = {
                "high_water": 0.70,
                "low_water": 0.60,
                "cascade": seed_cascade,
                "pressure_states": "ratio",
            }
            if "cascade" in overrides:  # a partial table overrides the profile's, not the whole of it
                cascade = overrides["cascade"]
                if not isinstance(cascade, Mapping):
                    raise _bad("cascade", cascade, _CASCADE_TABLE)
                overrides = {**overrides, "cascade": {**seed_cascade, **seed_names_translated(cascade)}}
            return cls(**{**base, **overrides})
        raise ConfigError(
            f"compaction config: profile={brief(name)} is invalid; allowed: 'default' or 'seed'.", key="profile"
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompactionConfig:
        """Build from a plain dict (a config file section); unknown keys are errors naming the allowed ones.

        Raises:
            ConfigError: ``data`` is not a table, a key is unknown, or a value has the wrong type or
                range (the message names the key and what it allows).
        """
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"compaction config: {brief(data)} is not a table of options; pass a dict such as "
                '{"low_water": 0.4} or a CompactionConfig.',
                key="config",
            )
        data = dict(data)
        profile = data.pop("profile", "default")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted((k for k in data if k not in known), key=str)
        if unknown:
            raise ConfigError(
                f"compaction config: unknown key(s) {unknown}; allowed keys: {sorted(known)}.", key=str(unknown[0])
            )
        if "cascade" in data:
            if not isinstance(data["cascade"], Mapping):
                raise _bad("cascade", data["cascade"], _CASCADE_TABLE)
            if profile == "default":  # a partial table keeps the other layers' defaults
                data["cascade"] = {**DEFAULT_CASCADE, **seed_names_translated(data["cascade"])}
        return cls.profile(profile, **data)

    @classmethod
    def coerce(cls, config: CompactionConfig | Mapping[str, Any] | None) -> CompactionConfig:
        """``config`` as a `CompactionConfig`: as is, built from a dict, or the defaults for None.

        Raises:
            ConfigError: anything else (a list, a string...), or an invalid dict.
        """
        if config is None:
            return cls()
        if isinstance(config, CompactionConfig):
            return config
        return cls.from_dict(config)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every option (for `config show`)."""
        out = dataclasses.asdict(self)
        out["layers"] = list(self.layers)
        out["cascade"] = dict(self.cascade)
        return out

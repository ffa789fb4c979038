"""Every threshold and policy of the compaction cascade, with its default and why.

Hysteresis: compaction starts when the view passes ``high_water`` (a share of the effective
budget) and runs layers until the view is under ``low_water``. Between the two the view only
appends, so the provider's prompt cache keeps serving the unchanged prefix. A wide band means
few compactions and high prefix reuse, at the price of dropping more of the oldest history at
each one; a narrow band keeps more history but rewrites the prefix every few turns. Measured on
the trim workload (README, Benchmarks): high 1.0 / low 0.45 keeps prefix reuse at 0.97 (128k)
and 0.905 (32k), where cutting to 60% gives 0.89 at 32k. The ``seed`` profile reproduces the
seed design (clear and evict from the warning state, summarize from the error state, cut to
just under warning). The ``cascade`` table gates each layer by utilization; it keeps the seed's
strategy names as its keys (``tool-results`` gates clear at 0.75, ``progressive`` evict at
0.85, ``conversation`` summarize at 0.92, ``delegation`` 0.95), translated in `CASCADE_KEYS`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..exceptions import ConfigError

__all__ = [
    "CASCADE_KEYS",
    "DEFAULT_CASCADE",
    "EVICTION_POLICIES",
    "STRATEGIES",
    "CompactionConfig",
    "EvictionPolicyName",
    "HybridWeights",
    "Strategy",
]

EvictionPolicyName = Literal["fifo", "lru", "priority", "type-ttl", "semantic-merge", "hybrid"]
EVICTION_POLICIES: tuple[str, ...] = ("fifo", "lru", "priority", "type-ttl", "semantic-merge", "hybrid")
Layer = Literal["clear", "evict", "summarize"]
Strategy = Literal["tool-results", "progressive", "conversation", "delegation"]
STRATEGIES: tuple[Strategy, ...] = ("tool-results", "progressive", "conversation", "delegation")
"""The seed's compression strategies, cheapest first (the order in which a compaction uses them)."""
DEFAULT_CASCADE: Mapping[str, float] = {
    "tool-results": 0.75,
    "progressive": 0.85,
    "conversation": 0.92,
    "delegation": 0.95,
}
CASCADE_KEYS: Mapping[Layer, Strategy] = {"clear": "tool-results", "evict": "progressive", "summarize": "conversation"}
"""The cascade table's key for each layer: the table keeps the seed's strategy names, the code uses layer names."""


@dataclass(frozen=True, kw_only=True)
class HybridWeights:
    """Weights of the hybrid eviction score (higher score = kept longer)."""

    freshness: float = 0.3
    priority: float = 0.3
    type: float = 0.2
    references: float = 0.2


@dataclass(frozen=True, kw_only=True)
class CompactionConfig:
    """Thresholds and policies of the cascade. Shares are of the effective budget."""

    high_water: float = 1.0
    """Compact when the view passes this share of the effective budget (1.0: when it would not fit)."""
    low_water: float = 0.45
    """Compact down to this share; the band below ``high_water`` is what the next turns append into."""
    layers: tuple[Layer, ...] = ("clear", "evict", "summarize")
    """Layers in cascade order; remove one to disable it."""
    cascade: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_CASCADE))
    """Utilization (view / effective budget) from which each compression strategy may run.

    ``tool-results``: the clear layer — old outputs, and outputs of ``tool_result_min_tokens`` or
    more once the agent has used them, become key findings plus a snapshot reference.
    ``progressive``: the evict layer, by age tiers — full for the newest rounds, key points (cleared)
    past ``clear_after_rounds``, one ledger line past ``progressive_line_after`` (evicted first), a
    rolled-up count beyond what the ledger lists. ``conversation``: the summarize layer — a
    fresh view of summary + notes + ledger + recent rounds. ``delegation``: before a model call,
    sub-tasks the caller marked delegable run in isolated sessions and only their results enter.

    A compaction started at utilization *u* uses the strategies whose threshold is at most *u*,
    cheapest first, each only while the view is above the low-water target. With the default
    ``high_water`` of 1.0 every strategy is open when a compaction starts; lower ``high_water``
    (the ``seed`` profile) to let utilization pick them. A view that would not fit the budget, and
    an emergency compaction (the reactive layer), may use every strategy. A threshold above 1 disables a strategy
    except in those two cases (delegation: entirely).
    """
    tool_result_min_tokens: int = 500
    """Outputs this large are cleared once used, whatever their age (the ``tool-results`` strategy)."""
    progressive_line_after: int = 20
    """Rounds further back than this leave the view first, as one ledger line (``progressive``)."""
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
    compaction_budget_ms: float = 3.0
    """Time a compaction turn may take (estimated from the last ones); beyond it the turns before it prepare ahead."""
    prepare_slice_ms: float = 3.0
    """Most time a turn spends preparing ahead (on as few of the last turns before a compaction as it takes)."""
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
    ledger_max_entries: int = 200
    """Entries kept in the ledger; older ones roll up into counts per status and tool."""
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

    def __post_init__(self) -> None:
        def bad(key: str, value: object, allowed: str) -> ConfigError:
            return ConfigError(f"compaction config: {key}={value!r} is invalid; allowed: {allowed}.", key=key)

        if not 0.0 < self.low_water < self.high_water <= 1.0:
            raise bad(
                "low_water/high_water",
                (self.low_water, self.high_water),
                "0 < low_water < high_water <= 1.0 (e.g. 0.5 and 1.0)",
            )
        if not 0.0 < self.reactive_low_water <= self.low_water:
            raise bad("reactive_low_water", self.reactive_low_water, f"a share in (0, low_water={self.low_water}]")
        if not 0.0 < self.min_low_water <= self.low_water:
            raise bad("min_low_water", self.min_low_water, f"a share in (0, low_water={self.low_water}]")
        for key in ("keep_recent_rounds", "clear_after_rounds", "max_summarizer_failures", "thrash_repeats"):
            if getattr(self, key) < 1:
                raise bad(key, getattr(self, key), "an integer >= 1")
        for key in ("cleared_head_chars", "scan_chars", "reactive_keep_rounds", "reactive_retries", "min_clear_tokens"):
            if getattr(self, key) < 0:
                raise bad(key, getattr(self, key), "an integer >= 0")
        if self.eviction_policy not in EVICTION_POLICIES:
            raise bad("eviction_policy", self.eviction_policy, ", ".join(EVICTION_POLICIES))
        for layer in self.layers:
            if layer not in ("clear", "evict", "summarize"):
                raise bad("layers", self.layers, "a sequence of 'clear', 'evict', 'summarize'")
        if not 0.0 < self.ledger_share <= 0.9:
            raise bad("ledger_share", self.ledger_share, "a share in (0, 0.9]")
        if not 0.0 < self.merge_similarity <= 1.0:
            raise bad("merge_similarity", self.merge_similarity, "a similarity in (0, 1]")
        unknown = sorted(set(self.cascade) - set(STRATEGIES))
        if unknown:
            raise bad("cascade", dict(self.cascade), f"strategy names among {', '.join(STRATEGIES)}")
        for name, threshold in self.cascade.items():
            if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0.0 < threshold <= 2.0:
                raise bad(f"cascade.{name}", threshold, "a utilization in (0, 2] (above 1 disables the strategy)")
        if self.tool_result_min_tokens < 1:
            raise bad("tool_result_min_tokens", self.tool_result_min_tokens, "an integer >= 1")
        if self.progressive_line_after < self.clear_after_rounds:
            raise bad(
                "progressive_line_after",
                self.progressive_line_after,
                f"an integer >= clear_after_rounds ({self.clear_after_rounds}): one-line tier after key points",
            )

    def threshold(self, strategy: Strategy) -> float:
        """The utilization from which ``strategy`` may run (missing from ``cascade``: its default)."""
        return float(self.cascade.get(strategy, DEFAULT_CASCADE[strategy]))

    def gate(self, layer: Layer) -> float:
        """The utilization from which ``layer`` may run in a compaction (its entry in ``cascade``)."""
        return self.threshold(CASCADE_KEYS[layer])

    @classmethod
    def profile(cls, name: Literal["default", "seed"], **overrides: Any) -> CompactionConfig:
        """A named profile. ``seed``: clear/evict from warning (0.70), summarize from error (0.90)."""
        if name == "default":
            return cls(**overrides)
        if name == "seed":
            seed_cascade = {**DEFAULT_CASCADE, "tool-results": 0.70, "progressive": 0.70, "conversation": 0.90}
            base: dict[str, Any] = {"high_water": 0.70, "low_water": 0.60, "cascade": seed_cascade}
            if "cascade" in overrides:  # a partial table overrides the profile's, not the whole of it
                overrides = {**overrides, "cascade": {**seed_cascade, **overrides["cascade"]}}
            return cls(**{**base, **overrides})
        raise ConfigError(f"unknown compaction profile {name!r}; use 'default' or 'seed'.", key="profile")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompactionConfig:
        """Build from a plain dict (a config file section); unknown keys are errors naming the allowed ones."""
        data = dict(data)
        profile = data.pop("profile", "default")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"compaction config: unknown key(s) {unknown}; allowed keys: {sorted(known)}.", key=unknown[0]
            )
        if isinstance(data.get("hybrid_weights"), Mapping):
            data["hybrid_weights"] = HybridWeights(**data["hybrid_weights"])
        if "layers" in data:
            data["layers"] = tuple(data["layers"])
        if "cascade" in data:
            if not isinstance(data["cascade"], Mapping):
                raise ConfigError(
                    f"compaction config: cascade={data['cascade']!r} is invalid; allowed: a table of strategy = "
                    'utilization, e.g. {"tool-results": 0.75, "progressive": 0.85}.',
                    key="cascade",
                )
            if profile == "default":  # a partial table keeps the other strategies' defaults
                data["cascade"] = {**DEFAULT_CASCADE, **data["cascade"]}
        try:
            return cls.profile(profile, **data)
        except TypeError as exc:
            raise ConfigError(f"compaction config: {exc}", key=None) from None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every option (for `config show`)."""
        out = dataclasses.asdict(self)
        out["layers"] = list(self.layers)
        out["cascade"] = dict(self.cascade)
        return out

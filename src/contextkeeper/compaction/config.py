"""Every threshold and policy of the compaction cascade, with its default and why.

Hysteresis: compaction starts when the view passes ``high_water`` (a share of the effective
budget) and runs layers until the view is under ``low_water``. Between the two the view only
appends, so the provider's prompt cache keeps serving the unchanged prefix. A wide band means
few compactions and high prefix reuse, at the price of dropping more of the oldest history at
each one; a narrow band keeps more history but rewrites the prefix every few turns. Measured on
the trim workload (README, Benchmarks): high 1.0 / low 0.45 keeps prefix reuse at 0.97 (128k)
and 0.905 (32k), where cutting to 60% gives 0.89 at 32k. The ``seed`` profile reproduces the
seed design (clear and evict from the warning state, summarize from the error state, cut to
just under warning).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..exceptions import ConfigError

__all__ = ["EVICTION_POLICIES", "CompactionConfig", "EvictionPolicyName", "HybridWeights"]

EvictionPolicyName = Literal["fifo", "lru", "priority", "type-ttl", "semantic-merge", "hybrid"]
EVICTION_POLICIES: tuple[str, ...] = ("fifo", "lru", "priority", "type-ttl", "semantic-merge", "hybrid")
Layer = Literal["clear", "evict", "summarize"]


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
    summarize_from: float | None = None
    """Run the summary layer only when the view is above this share before compaction (None: whenever needed)."""
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
    """Order in which old rounds leave the view (L2): fifo, lru, priority, type-ttl, semantic-merge, hybrid."""
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
    """Largest running summary (L3)."""
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

    @classmethod
    def profile(cls, name: Literal["default", "seed"], **overrides: Any) -> CompactionConfig:
        """A named profile. ``seed``: clear/evict from warning (0.70), summarize from error (0.90)."""
        if name == "default":
            return cls(**overrides)
        if name == "seed":
            base: dict[str, Any] = {"high_water": 0.70, "low_water": 0.60, "summarize_from": 0.90}
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
        try:
            return cls.profile(profile, **data)
        except TypeError as exc:
            raise ConfigError(f"compaction config: {exc}", key=None) from None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every option (for `config show`)."""
        out = dataclasses.asdict(self)
        out["layers"] = list(self.layers)
        return out

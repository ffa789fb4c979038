"""Health alerts: which conditions raise them (`AlertRules`) and what one says (`HealthAlert`).

The rules are pure: `AlertState.check` looks at one finished turn (a `TurnSample`) and returns
the alerts it raises. A condition that lasts raises its alert once, when it starts; it is armed
again once the condition has cleared, so a session stuck above the limit is reported once, not
on every turn.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from ..exceptions import ConfigError
from .samples import TurnSample

__all__ = ["ALERT_NAMES", "AlertName", "AlertRules", "AlertState", "HealthAlert"]

AlertName = Literal[
    "critical-utilization",
    "high-eviction-frequency",
    "low-fidelity",
    "low-compression",
    "burn-rate-spike",
    "thrashing",
    "breaker-open",
]
ALERT_NAMES: tuple[AlertName, ...] = (
    "critical-utilization",
    "high-eviction-frequency",
    "low-fidelity",
    "low-compression",
    "burn-rate-spike",
    "thrashing",
    "breaker-open",
)
"""Every alert the health monitor knows; ``thrashing`` and ``breaker-open`` come from the engine."""


@dataclass(frozen=True, kw_only=True)
class AlertRules:
    """When the health monitor raises each alert (every threshold can be changed; ``enabled`` picks alerts)."""

    critical_utilization: float = 0.90
    """Utilization above which a turn counts towards ``critical-utilization``."""
    critical_turns: int = 3
    """Turns in a row above ``critical_utilization`` that raise ``critical-utilization``.

    A view above the mark is normal while it fills towards the high-water mark (the default
    cascade compacts when the next call would not fit), so the streak starts only when a
    compaction leaves the view above the mark, or the engine reports a state past ``warning``
    (compaction not keeping up, a protected part too large, overflow); it ends at the first
    turn at or below the mark."""
    max_evictions_per_turn: float = 5.0
    """Eviction frequency (rounds evicted per turn over the last ``eviction_window`` turns) above
    which ``high-eviction-frequency`` is raised."""
    eviction_window: int = 20
    """Turns the eviction frequency averages over (one compaction evicts many rounds at once)."""
    min_fidelity: float = 0.75
    """A fidelity score (share of probed facts kept) below this raises ``low-fidelity``."""
    min_compression_ratio: float = 2.0
    """A compaction whose tokens before / after is above 1 and below this raises ``low-compression``."""
    burn_spike_factor: float = 2.0
    """A burn rate (mean growth over the last ``burn_window`` turns) above this × the mean growth of
    the turns before them raises ``burn-rate-spike``. One large tool output is normal; several
    turns in a row that each add far more than usual are how a runaway loop looks."""
    burn_window: int = 10
    """Turns the burn rate averages over."""
    burn_min_history: int = 10
    """Turns before the window needed for a historical mean (the session's start sets it)."""
    enabled: frozenset[AlertName] = frozenset(ALERT_NAMES)
    """The alerts raised; the others are neither delivered nor counted."""

    def __post_init__(self) -> None:
        checks: list[tuple[str, float | int, bool, str]] = [
            ("critical_utilization", self.critical_utilization, 0 < self.critical_utilization <= 1, "0 < x <= 1"),
            ("critical_turns", self.critical_turns, self.critical_turns >= 1, "an int >= 1"),
            ("max_evictions_per_turn", self.max_evictions_per_turn, self.max_evictions_per_turn >= 0, "x >= 0"),
            ("eviction_window", self.eviction_window, self.eviction_window >= 1, "an int >= 1"),
            ("min_fidelity", self.min_fidelity, 0 <= self.min_fidelity <= 1, "0 <= x <= 1"),
            ("min_compression_ratio", self.min_compression_ratio, self.min_compression_ratio >= 1, "x >= 1"),
            ("burn_spike_factor", self.burn_spike_factor, self.burn_spike_factor > 1, "x > 1"),
            ("burn_window", self.burn_window, self.burn_window >= 1, "an int >= 1"),
            ("burn_min_history", self.burn_min_history, self.burn_min_history >= 1, "an int >= 1"),
        ]
        for key, value, ok, wanted in checks:
            if not ok:
                raise ConfigError(f"AlertRules({key}={value!r}): use {wanted}.", key=key)
        unknown = sorted(set(self.enabled) - set(ALERT_NAMES))
        if unknown:
            raise ConfigError(
                f"AlertRules(enabled=...) names unknown alerts {unknown}: choose from {list(ALERT_NAMES)}.",
                key="enabled",
            )


@dataclass(frozen=True, kw_only=True)
class HealthAlert:
    """One alert raised for a session."""

    session_id: str
    name: AlertName
    detail: str
    """What happened, with the figures."""
    turn: int | None = None
    value: float | None = None
    """The measured value that crossed the threshold (None for engine alerts)."""
    threshold: float | None = None
    ts: float = field(default_factory=time.time)


@dataclass(kw_only=True)
class AlertState:
    """What the rules remember between turns: the streak above the critical mark, armed alerts."""

    rules: AlertRules
    critical_streak: int = 0
    _active: set[AlertName] = field(default_factory=set)

    def check(
        self,
        sample: TurnSample,
        *,
        session_id: str,
        burn_rate: float | None,
        growth_mean: float | None,
        eviction_frequency: float,
    ) -> list[HealthAlert]:
        """The alerts one finished turn raises.

        ``burn_rate`` is the mean growth over the last ``burn_window`` turns, this one included, and
        ``growth_mean`` the mean growth of the turns before them (None for either: too few turns);
        ``eviction_frequency`` the rounds evicted per turn over the last ``eviction_window`` turns.
        """
        return list(self._check(sample, session_id, burn_rate, growth_mean, eviction_frequency))

    def _check(
        self,
        s: TurnSample,
        session_id: str,
        burn_rate: float | None,
        growth_mean: float | None,
        eviction_frequency: float,
    ) -> Iterator[HealthAlert]:
        rules = self.rules
        above = s.utilization > rules.critical_utilization
        starts = s.compaction_before is not None or s.state in ("error", "critical", "overflow")
        self.critical_streak = self.critical_streak + 1 if above and (self.critical_streak or starts) else 0
        if self._edge("critical-utilization", self.critical_streak >= rules.critical_turns):
            yield HealthAlert(
                session_id=session_id,
                name="critical-utilization",
                turn=s.turn,
                value=s.utilization,
                threshold=rules.critical_utilization,
                detail=f"utilization above {rules.critical_utilization:.2f} for {self.critical_streak} turns "
                f"(now {s.utilization:.3f})",
            )
        if self._edge("high-eviction-frequency", eviction_frequency > rules.max_evictions_per_turn):
            yield HealthAlert(
                session_id=session_id,
                name="high-eviction-frequency",
                turn=s.turn,
                value=eviction_frequency,
                threshold=float(rules.max_evictions_per_turn),
                detail=f"{eviction_frequency:.1f} rounds evicted per turn over the last {rules.eviction_window} "
                f"turns (limit {rules.max_evictions_per_turn:g})",
            )
        ratio = s.compression_ratio
        if ratio is not None and 1.0 < ratio < rules.min_compression_ratio:
            yield HealthAlert(
                session_id=session_id,
                name="low-compression",
                turn=s.turn,
                value=ratio,
                threshold=rules.min_compression_ratio,
                detail=f"compaction cut {s.compaction_before} to {s.compaction_after} tokens "
                f"(ratio {ratio:.2f}, below {rules.min_compression_ratio:.2f})",
            )
        if s.fidelity is not None and s.fidelity < rules.min_fidelity:
            yield self.low_fidelity(session_id, s.fidelity, turn=s.turn, what="compaction probes")
        spike = (
            burn_rate is not None
            and growth_mean is not None
            and growth_mean > 0
            and burn_rate > rules.burn_spike_factor * growth_mean
        )
        if self._edge("burn-rate-spike", spike):
            assert burn_rate is not None and growth_mean is not None
            yield HealthAlert(
                session_id=session_id,
                name="burn-rate-spike",
                turn=s.turn,
                value=burn_rate,
                threshold=rules.burn_spike_factor * growth_mean,
                detail=f"the last {rules.burn_window} turns added {burn_rate:.0f} tokens each, "
                f"{burn_rate / growth_mean:.1f}x the earlier mean of {growth_mean:.0f} (a likely runaway loop)",
            )

    def low_fidelity(self, session_id: str, score: float, *, turn: int | None, what: str) -> HealthAlert:
        """The ``low-fidelity`` alert for ``score`` (the caller checked it is below the threshold)."""
        return HealthAlert(
            session_id=session_id,
            name="low-fidelity",
            turn=turn,
            value=score,
            threshold=self.rules.min_fidelity,
            detail=f"fidelity {score:.3f} by {what} (below {self.rules.min_fidelity:.2f})",
        )

    def _edge(self, name: AlertName, condition: bool) -> bool:
        """True when ``condition`` starts (raised once per episode)."""
        if not condition:
            self._active.discard(name)
            return False
        if name in self._active:
            return False
        self._active.add(name)
        return True

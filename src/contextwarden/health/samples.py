"""What the health monitor records: one `TurnSample` per prepared view, `HealthSnapshot`s of the
running metrics, and the `HealthTrend` over the last snapshots.

Token figures are the token counter's (the units compaction events report); utilization is the
engine's ratio of the view to the effective budget.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["HealthSnapshot", "HealthTrend", "TurnSample", "trend"]


@dataclass(frozen=True, kw_only=True)
class TurnSample:
    """One prepared view: how full it was and what this turn's compaction (if any) did."""

    turn: int
    ts: float
    used: int
    """Tokens of the view (the counter's)."""
    budget: int
    """The effective budget (the counter's tokens)."""
    utilization: float
    state: str
    growth: int | None
    """Tokens this turn added before any compaction (the burn); None on the first turn."""
    evictions: int = 0
    """Rounds the evict layer dropped in this turn."""
    layers: dict[str, int] = field(default_factory=dict)
    """Layer runs in this turn's compaction, by layer."""
    compaction_before: int | None = None
    """Tokens when this turn's compaction started (None: no compaction)."""
    compaction_after: int | None = None
    compaction_ms: float = 0.0
    tool_result_share: float | None = None
    """Share of the view taken by tool results (None when the monitor sees only events)."""
    prefix_reuse: float | None = None
    """Share of this view that repeats the previous view from its start (what a prompt cache serves)."""
    fidelity: float | None = None
    """Share of the probed facts the compaction of this turn kept (None: no compaction or no probe)."""

    @property
    def compression_ratio(self) -> float | None:
        """Tokens before / after this turn's compaction (None without one)."""
        if self.compaction_before is None or not self.compaction_after:
            return None
        return self.compaction_before / self.compaction_after


@dataclass(frozen=True, kw_only=True)
class HealthSnapshot:
    """The health of one session at one turn: the latest view and the session's running figures."""

    session_id: str
    turn: int
    ts: float
    utilization: float
    used: int
    budget: int
    state: str
    burn_rate: float
    """Mean tokens added per turn over the recent turns (`AlertRules.burn_window`)."""
    turns_until_overflow: float | None
    """Turns left at ``burn_rate`` before the view reaches the budget (None when it does not grow)."""
    eviction_frequency: float
    """Rounds evicted per turn over the recent turns."""
    compactions: dict[str, int]
    """Layer runs so far, by layer."""
    compression_ratio: float | None
    """Tokens before / after of the last compaction (None before the first)."""
    overall_compression_ratio: float | None
    """Tokens before / after summed over every compaction so far."""
    tool_result_share: float | None
    prefix_reuse: float | None
    """Mean prefix reuse over the recent turns."""
    summarizer_failures: int
    breaker: str
    """The summarizer's circuit breaker: closed, open or half-open (``unknown`` without a session)."""
    calibration_error: float | None
    """Mean relative error of the token counter against the provider's reported usage (None before any)."""
    fidelity: float | None
    """The last fidelity score (compaction probes or an evaluation fed to the monitor)."""
    alerts: dict[str, int]
    """Alerts raised so far, by name."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class HealthTrend:
    """How the last snapshots moved: first and last value, mean and slope per turn of each figure."""

    session_id: str
    snapshots: int
    first_turn: int
    last_turn: int
    figures: dict[str, dict[str, float]]
    """By figure (utilization, burn_rate, ...): ``first``, ``last``, ``mean``, ``min``, ``max``, ``slope``."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    def render(self) -> str:
        """A plain-text table: one line per figure."""
        lines = [f"session {self.session_id}: turns {self.first_turn}-{self.last_turn} ({self.snapshots} snapshots)"]
        lines.append(f"{'figure':<26}{'first':>10}{'last':>10}{'mean':>10}{'slope/turn':>12}")
        for name, f in self.figures.items():
            lines.append(f"{name:<26}{f['first']:>10.3f}{f['last']:>10.3f}{f['mean']:>10.3f}{f['slope']:>12.4f}")
        return "\n".join(lines)


_TREND_FIGURES = (
    "utilization",
    "burn_rate",
    "turns_until_overflow",
    "eviction_frequency",
    "compression_ratio",
    "tool_result_share",
    "prefix_reuse",
    "calibration_error",
    "fidelity",
)


def trend(snapshots: Sequence[HealthSnapshot]) -> HealthTrend:
    """The trend over ``snapshots`` (oldest first); figures with no value in any snapshot are left out."""
    if not snapshots:
        return HealthTrend(session_id="", snapshots=0, first_turn=0, last_turn=0, figures={})
    figures: dict[str, dict[str, float]] = {}
    for name in _TREND_FIGURES:
        points = [(s.turn, float(v)) for s in snapshots if (v := getattr(s, name)) is not None]
        if not points:
            continue
        values = [v for _, v in points]
        figures[name] = {
            "first": values[0],
            "last": values[-1],
            "mean": statistics.fmean(values),
            "min": min(values),
            "max": max(values),
            "slope": _slope(points),
        }
    return HealthTrend(
        session_id=snapshots[-1].session_id,
        snapshots=len(snapshots),
        first_turn=snapshots[0].turn,
        last_turn=snapshots[-1].turn,
        figures=figures,
    )


def _slope(points: Sequence[tuple[int, float]]) -> float:
    """Least-squares change per turn (0.0 for fewer than two distinct turns)."""
    if len({t for t, _ in points}) < 2:
        return 0.0
    return statistics.linear_regression([float(t) for t, _ in points], [v for _, v in points]).slope

"""Pressure states that mean something when compaction runs at the edge of the window.

With the default cascade (compact when the next call would not fit, down to 45%), a healthy
view spends most turns between 70% and 100% of its budget. Fixed ratio thresholds would call
that "critical" although nothing is wrong. The default ``band`` mode names what an operator
can act on instead:

========  ===================================================================================
normal    the view is inside its band and no compaction is expected within ``warning_turns``
warning   a compaction is expected within ``warning_turns`` turns at the current growth
          (the next request after it misses the provider's prompt cache)
error     compaction is not keeping up: the last one could not reach its low-water mark
          (the protected part is too large) or the view refills within a few turns (thrashing)
critical  the protected part alone (system prompt, pinned items, current request, newest
          round) takes ``critical`` of the budget or more: the next large output may not fit
overflow  the view does not fit the budget
========  ===================================================================================

The ``ratio`` mode keeps the seed design's fixed thresholds (``Thresholds``: warning 0.70,
error 0.90, critical 0.95) and is what ``CompactionConfig.profile("seed")`` uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..budget import PressureMode, PressureState, Thresholds

__all__ = ["PressureInputs", "pressure_state"]


@dataclass(frozen=True, kw_only=True)
class PressureInputs:
    """What the engine knows about the view when it reports its state."""

    used: int
    """Tokens of the view."""
    effective: int
    """The effective budget."""
    high_water: float
    """The compaction trigger, as a share of the budget."""
    growth: float
    """Recent growth of the view per turn (tokens; 0 when unknown or shrinking)."""
    floor: int
    """Tokens of the part of the view no layer may remove, as of the last compaction."""
    behind: bool
    """The last compaction could not reach its low-water mark, or the view is thrashing."""


def pressure_state(
    inputs: PressureInputs, *, mode: PressureMode, thresholds: Thresholds, warning_turns: int = 3
) -> PressureState:
    """The pressure state of a view (see the module docstring for what each state means)."""
    effective = inputs.effective
    if effective <= 0:
        return "overflow"
    if mode == "ratio":
        return thresholds.state(inputs.used / effective)
    if inputs.used > effective * thresholds.overflow:
        return "overflow"
    if inputs.floor >= thresholds.critical * effective:
        return "critical"
    if inputs.behind:
        return "error"
    trigger = inputs.high_water * effective
    if inputs.used >= trigger or (inputs.growth > 0 and inputs.used + warning_turns * inputs.growth >= trigger):
        return "warning"
    return "normal"

"""The status figures of a view, each defined once.

Every surface that shows how full a session is (`Session.status`, the ``context.status`` event, the
CLI's ``inspect`` and ``sessions list``, the sessions API, the dashboard, the demo report, the
metrics) shows these figures, defined here (``ViewStatus.figures()`` gives them as JSON):

==================  =============================================================================
window              the context window the budget uses (the configured one, or the smaller one the
                    provider served), in the provider's tokens
reserved output     tokens kept free for the model's reply
tool schemas        tokens of the tool schemas sent with every request (provider's tokens)
effective budget    window − reserved output − tool schemas
used                tokens of the view in the provider's tokens: the counter's count (``used_raw``)
                    times the calibration factor learned from reported usage (1.0 until then)
ratio               used ÷ effective budget (computed in the counter's tokens, so calibration does
                    not round it)
state               normal, warning, error, critical or overflow, by the session's `StateRule`
last layer          the compaction layer that last changed the view in this session
==================  =============================================================================

The components of the view (system, context block, history, tool results, recalled memory) are
given in the provider's tokens and always add up to ``used``: the history takes the remainder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .budget import Budget, PressureMode, Thresholds

__all__ = ["StateRule", "components", "describe", "measure", "state_rule"]


@dataclass(frozen=True, kw_only=True)
class StateRule:
    """How a session names its pressure state, and the marks (shares of the effective budget) it uses.

    ``ratio``: fixed thresholds (warning, error, critical, overflow); the state is the highest mark
    the ratio reached. ``band``: the state follows the compaction band (see
    `contextwarden.compaction.pressure`): its marks are the low-water target, the high-water
    trigger and the overflow line.
    """

    mode: PressureMode
    marks: tuple[tuple[str, float], ...]
    """(name, share of the effective budget), lowest first: what a gauge draws."""
    text: str
    """One sentence a person reads next to the state."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: ``mode``, ``marks`` (name → share) and ``text``."""
        return {"mode": self.mode, "marks": dict(self.marks), "text": self.text}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StateRule:
        """The rule `to_dict` wrote."""
        mode = data.get("mode")
        marks = data.get("marks") or {}
        return cls(
            mode="ratio" if mode == "ratio" else "band",
            marks=tuple((str(k), float(v)) for k, v in dict(marks).items()),
            text=str(data.get("text") or ""),
        )


def state_rule(
    mode: PressureMode, thresholds: Thresholds, *, high_water: float, low_water: float, warning_turns: int = 3
) -> StateRule:
    """The `StateRule` of a session's configuration (``compaction.pressure_states`` and its thresholds)."""
    t = thresholds
    if mode == "ratio":
        return StateRule(
            mode="ratio",
            marks=(("warning", t.warning), ("error", t.error), ("critical", t.critical), ("overflow", t.overflow)),
            text=(
                f"fixed thresholds: warning from {t.warning:.0%} of the effective budget, error from {t.error:.0%}, "
                f"critical from {t.critical:.0%}, overflow from {t.overflow:.0%}"
            ),
        )
    return StateRule(
        mode="band",
        marks=(("low water", low_water), ("high water", high_water), ("overflow", t.overflow)),
        text=(
            f"band: compaction runs at high water ({high_water:.0%}) and cuts to low water ({low_water:.0%}); "
            f"warning when high water is due within {warning_turns} turns, error when compaction cannot keep up, "
            f"critical when the protected part takes {t.critical:.0%} or more, overflow above {t.overflow:.0%}"
        ),
    )


def measure(budget: Budget, used_raw: int) -> tuple[int, int, float]:
    """``(used, effective budget, ratio)`` of a view of ``used_raw`` counted tokens under ``budget``.

    ``used`` and the effective budget are in the provider's tokens; the ratio is taken in the
    counter's tokens, where the budget's limits are exact.
    """
    effective = budget.effective
    ratio = round(used_raw / effective, 4) if effective else 0.0
    return budget.calibrated(used_raw), budget.calibrated_effective, ratio


def components(budget: Budget, used: int, parts: Mapping[str, int]) -> dict[str, int]:
    """The view's components in the provider's tokens, adding up to ``used`` (calibrated).

    ``parts`` are counted tokens; ``history`` (required in ``parts``) takes whatever calibration
    rounding leaves, so the sum is exact.
    """
    out = {name: budget.calibrated(tokens) for name, tokens in parts.items() if name != "history"}
    rest = used - sum(out.values())
    if rest < 0 and out:  # each part rounded up: take the excess back from the largest
        largest = max(out, key=lambda name: out[name])
        out[largest] = max(0, out[largest] + rest)
        rest = max(0, used - sum(out.values()))
    out["history"] = rest
    return {name: out[name] for name in parts}


def describe(data: Mapping[str, Any]) -> str:
    """One line of the figures (a ``ViewStatus.figures()`` dict) for a terminal: used / effective, ratio, state."""
    rule = data.get("rule") or {}
    last = data.get("last_layer") or "none yet"
    return (
        f"{int(data['used']):,} / {int(data['effective']):,} tokens ({float(data['ratio']):.1%}), state "
        f"{data['state']} ({rule.get('mode', '?')} rule); window {int(data['window']):,} − reserved output "
        f"{int(data['reserved_output']):,} − tool schemas {int(data['tool_schemas']):,}; last layer {last}"
    )

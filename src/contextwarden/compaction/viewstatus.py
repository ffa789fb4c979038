"""`ViewStatus`: the accounting of one prepared view (tokens used, state, breakdown, counters), and
`StatusReading`: what it is computed from, read when the view is served."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..budget import Budget, PressureMode, PressureState
from ..events import LayerName
from ..figures import StateRule, components, measure, state_rule
from .pressure import PressureInputs, pressure_state

if TYPE_CHECKING:
    from ..memory.status import RecallStatus

__all__ = ["StatusReading", "ViewStatus"]


@dataclass(frozen=True, kw_only=True)
class ViewStatus:
    """Accounting of one prepared view.

    ``used`` and ``budget`` are in the provider's tokens: the counter's count times the applied
    calibration (``calibration``, 1.0 until enough usage was reported); ``used_raw`` is the
    counter's own count and ``breakdown`` is in the counter's tokens too. Every figure is defined
    in `contextwarden.figures`; ``components`` is the breakdown in the provider's tokens, adding up
    to ``used``.
    """

    used: int
    budget: int
    ratio: float
    state: str
    layer: LayerName | None
    """The last layer that ran in this prepare (None: the view only appended)."""
    breakdown: dict[str, int]
    """Tokens by component: system, context (summary + ledger), history, tool_results."""
    turn: int
    compactions: dict[str, int]
    """Layer runs so far in this session."""
    transcript_messages: int
    view_messages: int
    breaker: str
    subscriber_errors: int = 0
    hook_errors: int = 0
    used_raw: int = 0
    """The view's tokens as the counter counts them (before calibration)."""
    calibration: float = 1.0
    """The calibration factor applied to the counts (provider tokens per counted token)."""
    window: int = 0
    """The context window the budget uses: the configured one, or the smaller one the server serves."""
    served_window: int | None = None
    """The window a context-length error reported, when the session adopted it (smaller than configured)."""
    degraded: str | None = None
    """Why the session's store does not have this view: ``store-unavailable`` (compacted in memory, saved
    when the store is back) or ``store-lost`` (see `Session.restore_to_store`); None when it has it."""
    memory: RecallStatus | None = None
    """What long-term memory added to the view (`contextwarden.recall`); None when the session has no memory."""
    reserved_output: int = 0
    """Tokens kept free for the reply (provider's tokens)."""
    tool_schemas: int = 0
    """Tokens of the tool schemas sent with every request (provider's tokens): ``window − reserved_output −
    tool_schemas`` is ``budget``."""
    rule: StateRule | None = None
    """How ``state`` was named, and the marks it uses (`contextwarden.figures.StateRule`)."""
    last_layer: LayerName | None = None
    """The compaction layer that last changed the view in this session (``layer`` is this prepare's only)."""
    components: dict[str, int] | None = None
    """``breakdown`` in the provider's tokens, adding up to ``used``."""

    def figures(self) -> dict[str, Any]:
        """The figures as JSON: what every surface shows (each is defined in `contextwarden.figures`).

        ``components`` add up to ``used``; ``rule`` says how ``state`` was named and which marks it uses.
        """
        rule = self.rule.to_dict() if self.rule is not None else None
        memory = self.memory
        return {
            "window": self.window,
            "reserved_output": self.reserved_output,
            "tool_schemas": self.tool_schemas,
            "effective": self.budget,
            "used": self.used,
            "used_raw": self.used_raw,
            "calibration": self.calibration,
            "ratio": self.ratio,
            "state": self.state,
            "rule": rule,
            "last_layer": self.last_layer,
            "turn": self.turn,
            "components": dict(self.components) if self.components is not None else None,
            "compactions": dict(self.compactions),
            "served_window": self.served_window,
            "view_messages": self.view_messages,
            "transcript_messages": self.transcript_messages,
            "memory": None
            if memory is None
            else {"hits": memory.hits, "tokens": memory.tokens, "room": memory.room, "retrieval": memory.retrieval},
        }


class StatusReading:
    """What the engine read of a view when it served it; `status` computes the `ViewStatus` from it.

    Reading is a few attribute loads. Computing the status (calibration, the pressure state, the
    breakdown) costs more than the rest of a turn that only appended, and most agent loops never
    look at it on such a turn, so a prepared view computes it when its status is first read.
    The reading holds values, not the engine: the status is the one of the turn it was read on.
    """

    __slots__ = (
        "_status",
        "behind",
        "breaker",
        "budget",
        "compactions",
        "context",
        "floor",
        "growth",
        "high_water",
        "hook_errors",
        "last_layer",
        "layer",
        "low_water",
        "mode",
        "served_window",
        "subscriber_errors",
        "system",
        "tool_results",
        "transcript_messages",
        "turn",
        "used",
        "view_messages",
    )

    def __init__(
        self,
        *,
        budget: Budget,
        used: int,
        layer: LayerName | None,
        system: int,
        context: int,
        tool_results: int,
        turn: int,
        compactions: dict[str, int],
        transcript_messages: int,
        view_messages: int,
        breaker: str,
        subscriber_errors: int,
        hook_errors: int,
        served_window: int | None,
        high_water: float,
        growth: float,
        floor: int,
        behind: bool,
        mode: PressureMode,
        low_water: float = 0.0,
        last_layer: LayerName | None = None,
    ) -> None:
        self.budget, self.used, self.layer = budget, used, layer
        self.system, self.context, self.tool_results = system, context, tool_results
        self.turn, self.compactions = turn, compactions
        self.transcript_messages, self.view_messages = transcript_messages, view_messages
        self.breaker, self.subscriber_errors, self.hook_errors = breaker, subscriber_errors, hook_errors
        self.served_window = served_window
        self.high_water, self.growth, self.floor, self.behind, self.mode = high_water, growth, floor, behind, mode
        self.low_water, self.last_layer = low_water, last_layer
        self._status: ViewStatus | None = None

    def report_subscriber_errors(self, errors: int) -> None:
        """Count ``errors`` subscriber failures, those of the status event sent for this view."""
        self.subscriber_errors = errors
        self._status = None

    def state(self) -> PressureState:
        """The pressure state of the view (see `contextwarden.compaction.pressure`)."""
        budget = self.budget
        inputs = PressureInputs(
            used=self.used,
            effective=budget.effective,
            high_water=self.high_water,
            growth=self.growth,
            floor=self.floor,
            behind=self.behind,
        )
        return pressure_state(inputs, mode=self.mode, thresholds=budget.thresholds)

    def status(self) -> ViewStatus:
        """The view's `ViewStatus` (computed once)."""
        if self._status is None:
            budget, used = self.budget, self.used
            calibrated, effective, ratio = measure(budget, used)
            breakdown = {
                "system": self.system,
                "context": self.context,
                "history": used - self.system - self.context - self.tool_results,
                "tool_results": self.tool_results,
            }
            self._status = ViewStatus(
                used=calibrated,
                used_raw=used,
                budget=effective,
                calibration=budget.scale,
                window=budget.window,
                reserved_output=budget.reserved_output,
                tool_schemas=budget.calibrated(budget.tool_schemas),
                served_window=self.served_window,
                ratio=ratio,
                state=self.state(),
                rule=state_rule(self.mode, budget.thresholds, high_water=self.high_water, low_water=self.low_water),
                layer=self.layer,
                last_layer=self.layer or self.last_layer,
                breakdown=breakdown,
                components=components(budget, calibrated, breakdown),
                turn=self.turn,
                compactions=dict(self.compactions),  # the caller's copy: the engine's own stays unchanged
                transcript_messages=self.transcript_messages,
                view_messages=self.view_messages,
                breaker=self.breaker,
                subscriber_errors=self.subscriber_errors,
                hook_errors=self.hook_errors,
            )
        return self._status

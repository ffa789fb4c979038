"""`ViewStatus`: the accounting of one prepared view (tokens used, state, breakdown, counters)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..memory.status import RecallStatus

__all__ = ["ViewStatus"]


@dataclass(frozen=True, kw_only=True)
class ViewStatus:
    """Accounting of one prepared view.

    ``used`` and ``budget`` are in the provider's tokens: the counter's count times the applied
    calibration (``calibration``, 1.0 until enough usage was reported); ``used_raw`` is the
    counter's own count and ``breakdown`` is in the counter's tokens too.
    """

    used: int
    budget: int
    ratio: float
    state: str
    layer: str | None
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
    """What long-term memory added to the view (`contextkeeper.recall`); None when the session has no memory."""

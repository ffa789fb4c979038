"""`BookRound`: a round of the round book, with what the view shows of it.

One round model serves the whole library: `BookRound` extends `contextwarden.rounds.Round` (the
model `group_rounds` makes) with the view's side: its state (``full``, ``cleared``, ``evicted``),
the stand-ins shown for it and their tokens, and what compaction prepared for it ahead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..ledger_entries import LedgerEntry
from ..messages import Message
from ..rounds import Round

__all__ = ["BookRound", "RoundState"]

RoundState = Literal["full", "cleared", "evicted"]


@dataclass(eq=False, slots=True, kw_only=True)
class BookRound(Round):
    """A `Round` in the book, with what the view shows of it."""

    ordinal: int
    """Position of the round in the book (0 = oldest); a ledger step and ``#<step>`` use it."""
    tokens: int = 0
    tool_tokens: int = 0
    state: RoundState = "full"
    shown: list[Message] | None = None
    """Stand-ins shown instead of the transcript messages (cleared or shrunk rounds)."""
    shown_tokens: int = 0
    shown_tool_tokens: int = 0
    pinned: bool = False
    facts: tuple[str, ...] | None = None
    ledger_step: int | None = None
    snapshot_id: str | None = None
    snapshot_written: bool = False
    ready: list[Message] | None = None
    """Stand-ins prepared ahead of the next compaction (see `ahead`)."""
    entry: LedgerEntry | None = None
    """Ledger entry prepared ahead, appended when the round leaves the view."""
    prepared: bool = False
    fillers: list[Message] | None = None
    """Stand-in results of abandoned calls, shown after the round's other results."""
    filler_tokens: int = 0

    # a book's rounds are compared and hashed by identity (as the book's own bookkeeping does)
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    @property
    def view_tokens(self) -> int:
        if self.state == "evicted":
            return 0
        return (self.shown_tokens if self.shown is not None else self.tokens) + self.filler_tokens

    @property
    def view_tool_tokens(self) -> int:
        if self.state == "evicted":
            return 0
        return (self.shown_tool_tokens if self.shown is not None else self.tool_tokens) + self.filler_tokens

"""`SessionState`: a read-only view of one session's state, for code that watches a session.

The service, the health monitor, long-term recall and the command line read what a session holds
through it (``session.state``): the transcript's length and messages, the view as last served, the
parts of the context block, and the accounting. None of them reaches into the compaction engine or
its round book, so the engine can change its insides without changing them.

Reading costs nothing per request: the view object holds the engine, not a copy of anything. The
transcript is read by length, by index or as a tuple of a slice (made only when asked for), and the
view is the engine's own list behind a read-only type (the same object from one turn to the next
while no compaction runs, so a watcher can tell an unchanged prefix by identity).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .compaction.bookround import BookRound
from .compaction.viewstatus import StatusReading, ViewStatus
from .instructions import UserInstructions
from .ledger import Ledger
from .messages import Message
from .notes import Notes
from .workingset import WorkingSet

if TYPE_CHECKING:
    from .compaction.engine import ContextEngine

__all__ = ["SessionState"]


class SessionState:
    """What one session holds, read-only: its transcript, its view, its context block and its accounting.

    Get it from ``session.state``; it follows the session (a session that reloads from its store
    hands out a new one, so read ``session.state`` rather than keeping it across a reload).
    """

    __slots__ = ("_engine",)

    def __init__(self, engine: ContextEngine) -> None:
        self._engine = engine

    # --- the transcript ------------------------------------------------------------------------
    @property
    def transcript_length(self) -> int:
        """Messages in the transcript (every message ever added)."""
        return len(self._engine.book.transcript)

    def message(self, index: int) -> Message:
        """The transcript's message at ``index`` (negative counts from the end).

        Raises:
            IndexError: no message at ``index``.
        """
        return self._engine.book.transcript[index]

    def messages(self, start: int = 0, stop: int | None = None) -> tuple[Message, ...]:
        """The transcript's messages from ``start`` up to ``stop`` (slice rules), as a new tuple."""
        return tuple(self._engine.book.transcript[start:stop])

    def fresh(self, messages: Sequence[Message]) -> list[Message]:
        """The ones of ``messages`` that `Session.add` would append (ids already in the transcript left
        out); nothing is added.

        Raises:
            MessageError: a malformed message, or an id given to two different messages.
            ToolPairError: a result for an unknown call, or a second result for a call.
            BudgetExceeded: system messages that alone would pass the budget.
        """
        return self._engine.check(messages)

    @property
    def rounds(self) -> Sequence[BookRound]:
        """The transcript's rounds, oldest first (each names its messages by transcript index)."""
        return self._engine.book.rounds

    @property
    def last_user_round(self) -> BookRound | None:
        """The round of the newest user message (None before the first)."""
        return self._engine.book.last_user_round

    @property
    def last_assistant_index(self) -> int:
        """The transcript index of the newest assistant message (-1 before the first)."""
        return self._engine.book.last_assistant_index

    # --- the view ------------------------------------------------------------------------------
    @property
    def view(self) -> Sequence[Message]:
        """The view as last prepared (the engine's own list: read it, never change it)."""
        return self._engine.book.view

    @property
    def view_generation(self) -> int:
        """A number that changes whenever a compaction rebuilds the view (appends keep it)."""
        return self._engine.book.view_generation

    # --- the context block ---------------------------------------------------------------------
    @property
    def summary(self) -> str | None:
        """The running summary of the rounds that left the view (None before the first)."""
        return self._engine.book.summary

    @property
    def summary_span(self) -> tuple[str, str] | None:
        """The first and last message ids the summary stands in for (None without a summary)."""
        return self._engine.book.summary_span

    @property
    def ledger(self) -> Ledger:
        """The task-progress ledger."""
        return self._engine.book.ledger

    @property
    def working_set(self) -> WorkingSet:
        """The files, commands, errors and symbols the agent acted on."""
        return self._engine.book.working_set

    @property
    def notes(self) -> Notes:
        """The structured notes the agent (or the caller) keeps."""
        return self._engine.book.notes

    @property
    def instructions(self) -> UserInstructions:
        """The user's own words kept for the whole session."""
        return self._engine.instructions

    # --- accounting ----------------------------------------------------------------------------
    def status(self) -> ViewStatus:
        """Accounting of the current view (without the memory's and the store's parts: see `Session.status`)."""
        return self._engine.status()

    def reading(self) -> StatusReading:
        """What `status` is computed from, read now (a few attribute loads; cheaper than `status`)."""
        return self._engine.read_status()

    @property
    def used(self) -> int:
        """Tokens of the view now, as the session's counter counts them."""
        return self._engine.used()

    def count(self, message: Message) -> int:
        """Tokens of ``message`` as the session's counter counts them (cached per message)."""
        return self._engine.accountant.count_message(message)

    @property
    def turn(self) -> int:
        """Turns (prepared views) so far."""
        return self._engine.counters.turn

    @property
    def summarizer_failures(self) -> int:
        """Summaries that failed over the session (every one, not only those that opened the breaker)."""
        return self._engine.summary_layer.breaker.total_failures

"""The session's own tools: `read_context` (snapshots, ledger steps, spans), ``notes`` and
``recall`` (`SessionTools`, a base of `BaseSession`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._brief import brief
from ._json import tool_arguments, whole_number
from ._session_budget import SessionBudget
from .compaction.engine import ContextEngine
from .exceptions import SnapshotError, UsageError
from .notes import NOTES_TOOL
from .snapshots import READ_CONTEXT_TOOL, SnapshotStore, read_context

__all__ = ["SessionTools"]

_MAX_REF_CHARS = 512
"""Longest `read_context` reference (a span of two message ids fits many times over)."""


class _Rebuilding:
    """Snapshot reads that fall back to the transcript when the store does not have the snapshot."""

    def __init__(self, snapshots: SnapshotStore, engine: ContextEngine) -> None:
        self._snapshots, self._engine = snapshots, engine

    def put_snapshot(self, session_id: str, snapshot_id: str, data: bytes) -> None:
        self._snapshots.put_snapshot(session_id, snapshot_id, data)

    def get_snapshot(self, session_id: str, snapshot_id: str) -> bytes:
        try:
            return self._snapshots.get_snapshot(session_id, snapshot_id)
        except SnapshotError:
            rebuilt = self._engine.rebuild_snapshot(snapshot_id)
            if rebuilt is None:
                raise
            return rebuilt

    def list_snapshots(self, session_id: str) -> list[str]:
        return self._snapshots.list_snapshots(session_id)


class SessionTools(SessionBudget):
    """Answers to the tools contextwarden gives the model."""

    snapshots: SnapshotStore

    def read_context(self, ref: str, *, page: int = 1) -> str:
        """Handle the `read_context` tool: a page of a snapshot, a ledger step (``#12``) or a span.

        Raises:
            SnapshotError: the reference is malformed, unknown or outside this session, or the
                page is not a positive integer.
        """
        if not isinstance(ref, str):
            raise SnapshotError(f"read_context needs the reference as a string, got {type(ref).__name__}.")
        if not isinstance(page, int) or isinstance(page, bool) or page < 1:
            raise SnapshotError(f"page must be a positive integer, got {brief(page)}.")
        ref = ref.strip()
        if ref.startswith("#"):
            ref = self._step_ref(ref)
        return read_context(
            ref,
            session_id=self.session_id,
            snapshots=_Rebuilding(self.snapshots, self.engine),
            transcript=lambda: self.engine.transcript,
            page=page,
        ).render()

    def _step_ref(self, ref: str) -> str:
        """``#<step>`` → the step's transcript span (steps are numbered by round)."""
        number = ref[1:].strip()
        if number.isascii() and number.isdigit() and len(number) <= 12 and int(number) < len(self.engine.rounds):
            r = self.engine.rounds[int(number)]
            first = self.engine.transcript[r.indices[0]].message_id
            last = self.engine.transcript[r.indices[-1]].message_id
            return f"{first}..{last}"
        raise SnapshotError(
            f"unknown step reference {brief(ref)}; steps are '#<number>' as listed in the progress ledger "
            f"(0..{len(self.engine.rounds) - 1})."
        )

    def handle_tool_call(self, name: str, arguments: str | Mapping[str, Any]) -> str | None:
        """Answer contextwarden's own tools (``read_context``, ``notes``); None for other tools.

        The answer is always a text for the model: arguments it got wrong (not JSON, too large or
        too deep, a page that is not a whole number from 1, an unknown reference) give
        ``error: ...`` with what to send instead.
        """
        if name == NOTES_TOOL["function"]["name"]:
            return self.engine.notes.handle_tool_call(arguments, turn=self.engine.turn)
        if name == "recall" and self.memory is not None:
            return self._answer_recall(arguments)
        if name != READ_CONTEXT_TOOL["function"]["name"]:
            return None
        example = '{"ref": "#12" | "snap_…" | "msg_a..msg_b", "page": 1}'
        args = tool_arguments(arguments, example=example)
        if isinstance(args, str):
            return args
        ref, page = args.get("ref"), args.get("page", 1)
        if not isinstance(ref, str) or not ref.strip() or len(ref) > _MAX_REF_CHARS:
            return (
                f"error: ref must be a reference of up to {_MAX_REF_CHARS} characters, got {brief(ref)}; "
                f"send {example}."
            )
        number = whole_number(page)
        if number is None:
            return f"error: page must be a whole number from 1, got {brief(page)}; send {example}."
        try:
            return self.read_context(ref, page=number)
        except SnapshotError as exc:
            return f"error: {exc}"

    def recall(self, query: str) -> str:
        """Handle the `recall` tool: the memories best matching ``query`` that the view does not show.

        Raises:
            UsageError: the session has no memory (create it with ``memory=``).
            MemoryQueryError: the query is empty or not text.
        """
        if self.memory is None:
            raise UsageError(f"session {self.session_id!r} has no long-term memory; create it with `memory=`.")
        from .exceptions import MemoryQueryError
        from .memory.longterm import MAX_QUERY_CHARS

        if not isinstance(query, str) or not query.strip():
            raise MemoryQueryError(f"recall needs the query as a non-empty text, got {brief(query)}.", field="query")
        room = self.memory.room(self.budget.effective)
        return self.memory.answer(
            query[-MAX_QUERY_CHARS:], view=self._state.view, max_tokens=room, count=self.accountant.count_message
        )

    def _answer_recall(self, arguments: str | Mapping[str, Any]) -> str:
        example = '{"query": "the failing test and its error"}'
        args = tool_arguments(arguments, example=example)
        if isinstance(args, str):
            return args
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            return f"error: query must be a non-empty text, got {brief(query)}; send {example}."
        return self.recall(query)

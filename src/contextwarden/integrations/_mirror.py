"""Which of a framework's messages a session has not seen yet.

Frameworks hand over their whole history on every call (LangGraph state, a pydantic-ai run's
messages, an Agents SDK model input). Converting all of it each turn would make a turn cost
O(history); frameworks only append, so the mirror remembers how many items it passed on and the
last of them, and passes on only the tail (after the last item seen, wherever it moved). When the history was
rewritten (that item is gone), everything is passed on again: sessions add by message id,
idempotently, and the integrations skip what the session already holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..compaction.context_block import context_id
from ..messages import Message

__all__ = ["Mirror", "unseen"]

_CONTEXT = context_id("")[: len("cw_context_")]


class Mirror:
    """Tracks the prefix of a framework's history a session already has."""

    def __init__(self) -> None:
        self._seen = 0
        self._last: Any = None

    def fresh(self, items: Sequence[Any]) -> list[Any]:
        """The items after the prefix passed on before (all of them when the history was rewritten)."""
        n = self._seen
        if n and (n > len(items) or not _same(items[n - 1], self._last)):
            # a framework may merge or drop items before the tail (pydantic-ai merges adjacent
            # requests): the last item seen, found further on, still marks where the news starts
            n = next((i + 1 for i in range(len(items) - 1, -1, -1) if items[i] is self._last), 0)
        return list(items[n:])

    def mark(self, items: Sequence[Any]) -> None:
        """Record that the session now has all of ``items``."""
        self._seen = len(items)
        self._last = items[-1] if items else None

    def reset(self) -> None:
        """Forget everything (the session was cleared)."""
        self._seen, self._last = 0, None


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # an item type whose comparison fails is simply a different item
        return False


def unseen(messages: Sequence[Message], transcript: Sequence[Message]) -> list[Message]:
    """The messages of a handed-over history that the session does not hold in any form.

    Held: the same id; the context block; a tool result for a call already answered, or a reply
    making calls already made (a compacted copy has other content, and a framework that merged
    or copied messages may have lost their ids).
    """
    ids = {m.message_id for m in transcript}
    answered = {m.tool_call_id for m in transcript if m.role == "tool"}
    called = {c.call_id for m in transcript for c in m.tool_calls}
    return [
        m
        for m in messages
        if m.message_id not in ids
        and not m.message_id.startswith(_CONTEXT)
        and not (m.role == "tool" and m.tool_call_id in answered)
        and not any(c.call_id in called for c in m.tool_calls)
    ]

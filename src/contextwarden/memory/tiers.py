"""The memory tiers: sensory (latest inputs), short-term (recent fragments, bounded), and the hybrid of all three.

`HybridMemory` composes `SensoryMemory`, `ShortTermMemory` and `LongTermMemory`: a new fragment
enters the short-term tier and is also written to long-term memory (so it survives the
process); recall ranks the long-term hits and lifts what the short-term tier still holds.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from ..messages import Message
from ._text import tokenize
from .checks import clean_text
from .longterm import LongTermMemory
from .records import Hit, MemoryRecord
from .status import MemoryStatus

__all__ = ["HybridMemory", "SensoryMemory", "ShortTermMemory", "from_messages"]


class SensoryMemory:
    """The latest inputs, as they came (a ring of ``capacity`` texts)."""

    def __init__(self, *, capacity: int = 8) -> None:
        self._items: deque[str] = deque(maxlen=capacity)
        self._lock = threading.Lock()

    def observe(self, text: str) -> None:
        """Record one input."""
        with self._lock:
            self._items.append(text)

    def latest(self) -> list[str]:
        """The held inputs, oldest first."""
        with self._lock:
            return list(self._items)


class ShortTermMemory:
    """Recent fragments, at most ``capacity``; the oldest falls out when a new one arrives."""

    def __init__(self, *, capacity: int = 64) -> None:
        self._items: deque[MemoryRecord] = deque(maxlen=capacity)
        self._lock = threading.Lock()

    def add(self, record: MemoryRecord) -> MemoryRecord | None:
        """Hold ``record``; returns the fragment that fell out, if one did."""
        with self._lock:
            dropped = self._items[0] if len(self._items) == self._items.maxlen else None
            self._items.append(record)
            return dropped

    def remove(self, memory_ids: Iterable[str]) -> None:
        """Drop fragments by id."""
        gone = set(memory_ids)
        with self._lock:
            kept = [r for r in self._items if r.memory_id not in gone]
            self._items.clear()
            self._items.extend(kept)

    def ids(self) -> set[str]:
        """Ids of the held fragments."""
        with self._lock:
            return {r.memory_id for r in self._items}

    def recent(self) -> list[MemoryRecord]:
        """The held fragments, oldest first."""
        with self._lock:
            return list(self._items)

    def match(self, query: str) -> list[MemoryRecord]:
        """Held fragments sharing a keyword with ``query``, newest first."""
        terms = set(tokenize(query))
        return [r for r in reversed(self.recent()) if terms & set(tokenize(r.text))]


class HybridMemory:
    """Sensory, short-term and long-term memory behind one `add` / `recall` / `forget`.

    Args:
        long_term: The persistent tier (in-process, keyword-only by default).
        sensory: The latest raw inputs.
        short_term: Recent fragments; a fragment it holds gets ``short_term_boost`` added to its score.
        short_term_boost: Score added to hits the short-term tier still holds.
    """

    def __init__(
        self,
        long_term: LongTermMemory | None = None,
        *,
        sensory: SensoryMemory | None = None,
        short_term: ShortTermMemory | None = None,
        short_term_boost: float = 0.05,
    ) -> None:
        self.long_term = long_term or LongTermMemory()
        self.sensory = sensory or SensoryMemory()
        self.short_term = short_term or ShortTermMemory()
        self.short_term_boost = short_term_boost

    def observe(self, text: str) -> None:
        """Record a raw input in the sensory tier (it is not recalled until added as a memory)."""
        self.sensory.observe(text)

    def add(self, record: MemoryRecord | str, **fields: object) -> MemoryRecord:
        """Store a memory in the short-term and long-term tiers."""
        stored = self.long_term.add(record, **fields)
        self.short_term.add(stored)
        return stored

    def add_many(self, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
        """Store several memories in one write."""
        stored = self.long_term.add_many(records)
        for record in stored:
            self.short_term.add(record)
        return stored

    def recall(
        self,
        query: str,
        *,
        limit: int = 10,
        now: float | None = None,
        session_id: str | None = None,
        touch: bool = True,
    ) -> list[Hit]:
        """Long-term recall (of one session's memories when ``session_id`` is given), with fragments
        still in short-term memory lifted by ``short_term_boost``."""
        hits = self.long_term.recall(query, limit=limit, now=now, session_id=session_id, touch=touch)
        recent = self.short_term.ids()
        lifted = [
            Hit(
                memory=h.memory,
                score=h.score + self.short_term_boost,
                relevance=h.relevance,
                recency=h.recency,
                importance=h.importance,
                source="short-term",
            )
            if h.memory.memory_id in recent
            else h
            for h in hits
        ]
        return sorted(lifted, key=lambda h: -h.score)

    def forget(self, memory_ids: Sequence[str]) -> int:
        """Remove memories from every tier."""
        self.short_term.remove(memory_ids)
        return self.long_term.forget(memory_ids)

    def status(self) -> MemoryStatus:
        """The long-term tier's status."""
        return self.long_term.status()

    async def aadd(self, record: MemoryRecord | str, **fields: object) -> MemoryRecord:
        """`add` without blocking the event loop."""
        return await asyncio.to_thread(self.add, record, **fields)

    async def arecall(
        self, query: str, *, limit: int = 10, now: float | None = None, session_id: str | None = None
    ) -> list[Hit]:
        """`recall` without blocking the event loop."""
        return await asyncio.to_thread(lambda: self.recall(query, limit=limit, now=now, session_id=session_id))

    async def aforget(self, memory_ids: Sequence[str]) -> int:
        """`forget` without blocking the event loop."""
        return await asyncio.to_thread(self.forget, memory_ids)


def from_messages(
    messages: Sequence[Message],
    *,
    session_id: str | None = None,
    tenant: str = "default",
    group: str | None = None,
    start: int = 0,
    clock: Callable[[], float] = time.time,
) -> list[MemoryRecord]:
    """Memories made from transcript messages that left the view (cleared or evicted), with provenance.

    One memory per message with text: its id in ``message_ids``, its time and role, and position
    ``start + i`` for the i-th message given (pass the transcript index of the first message, so
    that neighbour expansion finds the adjacent turns). Tool results are labelled with the tool's
    name; a tool call without text becomes ``called name(arguments)``; system and empty messages
    are skipped.
    """
    records: list[MemoryRecord] = []
    for index, message in enumerate(messages):
        text = message.text.strip()
        if message.role == "system" or not text:
            if message.tool_calls:
                text = "; ".join(f"called {c.name}({c.arguments[:200]})" for c in message.tool_calls)
            else:
                continue
        records.append(
            MemoryRecord(
                text=clean_text(text),
                tenant=tenant,
                session_id=session_id,
                message_ids=(message.message_id, *message.source_ids),
                created_at=message.created_at if message.created_at is not None else clock(),
                role=message.role,
                speaker=message.name if message.role == "tool" else None,
                position=start + index,
                group=group,
            )
        )
    return records

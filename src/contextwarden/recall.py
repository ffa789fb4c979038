"""Long-term memory in the session's view: what left the view is remembered, the current request recalls it.

`SessionMemory` joins a `LongTermMemory` (or `HybridMemory`) to one session:

* **Remembering.** After every compaction, the transcript messages that left the view (tool
  outputs a stand-in replaced, rounds evicted) are written to memory as chunks with their
  provenance (`contextwarden.memory.chunking`). Writing is idempotent by message, so a resumed
  session writes nothing twice. A write that fails is kept and tried again at the next compaction.
* **Recalling.** Before each model call the current request (the newest user message, or the
  agent's latest words when there is none) queries memory. Hits whose text the view already shows
  are dropped; the rest are packed into the memory's room (``share`` of the effective budget, which
  the compaction pipeline leaves free) and shown right before the request as the answer of a
  ``recall`` tool call (`contextwarden.memory.recalled`): many memories come from tool outputs, and
  text from a tool output is shown only inside a tool result, so the facts an old output showed
  come back verbatim while what it ordered stays data.
* **Keeping the prefix.** A block is rendered once per request and then left as it is: turns that
  only append (the tool loop of one request) send it unchanged, so a provider's prompt cache keeps
  serving everything before the newest messages. A new request gets a new block before it, and the
  older blocks stay where they are while they fit; a compaction (which re-renders the view after
  the system prompt anyway) starts over with one block.

Memory never fails a turn: a recall or a write that raises is logged and reported in
`RecallStatus.error`; the view is then served without new hits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .exceptions import ConfigError
from .memory.chunking import Source, memories_from_messages
from .memory.diversify import cover
from .memory.longterm import MAX_QUERY_CHARS, TASK_GROUP_WEIGHT, LongTermMemory
from .memory.recalled import MEMORY_HEADER, OTHER_SESSIONS_HEADER, RecalledBlock, recall_answer, render_block
from .memory.records import Hit, MemoryRecord
from .memory.status import RecallStatus, RetrievalMode
from .memory.tiers import HybridMemory
from .messages import Message

if TYPE_CHECKING:
    from .budget import Budget
    from .compaction.viewstatus import ViewStatus
    from .session_state import SessionState

__all__ = ["MEMORY_HEADER", "OTHER_SESSIONS_HEADER", "RECALL_TOOL", "RecallStatus", "SessionMemory"]

logger = logging.getLogger(__name__)

RECALL_TOOL: Mapping[str, Any] = {
    "type": "function",
    "function": {
        "name": "recall",
        "description": (
            "Search long-term memory: what earlier turns of this session said or showed that is no longer in "
            "the context (tool outputs, requests, decisions). Give the facts you need in words or identifiers."
        ),
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to look for."}},
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}
"""OpenAI tool schema of the recall tool; the session answers it (`Session.handle_tool_call`)."""

KEEP_COST = 1.3
"""Tokens a compaction re-sends per token it frees (see `SessionMemory._cheaper_to_drop`)."""

LongTerm = LongTermMemory | HybridMemory
"""The memories a session can write to and recall from."""


class SessionMemory:
    """Long-term memory wired into one session's view (see the module docstring).

    Args:
        memory: Where memories go; an in-process keyword `LongTermMemory` of the session's tenant by default.
        share: The memory's room per request, as a share of the effective budget (the pipeline keeps it
            free, so it compacts a little more often: on the demo 0.08 keeps 9 of 10 facts on 8 seeds and
            costs about one point of prompt-cache reuse; 0.06 loses facts, 0.10 costs more reuse).
        limit: Hits asked of memory per request (their neighbouring chunks come on top).
        chunk_chars: Longest chunk a message is cut into.
        min_score: Hits scoring below this share of the best hit are not shown.
        across_sessions: Recall the tenant's memories of every session (True) or this session's only.
    """

    def __init__(
        self,
        memory: LongTerm | None = None,
        *,
        share: float = 0.08,
        limit: int = 40,
        chunk_chars: int = 480,
        min_score: float = 0.4,
        across_sessions: bool = True,
    ) -> None:
        if not 0 < share < 0.9:
            raise ConfigError(f"SessionMemory share={share!r}: give a share of the budget in (0, 0.9).", key="share")
        if limit < 1 or chunk_chars < 40:
            raise ConfigError(
                f"SessionMemory limit={limit!r} (at least 1), chunk_chars={chunk_chars!r} (at least 40).", key="limit"
            )
        self.memory: LongTerm | None = memory
        self.share = share
        self.limit = limit
        self.chunk_chars = chunk_chars
        self.min_score = min_score
        self.across_sessions = across_sessions
        self.session_id = ""
        self.tenant = "default"
        self._lock = threading.RLock()
        self._generation = -1
        self._queried: str | None = None
        self._blocks: list[RecalledBlock] = []
        self._ingested: set[int] = set()
        self._pending: list[MemoryRecord] = []
        self._written = 0
        self._room = 0
        self._error: str | None = None
        self._drop_decision: tuple[tuple[int, int], bool] | None = None

    # --- wiring ------------------------------------------------------------------------------
    def bind(self, session_id: str, tenant: str) -> None:
        """Serve the session ``session_id`` of ``tenant`` (a `Session` calls this).

        Raises:
            ConfigError: the memory belongs to another tenant, or already serves another session.
        """
        if self.session_id and self.session_id != session_id:
            raise ConfigError(
                f"this SessionMemory already serves session {self.session_id!r}; give session {session_id!r} "
                "its own SessionMemory (they may share one LongTermMemory).",
                key="memory",
            )
        if self.memory is None:
            # a group is a task (the user request a round answers): a request about a task lifts all of it
            self.memory = LongTermMemory(tenant=tenant, group_weight=TASK_GROUP_WEIGHT)
        owner = self.memory.long_term.tenant if isinstance(self.memory, HybridMemory) else self.memory.tenant
        if owner != tenant:
            raise ConfigError(
                f"the memory belongs to tenant {owner!r} but the session to tenant {tenant!r}; create it with "
                f"LongTermMemory(..., tenant={tenant!r}).",
                key="memory",
            )
        self.session_id, self.tenant = session_id, tenant

    def room(self, effective: int) -> int:
        """Tokens the memory may take for one request, of an ``effective`` budget."""
        return int(effective * self.share)

    def reserve(self, state: SessionState | None, effective: int) -> int:
        """Tokens the compaction pipeline must leave free: the room of the current request's block, plus
        the blocks recalled for earlier requests (while they stay, the pipeline holds less; a compaction
        that this forces starts over with one block, instead of dropping blocks mid-view)."""
        room = self.room(effective)
        with self._lock:
            if state is None or not self._blocks:
                return room
            request = _request_anchor(state)
            current = request.message_id if request is not None else None
            older = sum(b.tokens for b in self._blocks if b.anchor_id != current)
            if older and self._blocks[-1].anchor_id != current and self._will_drop(state):
                return room  # a new request the older blocks give way to: no room is held for them
            return room + older

    def status(self) -> RecallStatus:
        """The memory's part of the current view."""
        memory = self.memory
        retrieval: RetrievalMode = "keyword"
        reason: str | None = "no memory bound"
        if memory is not None:
            retrieval, reason = (memory.long_term if isinstance(memory, HybridMemory) else memory).retrieval
        return RecallStatus(
            retrieval=retrieval,
            reason=reason,
            hits=sum(len(b.memory_ids) for b in self._blocks),
            tokens=self.tokens,
            room=self._room,
            written=self._written,
            pending=len(self._pending),
            error=self._error,
        )

    @property
    def blocks(self) -> int:
        """Recalled blocks in the current view (each is two messages: a ``recall`` call and its result)."""
        return len(self._blocks)

    @property
    def shown(self) -> tuple[RecalledBlock, ...]:
        """The recalled blocks in the current view, oldest first, with what each brought back."""
        return tuple(self._blocks)

    @property
    def tokens(self) -> int:
        """Tokens of the recalled blocks in the current view."""
        return sum(b.tokens for b in self._blocks)

    # --- the view ----------------------------------------------------------------------------
    def assemble(
        self,
        state: SessionState,
        view: list[Message],
        *,
        used: int,
        effective: int,
        count: Callable[[Message], int],
    ) -> list[Message]:
        """``view`` (the pipeline's, ``used`` tokens of an ``effective`` budget) with the recalled blocks in it."""
        with self._lock:
            self._room = self.room(effective)
            if state.view_generation != self._generation:
                self._generation = state.view_generation
                self._blocks, self._queried = [], None
                self._remember(state)
            request = _current_request(state)
            if request is not None and request[0].message_id != self._queried:
                anchor, query = request
                self._queried = anchor.message_id
                self._recall_block(state, anchor, query, view, used=used, effective=effective, count=count)
            # the newest block always fits (the pipeline keeps its room free); older ones while they fit
            while len(self._blocks) > 1 and used + self.tokens > effective:
                self._blocks.pop(0)
            return self._insert(view)

    def _insert(self, view: list[Message]) -> list[Message]:
        if not self._blocks:
            return view
        before = {b.anchor_id: b.messages for b in self._blocks}
        out: list[Message] = []
        for m in view:
            block = before.get(m.message_id)
            if block is not None:
                out.extend(block)
            out.append(m)
        return out

    def _recall_block(
        self,
        state: SessionState,
        anchor: Message,
        query: str,
        view: list[Message],
        *,
        used: int,
        effective: int,
        count: Callable[[Message], int],
    ) -> None:
        shown = _view_text(view)
        hits = self._recall(query)
        if hits is None:
            return
        taken = {i for b in self._blocks for i in b.memory_ids}
        fresh = [h for h in hits if h.memory.memory_id not in taken and h.memory.text not in shown]
        if not fresh:
            return
        room = min(self._room, max(0, effective - used - self.tokens))
        if self._blocks and (room < self._room or self._will_drop(state)):
            # the current request outranks older ones when the pipeline could not leave the room
            self._blocks = []
            fresh = [h for h in hits if h.memory.text not in shown]
            room = min(self._room, max(0, effective - used))
        block = render_block(anchor.message_id, query, fresh, room=room, count=count, session_id=self.session_id)
        if block is not None:
            self._blocks.append(block)

    def _will_drop(self, state: SessionState) -> bool:
        """`_cheaper_to_drop` for the pipeline's current view, decided once per view and request."""
        key = (state.view_generation, state.transcript_length)
        if self._drop_decision is None or self._drop_decision[0] != key:
            decision = self._cheaper_to_drop(state.view, state.count)
            self._drop_decision = (key, decision)
        return self._drop_decision[1]

    def _cheaper_to_drop(self, view: Sequence[Message], count: Callable[[Message], int]) -> bool:
        """Whether dropping the older blocks costs a prompt cache less than keeping them.

        Dropping changes the view from the oldest block on: the tokens after it are sent uncached
        once. Keeping them holds their tokens in the view until the next compaction, which then
        comes that much sooner; a compaction re-sends about the whole view, about KEEP_COST times
        the tokens it frees (the view averages about 0.72 of the budget and the default band
        refills 0.55 of it). Requests every round: drop (the tail is a round or two); requests far
        apart: keep.
        """
        anchor = self._blocks[0].anchor_id
        at = next((i for i, m in enumerate(view) if m.message_id == anchor), None)
        if at is None:
            return True
        tail = sum(count(m) for m in view[at:])
        return tail < KEEP_COST * self.tokens

    def _recall(self, query: str) -> list[Hit] | None:
        memory = self.memory
        if memory is None:
            return None
        try:
            session = None if self.across_sessions else self.session_id
            hits = memory.recall(query, limit=self.limit, session_id=session)
        except Exception as exc:  # a failing memory never fails a turn
            self._fail("recall", exc)
            return None
        self._error = None
        if not hits:
            return []
        best = max(h.score for h in hits)
        return cover([h for h in hits if h.score >= self.min_score * best], query)

    def _fail(self, what: str, exc: Exception) -> None:
        self._error = f"{what} failed: {type(exc).__name__}: {exc}"
        logger.warning("session %s: memory %s", self.session_id, self._error)

    # --- remembering -------------------------------------------------------------------------
    def _remember(self, state: SessionState) -> None:
        """Write what left the view since the last compaction (and what an earlier write could not)."""
        sources = self._left(state)
        records = self._pending + memories_from_messages(
            sources, session_id=self.session_id, tenant=self.tenant, max_chars=self.chunk_chars
        )
        if not records or self.memory is None:
            return
        try:
            self.memory.add_many(records)
        except Exception as exc:
            self._pending = records
            self._fail("write", exc)
            return
        self._pending = []
        self._written += len(records)

    def _left(self, state: SessionState) -> list[Source]:
        """Transcript messages that left the view and were not written yet, with their task and call."""
        message = state.message
        sources: list[Source] = []
        task: str | None = None
        for r in state.rounds:
            first = message(r.indices[0])
            if first.role == "user":
                task = first.message_id
            if r.kind == "system" or r.state == "full":
                continue
            if r.state == "evicted":
                gone = list(r.indices)
            else:  # cleared: the messages a stand-in replaced
                shown = r.shown or []
                gone = [i for i, m in zip(r.indices, shown, strict=False) if m is not message(i)]
            call = ""
            if r.kind == "tool-call":
                opener = message(r.indices[0])
                names = " ".join(f"{c.name} {c.arguments[:200]}" for c in opener.tool_calls)
                call = f"{opener.text[:300]} {names}".strip()
            for i in gone:
                if i in self._ingested:
                    continue
                self._ingested.add(i)
                m = message(i)
                sources.append(
                    Source(index=i, message=m, task=task, call=call if m.role == "tool" else "", step=r.ordinal)
                )
        return sources

    # --- the recall tool ---------------------------------------------------------------------
    def answer(self, query: str, *, view: Sequence[Message], max_tokens: int, count: Callable[[Message], int]) -> str:
        """The recall tool's answer: the best memories for ``query`` that the view does not show."""
        with self._lock:
            hits = self._recall(query[-MAX_QUERY_CHARS:])
        if hits is None:
            return f"error: memory is unavailable ({self._error or 'no memory bound'}); try again later."
        shown = _view_text(view)
        taken = {i for b in self._blocks for i in b.memory_ids}  # recalled into the view already
        fresh = [h for h in hits if h.memory.memory_id not in taken and h.memory.text not in shown]
        text = recall_answer(fresh, room=max_tokens, count=count, session_id=self.session_id)
        if text is None:
            return f"no memories match {query[:200]!r} beyond what the context already shows."
        return text


def _request_anchor(state: SessionState) -> Message | None:
    """The message a recalled block goes before: the newest user message, else the newest round's first message."""
    r = state.last_user_round
    if r is not None and r.state != "evicted":
        return state.message(r.indices[0])
    rounds = state.rounds
    if not rounds or rounds[-1].kind == "system":
        return None
    return state.message(rounds[-1].indices[0])


def _current_request(state: SessionState) -> tuple[Message, str] | None:
    """The message recall answers and the query text: the newest user message, else the agent's latest words."""
    anchor = _request_anchor(state)
    if anchor is None:
        return None
    if anchor.role == "user":
        query = anchor.text
    elif state.last_assistant_index >= 0:
        query = state.message(state.last_assistant_index).text
    else:
        return None
    query = query.strip()[-MAX_QUERY_CHARS:]
    if not query.strip():
        return None
    return anchor, query


def _view_text(view: Sequence[Message]) -> str:
    parts: list[str] = []
    for m in view:
        parts.append(m.text)
        parts.extend(c.arguments for c in m.tool_calls)
    return "\n".join(parts)


def coerce_memory(memory: SessionMemory | LongTerm | bool | None) -> SessionMemory | None:
    """A `Session`'s ``memory=`` argument as a `SessionMemory` (None: memory is off)."""
    if memory is None or memory is False:
        return None
    if memory is True:
        return SessionMemory()
    if isinstance(memory, SessionMemory):
        return memory
    if isinstance(memory, LongTermMemory | HybridMemory):
        return SessionMemory(memory)
    raise ConfigError(
        f"memory={type(memory).__name__}: pass a SessionMemory, a LongTermMemory or HybridMemory, True (an "
        "in-process keyword memory) or None.",
        key="memory",
    )


def with_memory_status(status: ViewStatus, memory: SessionMemory, *, budget: Budget) -> ViewStatus:
    """``status`` (the pipeline's) with the recalled blocks counted in and the whole budget as the limit."""
    from .figures import components, measure

    tokens = memory.tokens
    used_raw = status.used_raw + tokens
    used, effective, ratio = measure(budget, used_raw)
    breakdown = {**status.breakdown, "memory": tokens}
    state = status.state
    if status.rule is not None and status.rule.mode == "ratio":  # fixed thresholds: the state of the shown ratio
        state = budget.thresholds.state(used_raw / budget.effective)
    return replace(
        status,
        used_raw=used_raw,
        used=used,
        budget=effective,
        tool_schemas=budget.calibrated(budget.tool_schemas),
        ratio=ratio,
        state=state,
        breakdown=breakdown,
        components=components(budget, used, breakdown),
        view_messages=status.view_messages + 2 * memory.blocks,
        memory=memory.status(),
    )

"""What a session recalls for a request, as the answer of a ``recall`` tool call.

Recalled memories come back into a view outside the messages they were taken from, and many of
them were taken from tool outputs (a file, a web page, a command's output). Text from a tool
output is shown to the model only inside a tool result, where what it says is data and what it
orders is not an order. So a recalled block is a pair of messages: an assistant message calling
the ``recall`` tool with the request's words, and that call's result, which holds the memories
verbatim under labels (source, ledger step or session, time, score). It reads as what the agent
would have got by calling ``recall`` itself (``Session.recall`` answers with the same text), and a
forged "[NOTICE FROM THE USER]" in a recalled output stays inside a tool result.

Ids derive from the request the block was recalled for and its text, so the same recall renders
the same bytes: a provider's prompt cache keeps serving it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..messages import Message, TextPart, ToolCall
from .records import Hit, MemoryRecord

__all__ = [
    "MEMORY_HEADER",
    "OTHER_SESSIONS_HEADER",
    "RECALL_TOOL_NAME",
    "RecalledBlock",
    "RecalledItem",
    "block_messages",
    "recall_answer",
    "render_block",
    "render_recalled",
]

MEMORY_HEADER = "[contextwarden] Recalled from earlier in this session"
OTHER_SESSIONS_HEADER = "[contextwarden] Recalled from memory of this and other sessions"
RECALL_TOOL_NAME = "recall"
QUERY_CHARS = 120
"""Characters of the request that the block's ``recall`` call names as its query (the request follows it)."""


@dataclass(frozen=True, kw_only=True)
class RecalledItem:
    """One memory a block brought back, with its provenance (for reports and logs)."""

    memory_id: str
    label: str
    """How the block labels it: source, ``#<step>`` (or session and message id), time and score."""
    text: str
    role: str
    message_ids: tuple[str, ...]
    session_id: str
    score: float


@dataclass(frozen=True, kw_only=True)
class RecalledBlock:
    """A ``recall`` call and its result, shown right before the request it was recalled for."""

    anchor_id: str
    """The request the block was recalled for."""
    call: Message
    """The assistant message calling ``recall``."""
    result: Message
    """The tool result holding the memories."""
    tokens: int
    items: tuple[RecalledItem, ...]

    @property
    def messages(self) -> tuple[Message, Message]:
        return (self.call, self.result)

    @property
    def memory_ids(self) -> frozenset[str]:
        return frozenset(i.memory_id for i in self.items)

    @property
    def text(self) -> str:
        """The memories as the tool result shows them."""
        return self.result.text


def _when(record: MemoryRecord) -> str:
    if "date" in record.metadata:
        return record.metadata["date"]
    return dt.datetime.fromtimestamp(record.created_at, tz=dt.UTC).strftime("%Y-%m-%d %H:%M")


def _label(record: MemoryRecord, score: float, session_id: str) -> str:
    source = record.speaker or record.role or "memory"
    if record.session_id != session_id:
        # read_context("#<step>") reads this session: a memory of another one names its session instead
        ref = record.message_ids[0] if record.message_ids else record.memory_id
        return f"[{source} · session {record.session_id or '(none)'} · {ref} · {_when(record)} · score {score:.2f}]"
    step = record.metadata.get("step")
    ref = f"#{step}" if step is not None else (record.message_ids[0] if record.message_ids else record.memory_id)
    return f"[{source} · {ref} · {_when(record)} · score {score:.2f}]"


def _groups(hits: Sequence[Hit]) -> list[list[Hit]]:
    """The hits grouped by source message, in the order they were said."""
    groups: dict[str, list[Hit]] = {}
    for hit in sorted(hits, key=lambda h: (h.memory.created_at, h.memory.position)):
        key = hit.memory.message_ids[0] if hit.memory.message_ids else hit.memory.memory_id
        groups.setdefault(key, []).append(hit)
    return list(groups.values())


def render_recalled(hits: Sequence[Hit], session_id: str) -> str:
    """The hits as the recall tool's answer: grouped by source message, each group under its label.

    The header says where the memories come from: this session only, or other sessions too. The
    memories are shown verbatim: the text is a tool result, so what an old output orders stays data.
    """
    header = MEMORY_HEADER
    if any(h.memory.session_id != session_id for h in hits):
        header = OTHER_SESSIONS_HEADER
    lines = [f'{header} (source · step · time · score; read_context("#<step>") shows a step in full):']
    for members in _groups(hits):
        lines.append(_label(members[0].memory, max(h.score for h in members), session_id))
        lines.extend(h.memory.text for h in members)
    return "\n".join(lines)


def _items(hits: Sequence[Hit], session_id: str) -> tuple[RecalledItem, ...]:
    out: list[RecalledItem] = []
    for members in _groups(hits):
        label = _label(members[0].memory, max(h.score for h in members), session_id)
        out.extend(
            RecalledItem(
                memory_id=h.memory.memory_id,
                label=label,
                text=h.memory.text,
                role=h.memory.role or "",
                message_ids=h.memory.message_ids,
                session_id=h.memory.session_id or "",
                score=h.score,
            )
            for h in members
        )
    return tuple(out)


def _query_argument(query: str) -> str:
    words = " ".join(query.split())
    if len(words) > QUERY_CHARS:
        cut = words[:QUERY_CHARS]
        words = (cut.rsplit(" ", 1)[0] if " " in cut else cut) + " …"
    return json.dumps({"query": words}, ensure_ascii=False)


def block_messages(anchor_id: str, query: str, text: str) -> tuple[Message, Message]:
    """The ``recall`` call for ``query`` and its result ``text``, with ids that derive from both."""
    digest = hashlib.blake2b(f"{anchor_id}\0{text}".encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    call = ToolCall(call_id=f"cw_recall_{digest}", name=RECALL_TOOL_NAME, arguments=_query_argument(query))
    marker = {"contextwarden": "memory"}
    return (
        Message(role="assistant", parts=(call,), message_id=f"cw_memory_{digest}_call", extra=marker),
        Message(
            role="tool",
            parts=(TextPart(text=text),),
            tool_call_id=call.call_id,
            name=RECALL_TOOL_NAME,
            message_id=f"cw_memory_{digest}",
            extra=marker,
        ),
    )


def _fit(
    hits: Sequence[Hit], room: int, cost: Callable[[Sequence[Hit]], int], count_line: Callable[[str], int]
) -> list[Hit]:
    """The best hits (best first) whose rendering costs at most ``room`` tokens (none fit: empty)."""
    if room <= 0 or not hits:
        return []
    chosen: list[Hit] = []
    used = cost([])
    for hit in hits:
        line = count_line(hit.memory.text) + 12  # a line, and its share of a source label
        if used + line > room:
            continue
        chosen.append(hit)
        used += line
    while chosen and cost(chosen) > room:
        chosen.pop()
    return chosen


def render_block(
    anchor_id: str,
    query: str,
    hits: Sequence[Hit],
    *,
    room: int,
    count: Callable[[Message], int],
    session_id: str,
) -> RecalledBlock | None:
    """The block (the ``recall`` call and its result) of the best hits that fit ``room`` tokens, or None."""

    def cost(chosen: Sequence[Hit]) -> int:
        call, result = block_messages(anchor_id, query, render_recalled(chosen, session_id))
        return count(call) + count(result)

    chosen = _fit(hits, room, cost, lambda text: count(Message.user(text)))
    if not chosen:
        return None
    call, result = block_messages(anchor_id, query, render_recalled(chosen, session_id))
    return RecalledBlock(
        anchor_id=anchor_id, call=call, result=result, tokens=cost(chosen), items=_items(chosen, session_id)
    )


def recall_answer(hits: Sequence[Hit], *, room: int, count: Callable[[Message], int], session_id: str) -> str | None:
    """The recall tool's answer: the best hits whose result fits ``room`` tokens, or None when none fits."""

    def cost(chosen: Sequence[Hit]) -> int:
        return count(Message.tool_result("call", render_recalled(chosen, session_id), name=RECALL_TOOL_NAME))

    chosen = _fit(hits, room, cost, lambda text: count(Message.user(text)))
    return render_recalled(chosen, session_id) if chosen else None

"""Memories made from transcript messages that left the view: chunked, with provenance and search keywords.

A tool output of thousands of tokens is one message but many facts; recalled whole it would
fill the memory's room with one hit. So each message becomes chunks of whole lines (at most
``max_chars`` each), every chunk a `MemoryRecord` with the message's provenance (its id, time,
role, session, tenant) and a position ``index * CHUNK_SLOTS + k`` (adjacent chunks of a message
are neighbours). Memory ids derive from the session, the message id and the chunk number, so
writing the same message again replaces its memories instead of adding copies.

What makes a chunk findable is searched but not rendered (``metadata["keywords"]``): for a tool
output, the call that produced it and the assistant's words around the call (its intent: "Who
changed this file recently?"); the kind of content (a commit list, a test run, an error, settings,
a URL, a table, a diff), since requests name kinds ("the failing test", "the commit") while
outputs show instances; and camelCase identifiers split into words.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..messages import INSTRUCTION_ROLES, Message
from .checks import clean_text
from .records import MemoryRecord

__all__ = [
    "CHUNK_SLOTS",
    "Source",
    "chunk_lines",
    "content_kinds",
    "memories_from_messages",
    "memory_id_for",
    "with_neighbour_context",
]

CHUNK_SLOTS = 1000
"""Positions reserved per transcript message; chunks past this many are not kept (the snapshot has them)."""

_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("commit git history", re.compile(r"^[^\S\n]*+[0-9a-f]{7,40}\b", re.M)),
    ("test tests failing passed", re.compile(r"(::test_|\b\d+ (?:passed|failed)\b|^FAILED |^PASSED )", re.M)),
    ("error exception traceback", re.compile(r"(Traceback \(most recent call last\)|\b\w*(?:Error|Exception)\b)")),
    ("config configuration setting environment value", re.compile(r"^[A-Z][A-Z0-9_]{2,}=\S", re.M)),
    ("url link endpoint address", re.compile(r"\bhttps?://\S+")),
    ("table rows record", re.compile(r"^[-+]{6,}$|^[^\S\n]*+\S[^|\n]*\|[^|\n]+\|", re.M)),
    ("diff patch change", re.compile(r"^@@ |^[-+]{3} [ab]/", re.M)),
)
_CONSTRAINT = re.compile(
    r"\b(must|must not|never|always|do not|don't|should not|shouldn't|required?|only|at most|at least)\b|"
    r"不要|不能|不得|必须|禁止|务必|只能",
    re.I,
)
"""Cues of a rule the user sets (what a later "the constraint" refers to); English and Chinese."""
_RULE = re.compile(r"^[-+=| ]{6,}$")
_CAMEL = re.compile(r"\b[A-Za-z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\b")
_CAMEL_PART = re.compile(r"[A-Z]?[a-z0-9]+")


@dataclass(frozen=True, kw_only=True)
class Source:
    """One transcript message that left the view, with what the memory needs to know about it."""

    index: int
    """Its index in the transcript."""
    message: Message
    """The message, unaltered."""
    task: str | None = None
    """The id of the user request it belongs to (memories of one task are lifted together)."""
    call: str = ""
    """For a tool output: the call that produced it and the assistant's words around the call."""
    step: int | None = None
    """The progress-ledger step of its round (``read_context("#<step>")`` shows the round in full)."""


def memory_id_for(session_id: str, message_id: str, chunk: int) -> str:
    """The memory id of chunk ``chunk`` of a message (stable: the same message maps to the same ids)."""
    digest = hashlib.blake2b(f"{session_id}\0{message_id}\0{chunk}".encode(), digest_size=10).hexdigest()
    return f"mem_{digest}"


def _table_header(lines: Sequence[str]) -> str | None:
    """The header line of a text table (``a | b`` over a ``---+---`` rule), if the text starts with one."""
    if len(lines) > 2 and "|" in lines[0] and _RULE.match(lines[1].strip()) and len(lines[0]) < 200:
        return lines[0]
    return None


def chunk_lines(text: str, *, max_chars: int) -> list[str]:
    """``text`` cut into chunks of whole lines of at most ``max_chars`` (a longer line is cut where it must).

    A table's header line starts every chunk of its rows: a row alone does not say what its columns are.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    header = _table_header(lines)
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for line in lines:
        while len(line) > max_chars:
            if current:
                chunks.append("\n".join(current))
                current, size = [], 0
            chunks.append(line[:max_chars])
            line = line[max_chars:]
        if size + len(line) + 1 > max_chars and current:
            chunks.append("\n".join(current))
            current, size = ([header], len(header) + 1) if header is not None else ([], 0)
        current.append(line)
        size += len(line) + 1
    if current:
        chunks.append("\n".join(current))
    return chunks


def content_kinds(text: str) -> list[str]:
    """Words naming the kinds of content ``text`` shows (a commit list, a test run, an error, ...)."""
    return [words for words, pattern in _KINDS if pattern.search(text)]


def _camel_words(text: str) -> str:
    return " ".join(" ".join(_CAMEL_PART.findall(m.group())) for m in _CAMEL.finditer(text))


def _text_of(message: Message) -> str:
    text = message.text.strip()
    calls = "; ".join(f"called {c.name}({c.arguments[:300]})" for c in message.tool_calls)
    return f"{text}\n{calls}".strip() if calls else text


def memories_from_messages(
    sources: Sequence[Source],
    *,
    session_id: str,
    tenant: str,
    max_chars: int = 480,
    clock: Callable[[], float] = time.time,
) -> list[MemoryRecord]:
    """The chunked memories of messages that left the view (system messages and empty ones are skipped)."""
    records: list[MemoryRecord] = []
    for source in sources:
        message = source.message
        if message.role in INSTRUCTION_ROLES:
            continue
        text = clean_text(_text_of(message))
        if not text:
            continue
        created = message.created_at if message.created_at is not None else clock()
        for k, chunk in enumerate(chunk_lines(text, max_chars=max_chars)[:CHUNK_SLOTS]):
            kinds = content_kinds(chunk)
            if message.role == "user" and _CONSTRAINT.search(chunk):
                kinds.append("constraint requirement rule")
            keywords = " ".join(filter(None, [source.call, *kinds, _camel_words(chunk)]))
            metadata: dict[str, str] = {"keywords": keywords} if keywords else {}
            if source.step is not None:
                metadata["step"] = str(source.step)
            records.append(
                MemoryRecord(
                    text=chunk,
                    memory_id=memory_id_for(session_id, message.message_id, k),
                    tenant=tenant,
                    session_id=session_id,
                    message_ids=(message.message_id,),
                    created_at=created,
                    role=message.role,
                    speaker=message.name if message.role == "tool" else None,
                    position=source.index * CHUNK_SLOTS + k,
                    group=source.task,
                    metadata=metadata,
                )
            )
    return records


def with_neighbour_context(records: Sequence[MemoryRecord], *, span: int = 1) -> list[MemoryRecord]:
    """``records`` (in order) with the text of the adjacent ones of their group added to their keywords.

    A turn is often meaningless alone ("Yes, last weekend!" answers the turn before it): searched
    with its neighbours' words, it is found by a question that names what the neighbours said. The
    context is searched (and embedded) but not rendered.
    """
    out: list[MemoryRecord] = []
    for i, record in enumerate(records):
        around = [
            records[j].text
            for j in range(max(0, i - span), min(len(records), i + span + 1))
            if j != i and records[j].group == record.group and records[j].session_id == record.session_id
        ]
        if not around:
            out.append(record)
            continue
        keywords = " ".join(filter(None, [record.metadata.get("keywords", ""), *around]))
        out.append(replace(record, metadata={**record.metadata, "keywords": keywords}))
    return out

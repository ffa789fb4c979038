"""Rendering recalled memories into text that fits a token budget."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import Literal

from ..tokens.base import TokenCounter
from .records import Hit, MemoryRecord

__all__ = ["pack_hits", "render_hits"]

Style = Literal["compact", "labelled"]


def _when(record: MemoryRecord) -> str:
    if "date" in record.metadata:
        return record.metadata["date"]
    return dt.datetime.fromtimestamp(record.created_at, tz=dt.UTC).strftime("%Y-%m-%d %H:%M")


def _header(record: MemoryRecord) -> str:
    # The time alone: a group's label ("session 12") tells the reader nothing its time does not, and
    # at ten headers a context it would cost the room of a few more memories.
    return f"[{_when(record)}]"


def _who(record: MemoryRecord) -> str:
    return record.speaker or record.role or ""


# A text that itself opens like a label ("Ann: ...", "Ann Lee: ...") would read as another speaker's
# line without its own.
_LOOKS_LABELLED = re.compile(r"^\w[\w.'-]*(?: \w[\w.'-]*)?:\s")


def _line(hit: Hit, style: Style) -> str:
    record = hit.memory
    speaker = _who(record)
    who = f"{speaker}: " if speaker else ""
    if style == "compact":
        return f"{who}{record.text}"
    ids = ",".join(record.message_ids[:3]) or record.memory_id
    mark = " (superseded)" if record.superseded_by else ""
    return f"- [{_when(record)} · {ids} · score {hit.score:.2f}{mark}] {who}{record.text}"


def _order(hits: Sequence[Hit]) -> list[Hit]:
    return sorted(hits, key=lambda h: (h.memory.created_at, h.memory.session_id or "", h.memory.position))


def render_hits(hits: Sequence[Hit], *, style: Style = "compact") -> str:
    """The hits as text, in the order they were said.

    ``compact`` groups consecutive memories said at one time under a ``[date]`` header and
    writes ``speaker: text`` lines, naming the speaker once for a run of their lines under one
    header, as a script does (many short turns in few tokens); ``labelled`` writes one line per
    memory with its time, source message ids and score.
    """
    lines: list[str] = []
    header: str | None = None
    speaker = ""
    for hit in _order(hits):
        if style == "labelled":
            lines.append(_line(hit, style))
            continue
        current = _header(hit.memory)
        if current != header:
            lines.append(current)
            header, speaker = current, ""
        record = hit.memory
        same = bool(speaker) and _who(record) == speaker and not _LOOKS_LABELLED.match(record.text)
        # A name costs two or three tokens a line: a context of short turns fits a few more without it.
        lines.append(record.text if same else _line(hit, style))
        speaker = _who(record)
    return "\n".join(lines)


def pack_hits(hits: Sequence[Hit], *, budget_tokens: int, counter: TokenCounter, style: Style = "compact") -> list[Hit]:
    """The best hits (in the given order, best first) whose rendering fits ``budget_tokens``."""
    chosen: list[Hit] = []
    headers: set[str] = set()
    used = 0
    for hit in hits:
        cost = counter.count_text(_line(hit, style)) + 1
        header = _header(hit.memory)
        if style == "compact" and header not in headers:
            cost += counter.count_text(header) + 1
        if used + cost > budget_tokens:
            if budget_tokens - used < 4:
                break
            continue
        chosen.append(hit)
        used += cost
        if style == "compact":
            headers.add(header)
    # Interleaving groups can repeat a header; trim from the worst hit until the real count fits.
    while chosen and counter.count_text(render_hits(chosen, style=style)) > budget_tokens:
        chosen.pop()
    # The per-line estimate counts separators the real text shares: a hit skipped by a token or two
    # may fit after all. Try those (in order, so the result stays a subsequence of ``hits``).
    used = counter.count_text(render_hits(chosen, style=style)) if chosen else 0
    picked = {id(h) for h in chosen}
    for hit in hits:
        if id(hit) in picked or counter.count_text(_line(hit, style)) > budget_tokens - used + 2:
            continue
        trial = [h for h in hits if id(h) in picked or h is hit]
        real = counter.count_text(render_hits(trial, style=style))
        if real <= budget_tokens:
            picked.add(id(hit))
            chosen, used = trial, real
    return chosen

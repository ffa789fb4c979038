"""The clear layer: old tool outputs become stand-ins, oldest first, until the view is at its target.

A stand-in keeps the output's head, its key lines (errors, warnings), the identifiers it held
(ids, paths, dates, amounts) and the id of the snapshot that keeps the full round, so nothing
is lost: ``read_context("<snapshot id>")`` reads it back. Outputs older than
``clear_after_rounds`` are cleared first; then large outputs (``tool_result_min_tokens``) that
the agent already answered to, however recent. The shrink layer uses the same stand-ins with a
`Cut` that previews or offloads outputs when the budget itself is at stake.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from typing import Literal

from ..keyinfo import preview
from ..messages import Message, TextPart
from .base import Change
from .book import RoundBook
from .bookround import BookRound
from .config import CompactionConfig

__all__ = ["CLEAR", "Cut", "clear_round", "cleared_stand_in", "run", "stand_ins"]


@dataclass(frozen=True, kw_only=True)
class Cut:
    """How far a round's tool outputs shrink.

    ``clear``: outputs of ``min_clear_tokens`` or more become cleared stand-ins (a short head).
    ``offload``: the same, and outputs larger than ``limit`` tokens become a head-and-tail
    preview of at most ``limit`` tokens (an item that alone would not fit).
    ``preview``: every output becomes a head-and-tail preview of at most ``limit`` tokens.
    """

    mode: Literal["clear", "offload", "preview"] = "clear"
    limit: int = 0


CLEAR = Cut()


def run(book: RoundBook, target: int, config: CompactionConfig, *, protected: Set[int]) -> Change:
    """Replace old tool outputs by stand-ins, oldest first, until the view is under ``target``."""
    before = total = book.total()
    conversation = book.conversation()
    limit = max(len(conversation) - config.clear_after_rounds, 0)
    cleared = 0
    for r in conversation[:limit]:
        if total <= target:
            break
        if r.kind != "tool-call" or r.state != "full" or r.ordinal in protected:
            continue
        saved = clear_round(book, r, config, reason="cleared")
        if saved > 0:
            total -= saved
            cleared += 1
    # Tool-result summarization: a large output the agent has already answered to is worth its
    # key findings only, however recent (the newest rounds stay whole: they are protected).
    for r in conversation[limit:]:
        if total <= target:
            break
        if r.kind != "tool-call" or r.state != "full" or r.ordinal in protected:
            continue
        if not _used_large_output(book, r, config):
            continue
        saved = clear_round(book, r, config, reason="cleared")
        if saved > 0:
            total -= saved
            cleared += 1
    return Change(layer="clear", tokens_before=before, tokens_after=book.total(), items=cleared)


def _used_large_output(book: RoundBook, r: BookRound, config: CompactionConfig) -> bool:
    """The round has an output of ``tool_result_min_tokens`` or more that an assistant message followed."""
    return any(
        book.transcript[i].role == "tool"
        and book.counts[i] >= config.tool_result_min_tokens
        and i < book.last_assistant_index
        for i in r.indices
    )


def clear_round(
    book: RoundBook,
    r: BookRound,
    config: CompactionConfig,
    *,
    reason: Literal["cleared", "offloaded"],
    cut: Cut = CLEAR,
) -> int:
    """Show stand-ins for the round's large tool outputs; returns tokens saved."""
    if r.prepared and cut is CLEAR and r.shown is None:
        shown = r.ready  # prepared ahead; None means nothing in it shrinks
    else:
        shown = stand_ins(book, r, config, cut)
    r.ready = None
    if shown is None:
        return 0
    book.snapshot(r, reason)
    before = r.view_tokens
    book.show(r, shown)
    return before - r.view_tokens


def stand_ins(book: RoundBook, r: BookRound, config: CompactionConfig, cut: Cut = CLEAR) -> list[Message] | None:
    """The round's messages with large outputs replaced by stand-ins; None when nothing shrinks."""
    snapshot_id = book.snapshot_id(r)
    count = book.accountant.count_message
    current = r.shown if r.shown is not None else book.messages(r)
    every = cut.mode == "preview"
    shown: list[Message] = []
    changed = False
    for i, m_shown in zip(r.indices, current, strict=True):
        m = book.transcript[i]
        if m.role == "tool" and (every or book.counts[i] >= config.min_clear_tokens):
            big = cut.mode == "offload" and book.counts[i] > cut.limit
            stand_in = _stand_in(book, config, i, snapshot_id, shorten=every or big, max_tokens=cut.limit)
            if count(stand_in) < count(m_shown):
                shown.append(stand_in)
                changed = True
                continue
        shown.append(m_shown)
    return shown if changed else None


def cleared_stand_in(book: RoundBook, config: CompactionConfig, index: int, snapshot_id: str) -> Message:
    """The plain cleared stand-in of output ``index`` (made again exactly from the transcript)."""
    return _stand_in(book, config, index, snapshot_id, shorten=False, max_tokens=0)


def _stand_in(
    book: RoundBook, config: CompactionConfig, index: int, snapshot_id: str, *, shorten: bool, max_tokens: int
) -> Message:
    """A stand-in for output ``index``: head (and tail, when ``shorten``), key lines, identifiers.

    A shortened preview is bounded by ``max_tokens``: wide text (CJK: about a token per
    character) halves the head and tail until it fits.
    """
    text = book.transcript[index].text
    if not shorten:
        body = preview(text, head_chars=config.cleared_head_chars)
        return _stand_in_text(book, config, index, snapshot_id, body=body, shorten=False)
    head, tail = config.preview_head_chars, config.preview_tail_chars
    while True:
        body = preview(text, head_chars=head, tail_chars=tail)
        stand_in = _stand_in_text(book, config, index, snapshot_id, body=body, shorten=True)
        if book.accountant.count_message(stand_in) <= max_tokens:
            return stand_in
        if head <= 40:  # even a short preview does not fit: the reference alone remains
            return _tool_stand_in(book.transcript[index], _header(book, index, snapshot_id), snapshot_id, shorten=True)
        head, tail = head // 2, tail // 2


def _header(book: RoundBook, index: int, snapshot_id: str) -> str:
    return f'[output shortened from {book.counts[index]} tokens; full text: read_context("{snapshot_id}")]'


def _stand_in_text(
    book: RoundBook, config: CompactionConfig, index: int, snapshot_id: str, *, body: str, shorten: bool
) -> Message:
    lines = [_header(book, index, snapshot_id), body]
    found = book.key_lines(index)[:2]
    extra_keys = [k for k in found if k not in body]
    if extra_keys:
        lines.append("key lines: " + " | ".join(extra_keys))
    # facts the head or the key lines already show, whole lines or identifiers in them, are not repeated
    shown = body + "\n" + "\n".join(extra_keys)
    facts = [f for f in book.message_facts(index)[: config.cleared_max_facts] if f not in shown]
    if facts:
        lines.append("ids: " + " · ".join(facts))
    return _tool_stand_in(book.transcript[index], "\n".join(lines), snapshot_id, shorten=shorten)


def _tool_stand_in(m: Message, text: str, snapshot_id: str, *, shorten: bool) -> Message:
    """The tool message shown instead of ``m``: same call id, name and error flag, new text."""
    return Message(
        role="tool",
        parts=(TextPart(text=text),),
        message_id=f"{m.message_id}~{'p' if shorten else 'c'}",
        tool_call_id=m.tool_call_id,
        name=m.name,
        is_error=m.is_error,
        turn=m.turn,
        snapshot_id=snapshot_id,
        source_ids=(m.message_id,),
    )

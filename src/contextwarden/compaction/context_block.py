"""The context block: one user message after the system prompt that remembers what left the view.

It is rendered only when a compaction runs (so the prefix a provider cached stays unchanged
between compactions) and holds, top to bottom:

* a header naming how to read any step back (``read_context("#<step>")``);
* the user's own words (`contextwarden.instructions`): the task, standing rules, corrections,
  named values and decisions, verbatim, for the whole session, with their own room
  (``instructions_share``; see `instructions_need`). It changes only when the user speaks;
* the sections of `sections`: the running summary of the evicted span, the agent's notes, the
  working set (files, commands, errors and symbols the agent acted on: it outranks what merely
  appeared in outputs, and the view keeps room for it, see `working_set_need`);
* the progress ledger, which takes whatever room is left (it is the densest in facts).

The block's message id is derived from its text (`context_id`), so a resumed session shows the
same id.

The block aims at the low-water target: when the rounds that may not leave the view fit under
it, the block gets the room up to the target (at least half its share of the budget, as far as
the protected rounds allow); when they do not (a tight budget), whatever the budget still has.
To add a section, add it to `sections` with its share of the room.
"""

from __future__ import annotations

import hashlib

from ..messages import Message, TextPart
from ..summarize.extractive import fit_summary
from .book import RoundBook
from .config import CompactionConfig

__all__ = [
    "CONTEXT_HEADER",
    "context_id",
    "context_room",
    "instructions_need",
    "render",
    "sections",
    "working_set_need",
]

CONTEXT_HEADER = "[contextwarden] Earlier conversation was compacted"
SUMMARY_SHARE = 0.4
"""Share of the block's room the running summary may take (the rest is the ledger's)."""
SECTION_HEADER = 48
"""Tokens a section's header and separators are reckoned at."""


def context_id(text: str) -> str:
    """The id of a context block: derived from its text, so a resumed session shows the same id."""
    return "cw_context_" + hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def working_set_need(book: RoundBook) -> int:
    """Tokens the block needs to show the working set (with its header), within its cap (`Room.work_cap`)."""
    cap = book.room.work_cap
    if cap <= 0:
        return 0
    book.working_set.catch_up(book.transcript)
    text, tokens = book.working_set.render_counted(max_tokens=cap, count=book.accountant.count_text)
    return tokens + SECTION_HEADER if text else 0


def instructions_need(book: RoundBook) -> int:
    """Tokens the block needs to show the user's instructions, within their cap (`Room.user_cap`).

    Measured before the compaction evicts anything, for every message the user wrote: the messages
    still in view now may leave it in this compaction.
    """
    cap = book.room.user_cap
    if cap <= 0:
        return 0
    requests = not book.room.lean
    _, tokens = book.read_instructions().render(max_tokens=cap, count=book.accountant.count_text, requests=requests)
    return tokens + 1 if tokens else 0


def context_room(book: RoundBook, config: CompactionConfig, target: int | None) -> int:
    """Tokens the context block may take now (see the module docstring)."""
    room = book.room
    effective = room.effective
    rest = book.rounds_total + book.accountant.framing.reply_priming
    # the working set comes on top of the ledger's share: what the agent acted on must not push
    # out the facts the ledger keeps (user constraints, ids)
    cap = room.ledger_cap + room.work_need + room.user_need
    tokens = max(0, min(cap, effective - rest))
    if target is not None and not room.tight:
        # aim at the low-water mark, but the ledger keeps up to half its share (as far as the
        # rounds that must stay allow): the settle step evicts more rounds for it when its facts
        # need the room (only then: a short ledger renders short)
        half_share = min(cap, int(effective * config.ledger_share / 2) + room.work_need + room.user_need)
        if target < room.low_target(config.low_water) - 1:  # a deeper cut (thrashing, reactive) must land
            # ...but not by cutting the user's words: they are few and nothing else stands in for them
            half_share = min(half_share, max(0, target - room.floor) + room.user_need + SECTION_HEADER)
        tokens = min(tokens, max(target - rest, half_share))
    return tokens


def sections(book: RoundBook, room: int) -> list[str]:
    """The block's sections above the ledger, in order, each within its share of ``room``."""
    return [text for text, _ in _counted_sections(book, room)]


def _counted_sections(book: RoundBook, room: int) -> list[tuple[str, int]]:
    """`sections` with each one's tokens (bare text, as counted when it was fitted)."""
    count_text = book.accountant.count_text
    out: list[tuple[str, int]] = []
    # the user's words first: what the user asked and ruled outranks everything compaction keeps
    user = user_section(book, room)
    if user[0]:
        out.append(user)
        room -= user[1]
    if book.summary and book.summary_span:
        a, b = book.summary_span
        limit = max(0, int(room * SUMMARY_SHARE) - SECTION_HEADER)
        # a summary never pushes the view past the budget: shrunk by sections, identifiers first
        summary = fit_summary(book.summary, limit, counter=book.accountant.counter)
        text = f"Summary of messages {a}..{b}:\n{summary}"
        out.append((text, count_text(text)))
    if len(book.notes):  # the agent's structured notes come back after every compaction
        notes_text = book.notes.render(max_tokens=max(0, room // 4), counter=count_text)
        if notes_text:
            out.append((notes_text, count_text(notes_text)))
    # what the agent acted on outranks what merely appeared in outputs: it comes before the ledger
    book.working_set.catch_up(book.transcript)
    work = book.working_set.render_counted(max_tokens=min(book.room.work_cap, room - SECTION_HEADER), count=count_text)
    if work[0]:
        out.append(work)
    return out


def user_section(book: RoundBook, room: int) -> tuple[str, int]:
    """The user's instructions within their cap and ``room`` (with the header's share kept free), and its tokens."""
    cap = min(book.room.user_cap, room - SECTION_HEADER)
    if cap <= 0:
        return "", 0
    record = book.read_instructions()
    in_view = _in_view(book)
    count = book.accountant.count_text
    return record.render(max_tokens=cap, count=count, in_view=in_view, requests=not book.room.lean)


def _in_view(book: RoundBook) -> set[int]:
    """Steps of the rounds the view still shows (the section does not repeat their user messages).

    Read from the rounds in view, not from every message the user wrote (thousands in a long session).
    """
    return {r.ordinal for r in book.live() if r.state != "evicted"}


def render(book: RoundBook, config: CompactionConfig, *, target: int | None = None) -> None:
    """Render the context block into the room left in the budget (`RoundBook.context`)."""
    book.evicted_at_render = book.n_evicted
    if not book.n_evicted and book.summary is None and not book.ledger.notes_added and not len(book.notes):
        book.context, book.context_tokens = None, 0
        return
    # the block comes back at every compaction with most lines unchanged: each line is counted once
    count_message, count_rendered = book.accountant.count_message, book.accountant.count_rendered
    room = context_room(book, config, target)
    span = book.evicted_span()
    head = CONTEXT_HEADER + ('; read_context("#<step>") shows any step in full.' if span else ".")
    counted = _counted_sections(book, room)
    parts = [head, *(text for text, _ in counted)]
    user = user_section(book, room)
    source_ids = span or ()

    def block(text: str) -> Message:
        return Message(
            role="user",
            parts=(TextPart(text=text),),
            message_id=context_id(text),
            source_ids=source_ids,
            extra={"contextwarden": "context"},
        )

    # the ledger's room is sized from the parts' own counts (a join costs about a token each);
    # the whole block is counted exactly below, and the ledger shrinks until that count fits
    fixed = count_message(Message.user(head)) + sum(tokens + 1 for _, tokens in counted)
    ledger_room = room - fixed - 2
    for _ in range(4):  # the ledger's size is estimated; shrink its room until the exact count fits
        ledger_text = book.ledger.render(
            max_tokens=max(0, ledger_room),
            count=book.accountant.count_text,
            exact=False,
            exclude="\n".join(parts[1:]),  # facts the sections show are not listed twice
        )
        msg = block("\n".join([*parts, ledger_text] if ledger_text else parts))
        tokens = count_rendered(msg)
        if ledger_text:
            book.ledger.calibrate(book.ledger.estimate(ledger_text), tokens - fixed)
        if tokens <= room or not ledger_text:
            break
        ledger_room -= tokens - room + 8
    if tokens > room and len(parts) > 1:  # no room for the ledger: keep the sections, drop the ledger
        msg = block("\n".join(parts))
        tokens = count_rendered(msg)
    if tokens > room and len(parts) > 2 and user[0]:  # then the other sections: the user's words stay
        user_cap = max(0, room - count_message(Message.user(head)) - 4)
        record = book.read_instructions()
        in_view = _in_view(book)
        words = record.render(max_tokens=user_cap, count=book.accountant.count_text, in_view=in_view, requests=False)[0]
        msg = block("\n".join([head, words] if words else [head]))
        tokens = count_rendered(msg)
    if tokens > room and config.require_user_first:
        # No room for sections or ledger: a bare header still gives the view the user turn that
        # Anthropic and Gemini require before the first kept assistant message.
        msg = block(head)
        tokens = count_rendered(msg)
    if tokens > room:
        book.context, book.context_tokens = None, 0
        return
    book.context, book.context_tokens = msg, tokens

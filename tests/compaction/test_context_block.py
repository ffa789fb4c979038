"""The context block on a round book: what it shows, in which order, within its room."""

from __future__ import annotations

from contextwarden.compaction import context_block
from contextwarden.compaction.base import Room
from contextwarden.compaction.config import CompactionConfig
from contextwarden.instructions import HEADER
from contextwarden.messages import Message

from ._helpers import make_book, make_text, tool_round

CONFIG = CompactionConfig()


def book_with_evictions(n: int = 8, effective: int = 6000) -> object:
    msgs = [Message.system("You reconcile."), Message.user("Reconcile March.")]
    for i in range(n):
        msgs += tool_round(f"c{i}", f"invoice INV-{700 + i} matched\n" + make_text(800, seed=i))
    book = make_book(msgs, effective=effective, config=CONFIG)
    for r in book.rounds[2:-2]:
        book.evict(r)
    return book


def test_no_block_before_anything_left_the_view() -> None:
    book = make_book([Message.user("hi"), Message.assistant("hello")])
    context_block.render(book, CONFIG)
    assert book.context is None and book.context_tokens == 0


def test_the_block_lists_the_evicted_steps_within_its_room() -> None:
    book = book_with_evictions()
    context_block.render(book, CONFIG, target=2000)
    block = book.context
    assert block is not None and block.role == "user" and block.message_id == context_block.context_id(block.text)
    assert block.text.startswith(context_block.CONTEXT_HEADER)
    assert 'read_context("#<step>")' in block.text
    assert "INV-702" in block.text  # the ledger line of an evicted step, with its facts
    assert book.context_tokens == book.accountant.count_message(block)
    assert book.context_tokens <= context_block.context_room(book, CONFIG, 2000)
    assert block.source_ids == book.evicted_span()
    assert book.evicted_at_render == book.n_evicted


def test_sections_come_before_the_ledger_user_words_first_then_summary() -> None:
    book = book_with_evictions()
    book.evict(book.rounds[1])  # the user's request left the view: the section shows it
    book.summary, book.summary_span = "Matched INV-700 to INV-705.", ("m1", "m2")
    book.notes.handle_tool_call({"action": "add", "kind": "decision", "text": "Use the March rates."}, turn=1)
    room = context_block.context_room(book, CONFIG, None)
    parts = context_block.sections(book, room)
    assert parts[0].startswith(HEADER) and "Reconcile March." in parts[0]
    assert parts[1].startswith("Summary of messages m1..m2:") and "Use the March rates." in parts[2]
    context_block.render(book, CONFIG)
    text = book.context.text  # type: ignore[union-attr]
    assert text.index(HEADER) < text.index("Summary of messages") < text.index("Use the March rates.")


def test_the_user_section_does_not_repeat_a_message_still_in_view() -> None:
    book = book_with_evictions()  # the request is the newest user message: protected, in view
    room = context_block.context_room(book, CONFIG, None)
    assert not any(part.startswith(HEADER) for part in context_block.sections(book, room))


def test_without_room_the_block_falls_back_to_its_header() -> None:
    book = book_with_evictions(effective=6000)
    book.room = Room(effective=book.room.effective, ledger_cap=12)  # a block of at most 12 tokens
    context_block.render(book, CONFIG)
    assert book.context is None or book.context.text.startswith(context_block.CONTEXT_HEADER)
    assert book.context_tokens <= 12

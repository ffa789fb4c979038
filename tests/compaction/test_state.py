"""View state export and import on round books: a replayed transcript gets the same view back."""

from __future__ import annotations

import pytest

from contextwarden.compaction import clear, context_block, evict
from contextwarden.compaction.config import CompactionConfig
from contextwarden.compaction.state import Counters, export_state, import_state
from contextwarden.exceptions import SchemaError
from contextwarden.messages import Message
from contextwarden.tokens.calibration import Calibration

from ._helpers import book_totals_ok, make_book, make_text, tool_round

CONFIG = CompactionConfig(clear_after_rounds=2, keep_recent_rounds=1)


def history() -> list[Message]:
    msgs = [Message.system("You audit."), Message.user("Audit the shards.")]
    for i in range(10):
        msgs += tool_round(f"c{i}", f"shard SH-{i}\n" + make_text(1500, seed=i))
    return msgs


def test_export_then_import_restores_states_records_and_counters() -> None:
    msgs = history()
    book = make_book(msgs, config=CONFIG)
    clear.run(book, 0, CONFIG, protected=book.protected(1))
    evict.run(book, book.total() // 2, CONFIG, protected=book.protected(1))
    book.summary, book.summary_span, book.summarized_upto = "Audited SH-0.", ("a", "b"), 3
    context_block.render(book, CONFIG)
    book.rebuild()
    counters = Counters(turn=5, compactions={"clear": 1, "evict": 1}, deepen=0.1, breaker_failures=1)
    calibration = Calibration()
    state = export_state(book, counters, calibration)

    again = make_book(msgs, config=CONFIG)
    restored, cal = import_state(again, state, CONFIG, Calibration())
    assert restored == counters and isinstance(cal, Calibration)
    assert [(r.state, r.ledger_step) for r in again.rounds] == [(r.state, r.ledger_step) for r in book.rounds]
    assert again.ledger.to_dict() == book.ledger.to_dict()
    assert (again.summary, again.summary_span, again.summarized_upto) == ("Audited SH-0.", ("a", "b"), 3)
    context_block.render(again, CONFIG)
    again.rebuild()
    assert [(m.message_id, m.text) for m in again.view] == [(m.message_id, m.text) for m in book.view]
    assert book_totals_ok(again)


def test_an_unknown_format_is_a_schema_error() -> None:
    book = make_book(history(), config=CONFIG)
    with pytest.raises(SchemaError, match="view state format 2"):
        import_state(book, {"format": 2}, CONFIG, Calibration())

"""The shrink layer on a round book: when the budget itself is at stake, the newest rounds give way."""

from __future__ import annotations

from contextwarden.compaction import shrink
from contextwarden.compaction.config import CompactionConfig
from contextwarden.messages import Message

from ._helpers import book_totals_ok, make_book, make_text, tool_round

CONFIG = CompactionConfig(keep_recent_rounds=3)


def test_an_output_larger_than_the_budget_is_offloaded_to_a_preview() -> None:
    msgs = [
        Message.system("You read logs."),
        Message.user("Read the log."),
        *tool_round("c0", make_text(40_000, seed=1)),
    ]
    book = make_book(msgs, effective=3000, config=CONFIG)
    assert book.total() > 3000
    change = shrink.run(book, 3000, CONFIG)
    assert change.layer == "shrink" and change.items == 1
    assert change.tokens_after == book.total() <= 3000 < change.tokens_before
    r = book.rounds[2]
    assert r.state == "cleared" and r.shown is not None and r.shown[1].message_id.endswith("~p")
    assert book.snapshots.get_snapshot("ses_book", book.snapshot_id(r))  # the original stays readable
    assert book_totals_ok(book)


def test_newest_rounds_leave_down_to_the_protected_ones() -> None:
    msgs = [Message.system("sys"), Message.user("Compare the reports.")]
    for i in range(4):
        msgs += [Message.assistant(f"Report {i}: " + make_text(1500, seed=i))]  # nothing to shorten, only to drop
    book = make_book(msgs, effective=900, config=CONFIG)
    assert [r.kind for r in book.rounds] == ["system", "exchange", "message", "message", "message"]
    change = shrink.run(book, 900, CONFIG)
    assert book.total() <= 900
    kept = [r.ordinal for r in book.rounds if r.state != "evicted"]
    assert kept == sorted(book.protected(0)) == [0, 1, 4]  # system, the current request, the newest round
    assert change.items == len(book.rounds) - len(kept)


def test_shrink_does_nothing_when_the_view_fits() -> None:
    book = make_book([Message.user("hi"), *tool_round("c0", make_text(3000, seed=2))], effective=5000, config=CONFIG)
    change = shrink.run(book, 5000, CONFIG)
    assert change.items == 0 and change.saved == 0

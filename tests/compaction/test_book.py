"""The round book on its own: the same rounds as `group_rounds`, totals that match a walk, states."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from _histories import valid_histories
from contextwarden.events import EventBus
from contextwarden.messages import Message
from contextwarden.rounds import group_rounds

from ._helpers import Recorder, book_totals_ok, call, make_book, make_text, tool_round


def shape(rounds: object) -> list[tuple[int, int, str, tuple[str, ...], tuple[str, ...]]]:
    return [(r.start, r.end, r.kind, r.call_ids, r.pending) for r in rounds]  # type: ignore[attr-defined]


@settings(max_examples=300, deadline=None)
@given(valid_histories())
def test_the_book_makes_the_rounds_group_rounds_makes(msgs: list[Message]) -> None:
    book = make_book(msgs)
    assert shape(book.rounds) == shape(group_rounds(msgs))
    assert [r.ordinal for r in book.rounds] == list(range(len(book.rounds)))
    assert book_totals_ok(book)
    assert book.rounds_total == sum(book.counts)


def test_a_late_result_joins_its_call_without_stretching_the_round() -> None:
    msgs = [
        Message.user("u"),
        Message.assistant("", tool_calls=[call("a"), call("b")]),
        Message.tool_result("a", "ra"),
        Message.user("v"),
        Message.tool_result("b", "rb"),
        Message.assistant("ok"),
    ]
    book = make_book(msgs)
    assert [(list(r.indices), r.kind, r.pending) for r in book.rounds] == [
        ([0], "message", ()),
        ([1, 2, 4], "tool-call", ()),
        ([3, 5], "exchange", ()),  # the reply joins its request across the late result
    ]
    assert sorted(i for r in book.rounds for i in r.indices) == list(range(len(msgs)))
    assert book.dirty  # a late result must be rendered next to its call
    book.rebuild()
    assert [m.message_id for m in book.view] == [msgs[i].message_id for i in (0, 1, 2, 4, 3, 5)]


@settings(max_examples=100, deadline=None)
@given(valid_histories(pending_tail=False), st.lists(st.tuples(st.sampled_from("sep"), st.integers(0, 40))))
def test_totals_follow_every_state_change(msgs: list[Message], ops: list[tuple[str, int]]) -> None:
    book = make_book(msgs)
    for op, k in ops:
        if not book.rounds:
            break
        r = book.rounds[k % len(book.rounds)]
        if op == "s":  # show a shorter stand-in for every message of the round
            book.show(r, [m.with_text(m.text[:3] or "-") if m.role != "assistant" else m for m in book.messages(r)])
        elif op == "e":
            book.evict(r, record=False)
        else:
            book.restore(r)
        assert book_totals_ok(book)
        assert r.state != "full" or r.shown is None
    book.rebuild()
    assert book.view_tokens == book.rounds_total + book.accountant.framing.reply_priming


def test_evicting_a_tool_round_records_it_once_with_its_snapshot() -> None:
    rec = Recorder()
    events = EventBus()
    events.subscribe(rec)
    msgs = [Message.user("Check the orders."), *tool_round("c1", "found ORD-7781\n" + make_text(600, seed=1))]
    book = make_book(msgs, events=events)
    r = book.rounds[1]
    book.evict(r)
    book.evict(r)
    assert r.state == "evicted" and book.n_evicted == 1
    assert [e.step for e in book.ledger.entries] == [1]
    assert "ORD-7781" in book.ledger.entries[0].facts
    written = rec.of("snapshot.written")
    assert [(e.snapshot_id, e.reason) for e in written] == [(book.snapshot_id(r), "evicted")]
    assert book.snapshots.get_snapshot("ses_book", book.snapshot_id(r)) == book.rebuild_snapshot(book.snapshot_id(r))
    book.restore(r)
    assert r.state == "full" and book.n_evicted == 0 and book_totals_ok(book)


def test_protected_rounds_are_system_pinned_current_in_flight_and_newest() -> None:
    msgs = [
        Message.system("sys"),
        Message.user("old request", pinned=True),
        *tool_round("c1", "r1"),
        *tool_round("c2", "r2"),
        Message.user("current request"),
        Message.assistant("", tool_calls=[call("c3")]),
    ]
    book = make_book(msgs)
    kinds = {r.ordinal: r.kind for r in book.rounds}
    assert kinds == {0: "system", 1: "message", 2: "tool-call", 3: "tool-call", 4: "message", 5: "tool-call"}
    assert book.protected(0) == {0, 1, 4, 5}  # system, pinned, current request, in flight (and newest)
    assert book.protected(3) == {0, 1, 3, 4, 5}


def test_pinning_brings_an_evicted_round_back() -> None:
    msgs = [Message.user("first"), *tool_round("c1", "r1"), Message.user("second")]
    book = make_book(msgs)
    r = book.rounds[1]
    book.evict(r, record=False)
    book.live()  # the loops skip it from now on
    assert book.pin(msgs[2].message_id)
    assert r.pinned and r.state == "full" and r in book.live()
    assert book.transcript[2].pinned and not msgs[2].pinned  # the transcript holds a pinned copy
    assert not book.pin("msg_unknown")

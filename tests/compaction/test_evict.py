"""The evict layer on a round book: whole rounds leave in policy order until the target is met."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from contextwarden.compaction import evict
from contextwarden.compaction.config import EVICTION_POLICIES, CompactionConfig
from contextwarden.messages import Message

from ._helpers import book_totals_ok, make_book, make_text, tool_round


def history(n: int) -> list[Message]:
    msgs = [Message.system("You reconcile invoices."), Message.user("Reconcile March.")]
    for i in range(n):
        msgs += tool_round(f"c{i}", make_text(400, seed=i) + f"\ninvoice INV-{500 + i} ok", q=f"q{i}")
    return msgs


def test_fifo_evicts_the_oldest_rounds_until_the_target_and_lists_them_in_the_ledger() -> None:
    config = CompactionConfig(keep_recent_rounds=1)
    book = make_book(history(10), config=config)
    before = book.total()
    target = before // 2
    change = evict.run(book, target, config, protected=book.protected(1))
    assert change.layer == "evict" and change.tokens_before == before
    assert change.tokens_after == book.total() <= target
    gone = [r.ordinal for r in book.rounds if r.state == "evicted"]
    assert gone == list(range(2, 2 + change.items))  # oldest first (the request is the current one: kept)
    assert [e.step for e in book.ledger.entries] == gone
    assert any("INV-500" in f for f in book.ledger.entries[0].facts)
    assert book_totals_ok(book)


@pytest.mark.parametrize("policy", EVICTION_POLICIES)
def test_no_policy_evicts_a_protected_round(policy: str) -> None:
    config = CompactionConfig(eviction_policy=policy, keep_recent_rounds=2)  # type: ignore[arg-type]
    book = make_book(history(12), config=config)
    protected = book.protected(2)
    change = evict.run(book, 0, config, protected=protected)  # an unreachable target: evict all it may
    assert all(book.rounds[o].state != "evicted" for o in protected)
    assert change.items == len(book.rounds) - len(protected)
    assert book_totals_ok(book)


def test_rounds_past_the_one_line_age_leave_first_whatever_the_policy_prefers() -> None:
    config = CompactionConfig(eviction_policy="priority", progressive_line_after=5, keep_recent_rounds=1)
    msgs = history(12)
    young = 2 + 2 * 10  # the call of round 12, one of the five youngest
    msgs[young] = Message.assistant("", tool_calls=msgs[young].tool_calls, extra={"importance": 0.01})
    book = make_book(msgs, config=config)
    assert book.rounds[12].kind == "tool-call" and book.rounds[12].start == young
    evict.run(book, book.total() - 1, config, protected=book.protected(1))
    # the policy would take the unimportant young round first; the old tier goes before it
    assert [r.ordinal for r in book.rounds if r.state == "evicted"] == [2]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), share=st.floats(0.0, 1.0), policy=st.sampled_from(EVICTION_POLICIES))
def test_eviction_stops_as_soon_as_the_target_is_met(n: int, share: float, policy: str) -> None:
    config = CompactionConfig(eviction_policy=policy, keep_recent_rounds=1)  # type: ignore[arg-type]
    book = make_book(history(n), config=config)
    target = int(book.total() * share)
    order = []
    evict_one = book.evict

    def spy(r, **kwargs):  # type: ignore[no-untyped-def]
        order.append(r)
        evict_one(r, **kwargs)

    book.evict = spy  # type: ignore[method-assign]
    change = evict.run(book, target, config, protected=book.protected(1))
    assert change.items == len(order)
    if order:
        book.restore(order[-1])  # without its last eviction the view was still above the target
        assert book.total() > target

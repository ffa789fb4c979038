"""Eviction policies on small crafted sessions: which rounds leave the view first.

Each scenario has one request (kept: it is the current user message) and ten rounds. The window
is calibrated so a compaction must evict a few rounds but not all; the rounds that left must then
be exactly the first few of the policy's order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from contextwarden.compaction.config import CompactionConfig, HybridWeights
from contextwarden.compaction.policies import Candidate, order_for_eviction
from contextwarden.messages import Message, ThinkingPart

from ._helpers import call, evicted, fetch, filler, tool_round


def assert_first_of(gone: list[int], order: list[int]) -> None:
    """The rounds that left are exactly the first ``len(gone)`` of ``order`` (greedy in policy order)."""
    assert set(gone) == set(order[: len(gone)]), (gone, order)


def test_fifo_evicts_oldest_first() -> None:
    gone = evicted("fifo", [fetch(i) for i in range(10)])
    assert_first_of(gone, list(range(10)))


def test_lru_keeps_a_round_whose_identifiers_a_later_call_mentions() -> None:
    rounds = [fetch(i) for i in range(9)]
    rounds.append(fetch(9, account="REC-0001"))  # the newest call refers to round 1's record
    gone = evicted("lru", rounds)
    assert_first_of(gone, [0, 2, 3, 4, 5, 6, 7, 8])
    # fifo on the same rounds would have evicted it
    assert 1 in evicted("fifo", rounds)


def test_lru_counts_mentions_in_later_tool_outputs() -> None:
    rounds = [fetch(i) for i in range(9)]
    rounds.append(tool_round("c9", f"REC-0000 was reconciled; {filler(9)}", name="fetch"))
    gone = evicted("lru", rounds)
    assert_first_of(gone, [1, 2, 3, 4, 5, 6, 7])


def _weighted(i: int, importance: float | None = None, *, error: bool = False) -> list[Message]:
    extra = {} if importance is None else {"importance": importance}
    return [
        Message.assistant("", tool_calls=[call(f"c{i}", "fetch")], extra=extra),
        Message.tool_result(f"c{i}", f"record REC-{i:04d}: {filler(i)}", name="fetch", is_error=error),
    ]


def test_priority_evicts_low_importance_first_and_keeps_errors_longest() -> None:
    rounds = [_weighted(i) for i in range(10)]
    rounds[5] = _weighted(5, importance=0.1)  # unimportant: first to go although newer
    rounds[0] = _weighted(0, error=True)  # errors weigh double: outlives its neighbours
    gone = evicted("priority", rounds)
    assert_first_of(gone, [5, 1, 2, 3, 4, 6, 7, 8])


def test_priority_uses_source_weights_of_the_round_role() -> None:
    # earlier requests (user weight 1.0) outlive tool rounds (assistant weight 0.6), older or not
    rounds: list[list[Message]] = []
    for i in range(10):
        if i % 2:
            rounds.append([Message.user(f"Also check batch {filler(i, 300)}"), Message.assistant("Noted.")])
        else:
            rounds.append(fetch(i))
    rounds.append([Message.user("Now write the report.")])
    gone = evicted("priority", rounds)
    assert_first_of(gone, [0, 2, 4, 6, 8, 1, 3])


def _reply(i: int) -> list[Message]:
    return [Message.assistant(f"Interim note {i}: {filler(i + 50, 900)}")]


def test_type_ttl_expires_tool_rounds_before_older_messages() -> None:
    rounds = [_reply(i) if i % 2 == 0 else fetch(i) for i in range(10)]
    rounds[0] = fetch(0)  # the first round after the request is a tool round (a reply would join the request)
    gone = evicted("type-ttl", rounds, type_ttl={"tool": 4, "message": 40, "thinking": 2})
    # tool rounds at least 4 rounds old: 0, 1, 3, 5 (ages 9, 8, 6, 4); messages 2, 4 are not expired
    assert_first_of(gone, [0, 1, 3, 5, 2, 4])


def test_type_ttl_expires_thinking_rounds_early() -> None:
    def thinking(i: int) -> list[Message]:
        parts = (ThinkingPart(text=f"pondering {filler(i + 9, 500)}"),) + Message.assistant(
            f"Plan {i}: {filler(i + 70, 400)}"
        ).parts
        return [Message(role="assistant", parts=parts)]

    rounds = [fetch(0), *[thinking(i) if i in (6, 7) else fetch(i) for i in range(1, 10)]]
    gone = evicted("type-ttl", rounds, type_ttl={"tool": 20, "message": 40, "thinking": 2})
    assert_first_of(gone, [6, 7, 0, 1, 2])


def test_semantic_merge_evicts_the_older_near_duplicate_first() -> None:
    rounds = [fetch(i) for i in range(10)]
    rounds[4] = tool_round("c4", f"record REC-0077: {filler(77)}", name="fetch")
    rounds[7] = tool_round("c7", f"record REC-0077: {filler(77)}", name="fetch")
    gone = evicted("semantic-merge", rounds, want=(1, 3))
    assert_first_of(gone, [4, 0, 1, 2])


def test_hybrid_freshness_only_is_fifo() -> None:
    weights = HybridWeights(freshness=1.0, priority=0.0, type=0.0, references=0.0)
    gone = evicted("hybrid", [fetch(i) for i in range(10)], hybrid_weights=weights)
    assert_first_of(gone, list(range(10)))


def test_hybrid_default_weights_keep_a_referenced_old_round() -> None:
    rounds = [fetch(i) for i in range(9)]
    rounds.append(fetch(9, account="REC-0000"))
    gone = evicted("hybrid", rounds)
    assert_first_of(gone, [1, 2, 3, 4, 5])


def test_hybrid_priority_weight_evicts_unimportant_rounds_first() -> None:
    rounds = [_weighted(i) for i in range(10)]
    rounds[6] = _weighted(6, importance=0.05)
    weights = HybridWeights(freshness=0.1, priority=0.9, type=0.0, references=0.0)
    gone = evicted("hybrid", rounds, hybrid_weights=weights)
    assert_first_of(gone, [6, 0, 1, 2, 3])


def _cand(ordinal: int, age: int, **kw: Any) -> Candidate:
    base: dict[str, Any] = {
        "kind": "tool-call",
        "role": "assistant",
        "importance": 1.0,
        "has_thinking": False,
        "identifiers": frozenset(),
        "words": frozenset({f"w{ordinal}"}),
        "last_reference": -1,
    }
    return Candidate(ordinal=ordinal, age=age, **{**base, **kw})


@pytest.mark.parametrize(
    ("policy", "tweak", "first"),
    [
        ("fifo", lambda c: c, 1),
        ("lru", lambda c: _cand(c.ordinal, c.age, last_reference=9) if c.ordinal == 1 else c, 2),
        ("priority", lambda c: _cand(c.ordinal, c.age, importance=0.1) if c.ordinal == 4 else c, 4),
        ("type-ttl", lambda c: _cand(c.ordinal, c.age, kind="message") if c.ordinal == 1 else c, 2),
        ("semantic-merge", lambda c: _cand(c.ordinal, c.age, words=frozenset({"w7"})) if c.ordinal == 3 else c, 3),
    ],
)
def test_order_for_eviction_directly(policy: str, tweak: Callable[[Candidate], Candidate], first: int) -> None:
    cands = [tweak(_cand(i, 8 - i)) for i in range(1, 8)]
    config = CompactionConfig(eviction_policy=policy, type_ttl={"tool": 3, "message": 40})  # type: ignore[arg-type]
    ordered = order_for_eviction(cands, config)
    assert sorted(c.ordinal for c in ordered) == list(range(1, 8))  # a permutation, nothing lost
    assert ordered[0].ordinal == first


def test_every_policy_never_evicts_protected_rounds() -> None:
    for policy in ("fifo", "lru", "priority", "type-ttl", "semantic-merge", "hybrid"):
        pinned = fetch(0)
        pinned[0] = dataclasses.replace(pinned[0], pinned=True)
        rounds = [pinned, *[fetch(i) for i in range(1, 10)]]
        gone = evicted(policy, rounds, want=(2, 9))
        assert 0 not in gone, policy
        assert 9 not in gone, policy  # the newest round (keep_recent_rounds=1)

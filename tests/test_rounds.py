from __future__ import annotations

from hypothesis import given, settings, strategies as st

from _histories import arbitrary_histories, cut_histories, valid_histories
from contextwarden.messages import Message, ToolCall
from contextwarden.rounds import Round, group_rounds
from contextwarden.toolpairs import repair


def asst(*cids: str, text: str = "") -> Message:
    return Message.assistant(text, tool_calls=[ToolCall(call_id=c, name="f", arguments="{}") for c in cids])


def res(cid: str) -> Message:
    return Message.tool_result(cid, "r")


def shape(msgs: list[Message]) -> list[tuple[int, int, str, tuple[str, ...], tuple[str, ...]]]:
    return [(r.start, r.end, r.kind, r.call_ids, r.pending) for r in group_rounds(msgs)]


def call_of_each_result(msgs: list[Message]) -> dict[int, int]:
    """Result index -> index of the call it answers (most recent unanswered call with that id), by brute force."""
    answered: set[tuple[int, str]] = set()
    out = {}
    for i, m in enumerate(msgs):
        if m.role != "tool":
            continue
        for a in range(i - 1, -1, -1):
            ids = {c.call_id for c in msgs[a].tool_calls}
            if m.tool_call_id in ids and (a, m.tool_call_id) not in answered:
                answered.add((a, m.tool_call_id))
                out[i] = a
                break
            if m.tool_call_id in ids:
                break  # the most recent call with this id is already answered: a duplicate
    return out


@settings(max_examples=400)
@given(st.one_of(valid_histories(), cut_histories(), arbitrary_histories()))
def test_rounds_partition_the_list_and_never_split_a_call_from_its_results(msgs):
    rounds = group_rounds(msgs)
    assert [i for r in rounds for i in r.indices] == list(range(len(msgs)))
    assert all(r.end > r.start for r in rounds)
    where = {i: k for k, r in enumerate(rounds) for i in r.indices}
    for result, call in call_of_each_result(msgs).items():
        assert where[result] == where[call]
    for r in rounds:
        made = [c.call_id for i in r.indices for c in msgs[i].tool_calls]
        assert list(r.call_ids) == [
            cid for i in r.indices for cid in dict.fromkeys(c.call_id for c in msgs[i].tool_calls)
        ]
        assert set(r.pending) <= set(made)
        assert (r.kind == "tool-call") == bool(made)


@settings(max_examples=200)
@given(valid_histories())
def test_rounds_of_valid_histories_are_tight(msgs):
    for r in group_rounds(msgs):
        if r.kind == "tool-call":
            # Exactly one assistant message and its results.
            assert msgs[r.start].role == "assistant"
            assert all(m.role == "tool" for m in msgs[r.start + 1 : r.end])
            assert r.pending == () or r.end == len(msgs)
        elif r.kind == "exchange":
            assert [m.role for m in msgs[r.start : r.end]] == ["user", "assistant"]
        elif r.kind == "system":
            assert msgs[r.start].role in ("system", "developer") and len(r) == 1


def test_round_kinds():
    msgs = [
        Message.system("s"),  # 0 system
        Message.user("u"),  # 1 message (followed by a tool call)
        asst("a", "b"),  # 2-4 tool-call, parallel
        res("b"),
        res("a"),
        Message.assistant("done"),  # 5 message (no user before it)
        Message.user("v"),  # 6-7 exchange
        Message.assistant("ok"),
        Message(role="developer", parts=Message.user("d").parts),  # 8 system
        res("ghost"),  # 9 message (orphan)
        Message.user("w"),  # 10 message (last)
    ]
    assert shape(msgs) == [
        (0, 1, "system", (), ()),
        (1, 2, "message", (), ()),
        (2, 5, "tool-call", ("a", "b"), ()),
        (5, 6, "message", (), ()),
        (6, 8, "exchange", (), ()),
        (8, 9, "system", (), ()),
        (9, 10, "message", (), ()),
        (10, 11, "message", (), ()),
    ]
    assert group_rounds([]) == []
    assert len(Round(2, 5, "tool-call")) == 3


def test_pending_calls_are_reported():
    msgs = [Message.user("u"), asst("a", "b"), res("a")]
    assert shape(msgs)[-1] == (1, 3, "tool-call", ("a", "b"), ("b",))


def test_displaced_result_stretches_the_round_over_what_lies_between():
    msgs = [
        Message.user("u"),
        asst("a", "b"),
        res("a"),
        Message.user("v"),
        asst("c"),
        res("c"),
        res("b"),
        Message.user("w"),
    ]
    assert shape(msgs) == [
        (0, 1, "message", (), ()),
        (1, 7, "tool-call", ("a", "b", "c"), ()),
        (7, 8, "message", (), ()),
    ]
    # After repair the rounds are tight again.
    assert [r.kind for r in group_rounds(repair(msgs))] == ["message", "tool-call", "message", "tool-call", "message"]

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from _histories import arbitrary_histories, cut_histories, reference_pairs_ok, valid_histories
from contextwarden.adapters import openai_chat
from contextwarden.exceptions import MessageError, ToolPairError
from contextwarden.messages import ImagePart, Message, TextPart, ToolCall
from contextwarden.toolpairs import check, is_valid, pending_calls, repair, validate


def call(cid: str, name: str = "f") -> ToolCall:
    return ToolCall(call_id=cid, name=name, arguments="{}")


def asst(*cids: str, text: str = "") -> Message:
    return Message.assistant(text, tool_calls=[call(c) for c in cids])


def res(cid: str, text: str = "r") -> Message:
    return Message.tool_result(cid, text)


def kinds(messages: list[Message], **options: bool) -> list[tuple[int, str, str | None]]:
    return [(p.index, p.kind, p.call_id) for p in validate(messages, **options)]


OPTIONS = st.fixed_dictionaries(
    {"require_user_first": st.booleans(), "allow_pending_tail": st.booleans(), "allow_empty": st.booleans()}
)


# --- properties ---------------------------------------------------------------------------------
@settings(max_examples=400)
@given(cut_histories(), OPTIONS)
def test_repair_of_any_cut_history_is_valid_idempotent_and_invents_nothing(msgs, options):
    before = list(msgs)
    fixed = repair(msgs, **options)
    assert validate(fixed, **options) == []
    assert msgs == before and all(a is b for a, b in zip(msgs, before, strict=True))  # input untouched
    again = repair(fixed, **options)
    assert len(again) == len(fixed) and all(a is b for a, b in zip(again, fixed, strict=True))
    originals = {id(m): m for m in msgs}
    by_id = {m.message_id: m for m in msgs}
    for m in fixed:
        if id(m) in originals:
            continue
        # The only new objects are assistant messages that lost some tool calls.
        source = by_id[m.message_id]
        assert m.role == "assistant"
        assert [p for p in m.parts if not isinstance(p, ToolCall)] == [
            p for p in source.parts if not isinstance(p, ToolCall)
        ]
        assert set(m.tool_calls) < set(source.tool_calls)


@settings(max_examples=300)
@given(arbitrary_histories(), OPTIONS)
def test_repair_of_arbitrary_lists_is_valid(msgs, options):
    fixed = repair(msgs, **options)
    assert validate(fixed, **options) == []
    # Kept messages stay in their relative order, except results moved up to their call.
    others = [m for m in fixed if m.role != "tool"]
    ranks = {m.message_id: i for i, m in enumerate(msgs)}
    assert [ranks[m.message_id] for m in others] == sorted(ranks[m.message_id] for m in others)


@settings(max_examples=300)
@given(valid_histories())
def test_repair_of_a_valid_history_returns_the_same_objects(msgs):
    assert validate(msgs) == []
    fixed = repair(msgs)
    assert fixed == msgs
    assert all(a is b for a, b in zip(fixed, msgs, strict=True))
    assert fixed is not msgs


@settings(max_examples=300)
@given(valid_histories(pending_tail=False))
def test_histories_without_pending_calls_are_valid_under_every_option(msgs):
    assert is_valid(msgs, require_user_first=True, allow_pending_tail=False)


@settings(max_examples=400)
@given(st.one_of(arbitrary_histories(), cut_histories()), st.booleans())
def test_validity_matches_the_reference_rule(msgs, allow_pending_tail):
    assert is_valid(msgs, allow_pending_tail=allow_pending_tail) == reference_pairs_ok(
        msgs, allow_pending_tail=allow_pending_tail
    )


_BENCH = Path(__file__).resolve().parents[2] / "shared" / "bench" / "peers_bench.py"


@functools.cache
def _load_bench() -> Any:
    spec = importlib.util.spec_from_file_location("peers_bench", _BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.skipif(not _BENCH.exists(), reason=f"the trim benchmark is not checked out at {_BENCH}")
@settings(max_examples=300)
@given(st.one_of(arbitrary_histories(), cut_histories()))
def test_validity_matches_the_trim_benchmark_check(msgs):
    bench = _load_bench()
    canon = openai_chat.from_messages(msgs)
    verdict = bench.check_context(list(range(len(canon))), canon, [0] * len(canon), 10**9)
    assert verdict["pairs_ok"] == is_valid(msgs, allow_pending_tail=False)


# --- examples: one per problem kind --------------------------------------------------------------
def test_valid_history_with_parallel_calls_in_any_order():
    msgs = [Message.system("s"), Message.user("u"), asst("a", "b"), res("b"), res("a"), Message.assistant("done")]
    assert validate(msgs) == []
    assert is_valid(msgs, require_user_first=True, allow_pending_tail=False, allow_empty=False)


def test_orphan_result():
    msgs = [Message.user("u"), res("ghost"), Message.assistant("x")]
    assert kinds(msgs) == [(1, "orphan-result", "ghost")]
    assert repair(msgs) == [msgs[0], msgs[2]]


def test_result_before_its_call_is_an_orphan_and_the_call_is_abandoned():
    msgs = [Message.user("u"), res("a"), asst("a", text="t"), Message.user("v")]
    assert kinds(msgs) == [(1, "orphan-result", "a"), (2, "missing-result", "a")]
    fixed = repair(msgs)
    assert [m.role for m in fixed] == ["user", "assistant", "user"]
    assert fixed[1].tool_calls == () and fixed[1].text == "t"


def test_missing_result_drops_the_call_and_an_assistant_left_empty():
    msgs = [Message.user("u"), asst("a", "b"), res("a"), Message.user("v"), asst("c"), Message.user("w")]
    assert kinds(msgs) == [(1, "missing-result", "b"), (4, "missing-result", "c")]
    fixed = repair(msgs)
    assert [m.role for m in fixed] == ["user", "assistant", "tool", "user", "user"]
    assert [c.call_id for c in fixed[1].tool_calls] == ["a"]
    assert fixed[1].message_id == msgs[1].message_id  # the copy keeps its id
    assert fixed[2] is msgs[2]


def test_abandoned_call_keeps_an_assistant_with_an_image():
    image = Message(role="assistant", parts=(ImagePart(url="https://x/y.png"), call("a")))
    fixed = repair([Message.user("u"), image, Message.user("v")])
    assert [m.role for m in fixed] == ["user", "assistant", "user"]
    assert fixed[1].parts == (ImagePart(url="https://x/y.png"),)


def test_pending_calls_at_the_tail():
    msgs = [Message.user("u"), asst("a", "b"), res("b")]
    assert validate(msgs) == []
    assert pending_calls(msgs) == ("a",)
    assert kinds(msgs, allow_pending_tail=False) == [(1, "pending-call", "a")]
    assert repair(msgs) == msgs
    strict = repair(msgs, allow_pending_tail=False)
    assert [c.call_id for c in strict[1].tool_calls] == ["b"] and strict[2] is msgs[2]
    user = Message.user("u")
    assert repair([user, asst("a")], allow_pending_tail=False) == [user]


def test_pending_tail_followed_by_another_message_is_missing():
    msgs = [Message.user("u"), asst("a"), Message.user("still there?")]
    assert kinds(msgs) == [(1, "missing-result", "a")]
    assert pending_calls(msgs) == ()


def test_duplicate_result_keeps_the_first():
    msgs = [Message.user("u"), asst("a"), res("a", "first"), res("a", "second"), Message.assistant("x")]
    assert kinds(msgs) == [(3, "duplicate-result", "a")]
    assert "message 2" in validate(msgs)[0].detail
    assert [m.text for m in repair(msgs)] == ["u", "", "first", "x"]


def test_out_of_order_result_moves_up_to_its_call():
    msgs = [Message.user("u"), asst("a", "b"), res("a"), Message.user("v"), res("b"), Message.assistant("x")]
    assert kinds(msgs) == [(4, "out-of-order", "b")]
    fixed = repair(msgs)
    assert [m.role for m in fixed] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert fixed[3] is msgs[4]
    assert validate(fixed) == []


def test_displaced_result_inside_another_calls_block_does_not_blame_that_block():
    msgs = [Message.user("u"), asst("a"), Message.user("v"), asst("b"), res("a"), res("b")]
    assert kinds(msgs) == [(4, "out-of-order", "a")]
    fixed = repair(msgs)
    assert [(m.role, m.tool_call_id) for m in fixed] == [
        ("user", None),
        ("assistant", None),
        ("tool", "a"),
        ("user", None),
        ("assistant", None),
        ("tool", "b"),
    ]


def test_reused_call_ids_pair_with_the_most_recent_call():
    msgs = [Message.user("u"), asst("call_0"), res("call_0"), asst("call_0"), res("call_0"), Message.assistant("x")]
    assert validate(msgs) == []
    # The second result of a reused id, with no new call: a duplicate.
    assert kinds([*msgs[:3], res("call_0")]) == [(3, "duplicate-result", "call_0")]


def test_first_not_user():
    msgs = [
        Message.system("s"),
        Message.assistant("hello"),
        asst("a"),
        res("a"),
        Message.user("u"),
        asst("b"),
        res("b"),
    ]
    assert kinds(msgs) == []
    assert kinds(msgs, require_user_first=True) == [(1, "first-not-user", None)]
    fixed = repair(msgs, require_user_first=True)
    assert fixed == [msgs[0], *msgs[4:]]
    # A leading call whose result comes after the first user message: both go.
    tricky = [asst("a"), Message.user("u"), res("a")]
    assert repair(tricky, require_user_first=True) == [tricky[1]]
    # No user message at all: only the system messages stay.
    system = Message.system("s")
    assert repair([system, Message.assistant("x")], require_user_first=True) == [system]


def test_empty_messages():
    empty_user = Message.user("   ")
    msgs = [Message.user("u"), Message.assistant(""), empty_user, asst("a"), res("a", ""), Message.assistant("x")]
    assert kinds(msgs) == []
    assert kinds(msgs, allow_empty=False) == [(1, "empty-message", None), (2, "empty-message", None)]
    fixed = repair(msgs, allow_empty=False)
    assert fixed == [msgs[0], msgs[3], msgs[4], msgs[5]]  # an empty tool result is a result


def test_check_raises_typed_errors_naming_index_and_call():
    with pytest.raises(ToolPairError) as info:
        check([Message.user("u"), res("ghost")])
    assert info.value.index == 1 and info.value.call_id == "ghost" and info.value.field == "tool_call_id"
    assert "repair()" in str(info.value)
    with pytest.raises(MessageError) as first:
        check([Message.assistant("x")], require_user_first=True)
    assert not isinstance(first.value, ToolPairError) and first.value.index == 0
    check([Message.user("u"), asst("a"), res("a")])


def test_inputs_are_never_modified():
    msgs = [Message.user("u"), asst("a", "b", text="t"), res("a"), Message.user("v")]
    snapshot = [m.to_dict() for m in msgs]
    as_tuple = tuple(msgs)
    repair(as_tuple, require_user_first=True, allow_empty=False)
    validate(as_tuple)
    assert [m.to_dict() for m in msgs] == snapshot


def test_large_history_round_trip_through_openai_dicts_stays_valid():
    msgs: list[Message] = [Message.system("s")]
    for t in range(1250):
        msgs += [Message.user(f"u{t}"), asst(f"c{t}"), res(f"c{t}", json.dumps({"t": t}))]
    msgs.append(Message(role="assistant", parts=(TextPart(text="done"),)))
    assert len(msgs) == 3752
    assert validate(msgs) == []
    assert repair(msgs) == msgs
    cut = msgs[:101] + msgs[102:]  # drops a call: its result becomes an orphan
    assert kinds(cut) == [(101, "orphan-result", "c33")]
    assert len(repair(cut)) == len(cut) - 1

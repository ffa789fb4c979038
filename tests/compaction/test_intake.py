"""What enters the transcript: abandoned tool calls keep every view valid; ids never collide silently."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from contextwarden import toolpairs
from contextwarden.compaction.config import CompactionConfig
from contextwarden.exceptions import BudgetExceeded, MessageError, ToolPairError
from contextwarden.messages import Message, TextPart, ToolCall
from contextwarden.session import Session
from contextwarden.toolpairs import ABANDONED_RESULT_TEXT

from ._helpers import check_view, is_abandoned_stand_in, make_text, session


def call(call_id: str, name: str = "lookup") -> Message:
    return Message.assistant("", tool_calls=[ToolCall(call_id=call_id, name=name, arguments='{"q": 1}')])


def started(window: int = 4000, **kwargs: Any) -> Session:
    s, _ = session(window, **kwargs)
    s.add([Message.system("You are a test agent."), Message.user("Find order ORD-1.")])
    return s


def stand_ins(view: list[Message]) -> list[Message]:
    return [m for m in view if is_abandoned_stand_in(m)]


# --- abandoned calls ------------------------------------------------------------------------------
def test_a_call_followed_by_a_user_message_is_answered_by_a_marked_stand_in() -> None:
    s = started()
    asked = call("c1")
    s.add([asked, Message.user("Never mind, check ORD-2 instead.")])
    assert not s.engine.has_open_calls()
    for _ in range(3):  # every later view, not only the next one
        view = s.prepare(format="internal").view
        assert toolpairs.validate(view) == []
        (stand_in,) = stand_ins(view)
        assert view[view.index(asked) + 1] is stand_in
        assert stand_in.tool_call_id == "c1" and stand_in.is_error and ABANDONED_RESULT_TEXT in stand_in.text
        assert toolpairs.validate(view, allow_pending_tail=False) == []
    # the transcript is not touched
    assert [m.role for m in s.transcript] == ["system", "user", "assistant", "user"]
    assert s.status().used == s.accountant.count_messages(view)


def test_another_writers_unanswered_call_is_abandoned_and_its_late_result_takes_its_place() -> None:
    s = started()
    s.add(call("a1"))  # writer A's call, still running
    s.add(call("b1"))  # writer B's call on the same session: a later assistant turn
    view = s.prepare(format="internal").view
    assert toolpairs.validate(view) == [] and [m.tool_call_id for m in stand_ins(view)] == ["a1"]
    assert s.engine.has_open_calls()  # b1 is in flight
    s.add(Message.tool_result("b1", "B's output"))
    assert not s.engine.has_open_calls()
    s.add(Message.tool_result("a1", "A's output, late"))  # accepted: it replaces the stand-in
    view = s.prepare(format="internal").view
    assert toolpairs.validate(view, allow_pending_tail=False) == [] and stand_ins(view) == []
    texts = [m.text for m in view]
    assert texts.index("A's output, late") == texts.index("") + 1  # right after its call
    assert s.status().used == s.accountant.count_messages(view)
    with pytest.raises(ToolPairError, match="second result"):
        s.add(Message.tool_result("a1", "again"))


def test_only_the_unanswered_calls_of_a_parallel_round_get_stand_ins() -> None:
    s = started()
    both = Message.assistant("", tool_calls=[ToolCall(call_id=c, name="f", arguments="{}") for c in ("p1", "p2", "p3")])
    s.add([both, Message.tool_result("p2", "two"), Message.user("stop")])
    view = s.prepare(format="internal").view
    assert toolpairs.validate(view, allow_pending_tail=False) == []
    at = view.index(both)
    assert [m.tool_call_id for m in view[at + 1 : at + 4]] == ["p2", "p1", "p3"]
    assert [m.tool_call_id for m in stand_ins(view)] == ["p1", "p3"]


def test_a_reused_call_id_belongs_to_the_newer_call() -> None:
    s = started()
    s.add([call("call_0"), Message.user("go on")])  # abandoned
    s.add(call("call_0"))  # models that number calls per turn reuse ids
    s.add(Message.tool_result("call_0", "answer to the newer call"))
    view = s.prepare(format="internal").view
    assert toolpairs.validate(view, allow_pending_tail=False) == []
    assert len(stand_ins(view)) == 1  # the first call keeps its stand-in for good
    assert view[-1].text == "answer to the newer call"


def test_a_batch_may_abandon_and_answer_late_in_one_add() -> None:
    s = started()
    s.add([call("c1"), Message.user("hurry"), Message.tool_result("c1", "late but here")])
    view = s.prepare(format="internal").view
    assert toolpairs.validate(view) == [] and stand_ins(view) == []
    assert [m.role for m in view[-3:]] == ["assistant", "tool", "user"]


def test_abandoned_rounds_are_compacted_like_any_other() -> None:
    s = started(3000, config=CompactionConfig(keep_recent_rounds=1, clear_after_rounds=1))
    added = list(s.transcript)
    for i in range(12):
        new = [call(f"c{i}"), Message.tool_result(f"c{i}", make_text(2500, seed=i))] if i % 3 else [call(f"c{i}")]
        new.append(Message.user(f"next {i}"))
        s.add(new)
        added += new
        pv = s.prepare(format="internal")
        check_view(s, pv, added)
    assert s.status().compactions and not s.engine.has_open_calls()


# --- random interleavings ---------------------------------------------------------------------
Op = tuple[str, Any]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.integers(0, 3)),
        st.tuples(st.just("text"), st.integers(0, 3)),
        st.tuples(st.just("system"), st.integers(0, 3)),
        st.tuples(st.just("calls"), st.lists(st.sampled_from(["c0", "c1", "c2", "c3"]), min_size=1, max_size=3)),
        st.tuples(st.just("result"), st.tuples(st.sampled_from(["c0", "c1", "c2", "c3"]), st.integers(50, 1500))),
        st.tuples(st.just("prepare"), st.none()),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops, st.sampled_from([1500, 6000]))
def test_random_interleavings_with_abandoned_calls_always_give_valid_views(script: list[Op], window: int) -> None:
    s = started(window, config=CompactionConfig(keep_recent_rounds=1, clear_after_rounds=1))
    added = list(s.transcript)
    waiting: set[str] = set()  # the specification, independently of the engine
    abandoned: set[str] = set()
    for n, (kind, arg) in enumerate(script):
        batch: list[Message] = []
        if kind == "user":
            batch = [Message.user(f"request {n} for ORD-{arg}")]
        elif kind == "text":
            batch = [Message.assistant(f"thinking about step {n}")]
        elif kind == "system":
            batch = [Message.system(f"reminder {n}")]
        elif kind == "calls":
            ids = list(dict.fromkeys(arg))
            batch = [Message.assistant("", tool_calls=[ToolCall(call_id=c, name="f", arguments="{}") for c in ids])]
        elif kind == "result":
            cid, size = arg
            batch = [Message.tool_result(cid, make_text(size, seed=n))]
        else:
            pv = s.prepare(format="internal")
            check_view(s, pv, added)
            assert toolpairs.validate(pv.view) == []
            assert s.engine.has_open_calls() == bool(waiting)
            continue
        if kind == "result":
            cid = arg[0]
            if cid not in waiting | abandoned:
                with pytest.raises(ToolPairError):
                    s.add(batch)
                continue
            waiting.discard(cid)
            abandoned.discard(cid)
        else:
            abandoned |= waiting
            waiting = set()
            if kind == "calls":
                waiting = set(arg)
                abandoned -= waiting
        s.add(batch)
        added += batch
    pv = s.prepare(format="internal")
    check_view(s, pv, added)
    assert toolpairs.validate(pv.view) == []
    assert s.engine.has_open_calls() == bool(waiting)


# --- ids ------------------------------------------------------------------------------------------
def test_the_same_message_again_is_an_idempotent_skip() -> None:
    s = started()
    asked, answer = call("c1"), Message.tool_result("c1", "found it")
    s.add([asked, answer])
    assert s.add([asked, answer]) == 0
    assert s.add([{"role": "tool", "tool_call_id": "c1", "content": "found it", "id": answer.message_id}]) == 0
    assert len(s.transcript) == 4


def test_different_content_under_a_used_id_is_an_error_naming_both() -> None:
    s = started()
    first = Message.user("Check ORD-7 please.", message_id="m-42")
    s.add(first)
    with pytest.raises(MessageError) as info:
        s.add(Message.assistant("Done.", message_id="m-42"))
    assert info.value.field == "message_id" and info.value.index == 0
    text = str(info.value)
    assert "'m-42'" in text and "user 'Check ORD-7" in text and "assistant 'Done.'" in text
    assert s.transcript[-1] is first and len(s.transcript) == 3


def test_a_tool_result_under_a_used_id_is_refused_instead_of_lost() -> None:
    s = started()
    s.add(call("c1"))
    used = s.transcript[1].message_id  # the user request's id
    with pytest.raises(MessageError, match="already used"):
        s.add(Message.tool_result("c1", "the output", message_id=used))
    assert s.engine.has_open_calls()  # still waiting: the result was not dropped silently
    s.add(Message.tool_result("c1", "the output"))
    assert not s.engine.has_open_calls()


def test_two_different_messages_with_one_id_in_a_batch_are_refused() -> None:
    s = started()
    with pytest.raises(MessageError, match="already used"):
        s.add([Message.user("a", message_id="x"), Message.user("b", message_id="x")])
    assert len(s.transcript) == 2
    assert s.add([Message.user("a", message_id="x"), Message.user("a", message_id="x")]) == 1


def test_instructions_that_alone_pass_the_budget_are_refused_and_nothing_is_added() -> None:
    # system and developer messages are never compacted: ones that cannot fit would leave no view
    s = Session("ses_big_system", window=3000, reserved_output=400, counter="tiktoken:cl100k_base")
    s.add([Message.system("You are careful."), Message.user("hello")])
    before = [m.message_id for m in s.transcript]
    huge = Message(role="developer", parts=(TextPart(text="Always cite the ticket id. " * 600),))
    with pytest.raises(BudgetExceeded, match=r"with these system and developer messages .* budget is 2600"):
        s.add([Message.assistant("ok"), huge])
    assert [m.message_id for m in s.transcript] == before, "a refused batch adds nothing"
    s.add([Message.assistant("ok"), Message.user("next")])  # the session still serves views
    assert s.prepare(format="internal").status.used <= 2600


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"is_error": None}, "is_error"),
        ({"pinned": "yes"}, "pinned"),
        ({"turn": True}, "turn"),
        ({"turn": "3"}, "turn"),
        ({"created_at": float("nan")}, "created_at"),
        ({"snapshot_id": 7}, "snapshot_id"),
        ({"source_ids": ("msg_a", 3)}, "source_ids[1]"),
    ],
)
def test_bookkeeping_fields_a_store_could_not_read_back_are_refused(changes: dict[str, Any], field: str) -> None:
    s = started()
    before = len(s.transcript)
    bad = Message(role="user", parts=(TextPart(text="hi"),), **changes)
    with pytest.raises(MessageError) as caught:
        s.add([bad])
    assert caught.value.field == field and field.split("[")[0] in str(caught.value)
    assert len(s.transcript) == before

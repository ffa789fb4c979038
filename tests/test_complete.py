"""`Session.complete()` / `stream()` against a real local OpenAI-compatible server (scripted)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import pytest
from hypothesis import given, settings, strategies as st

from contextwarden import (
    BudgetExceeded,
    ContextOverflowError,
    Message,
    OverflowUnresolved,
    StreamInterrupted,
    ToolCall,
    toolpairs,
)
from contextwarden._replies import repair_reply
from contextwarden.adapters import to_messages
from contextwarden.events import Alert
from contextwarden.llm import AsyncOpenAIChatModel, ModelResponse, OpenAIChatModel, TestModel
from contextwarden.llm.base import ResponseDone, TextDelta
from contextwarden.messages import check_message
from contextwarden.session import AsyncSession, Session
from contextwarden.stores import open_store
from contextwarden.testing import ScriptedError, ScriptedOpenAIServer, ScriptedReply, ScriptedStream
from contextwarden.tokens import get_counter
from contextwarden.tokens.accountant import TokenAccountant


def _long_session(window: int = 3000) -> Session:
    s = Session("complete", window=window, reserved_output=0, counter="tiktoken:cl100k_base")
    s.add([Message.system("You are a test agent."), Message.user("task: find the bug in parser.py")])
    return s


def test_complete_appends_reply_and_records_usage() -> None:
    s = _long_session()
    with ScriptedOpenAIServer([ScriptedReply(text="looking now", prompt_tokens=40, completion_tokens=3)]) as server:
        with OpenAIChatModel("m", base_url=server.base_url) as model:
            reply = s.complete(model)
        sent = server.requests[0]["messages"]
    assert reply.text == "looking now"
    assert s.transcript[-1].role == "assistant" and s.transcript[-1].text == "looking now"
    assert [m["role"] for m in sent] == ["system", "user"]
    assert s.usage.requests == 1 and s.usage.input_tokens == 40
    assert s.accountant.calibration.samples == 1


def test_context_overflow_compacts_and_retries_once() -> None:
    s = _long_session(window=6000)
    for i in range(12):
        s.add(Message.user(f"step {i}: " + "details about the module layout " * 40))
        s.add(Message.assistant(f"ack {i}"))
    script = [ScriptedError.context_length_exceeded(limit=4000, requested=5500), ScriptedReply(text="done")]
    with ScriptedOpenAIServer(script) as server:
        with OpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model:
            reply = s.complete(model)
        first, second = server.requests[0]["messages"], server.requests[1]["messages"]
    assert reply.text == "done"
    assert len(second) < len(first)  # the retry sent a deeper-compacted view
    assert second[0]["role"] == "system"
    assert s.status().compactions  # a layer ran


def test_second_overflow_is_raised() -> None:
    s = _long_session()
    model = TestModel([ContextOverflowError("too long"), ContextOverflowError("still too long"), "never"])
    with pytest.raises(ContextOverflowError):
        s.complete(model)
    assert s.transcript[-1].role == "user"  # nothing appended


def test_stream_yields_events_and_appends_final_message() -> None:
    s = _long_session()
    with ScriptedOpenAIServer([ScriptedReply(text="streamed answer")]) as server:
        with OpenAIChatModel("m", base_url=server.base_url) as model:
            events = list(s.stream(model))
    assert isinstance(events[-1], ResponseDone)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "streamed answer"
    assert s.transcript[-1].text == "streamed answer"


@pytest.mark.anyio
async def test_async_complete_matches_sync() -> None:
    a = AsyncSession("complete", window=3000, reserved_output=0, counter="tiktoken:cl100k_base")
    a.add([Message.system("You are a test agent."), Message.user("task: find the bug in parser.py")])
    with ScriptedOpenAIServer([ScriptedReply(text="looking now")]) as server:
        async with AsyncOpenAIChatModel("m", base_url=server.base_url) as model:
            reply = await a.complete(model)
    assert reply.text == "looking now"
    assert [m.role for m in a.transcript] == ["system", "user", "assistant"]


# --- hardening against real servers --------------------------------------------------------------

COUNTER = "tiktoken:cl100k_base"


def server_counter(factor: float) -> Callable[[Mapping[str, Any]], int]:
    """How a server whose tokenizer yields ``factor`` × our count counts a request's prompt."""
    acc = TokenAccountant(get_counter(COUNTER))

    def count(body: Mapping[str, Any]) -> int:
        messages = to_messages(body["messages"], format="openai")
        return round(factor * (acc.count_messages(messages) + acc.count_tools(body.get("tools") or [])))

    return count


def big_session(window: int = 8192, reserved_output: int = 1024, rounds: int = 8, **kwargs: Any) -> Session:
    """About 3,000 tokens of finished work: fits 8,192 easily, not a server with n_ctx=2048."""
    s = Session("big", window=window, reserved_output=reserved_output, counter=COUNTER, **kwargs)
    s.add([Message.system("You are a test agent."), Message.user("task: audit the parser")])
    for i in range(rounds):
        s.add(Message.assistant(f"step {i}: read module m{i}.py " + "details of the module layout " * 60))
        s.add(Message.user(f"go on with step {i + 1}"))
    return s


def alerts(s: Session) -> list[Alert]:
    seen: list[Alert] = []
    s.subscribe(lambda e: seen.append(e) if isinstance(e, Alert) else None)
    return seen


def test_complete_sends_the_reserved_output_as_max_tokens() -> None:
    with ScriptedOpenAIServer(default="ok") as server, OpenAIChatModel("m", base_url=server.base_url) as model:
        _long_session(window=3000).complete(model)  # reserved_output=0: no limit to send
        s = Session("r", window=4000, reserved_output=700, counter=COUNTER)
        s.add(Message.user("hi"))
        s.complete(model)
        s.complete(model, max_tokens=77)
        unlimited = Session("u", window=4000, reserved_output=700, counter=COUNTER, max_tokens=None)
        unlimited.add(Message.user("hi"))
        unlimited.complete(model)
        fixed = Session("f", window=4000, reserved_output=700, counter=COUNTER, max_tokens=300)
        fixed.add(Message.user("hi"))
        list(fixed.stream(model))
        sent = [body.get("max_tokens") for body in server.requests]
    assert sent == [None, 700, 77, None, 300]


def test_a_server_window_smaller_than_configured_is_adopted_announced_and_kept() -> None:
    store = open_store("memory://")
    s = big_session(store=store)
    seen = alerts(s)
    assert s.status().used > 2048
    count = server_counter(1.0)
    with ScriptedOpenAIServer.llama_cpp_python(n_ctx=2048, count_tokens=count, default="ok") as server:
        with OpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model:
            reply = s.complete(model)
            status = s.status()
            assert reply.text == "ok" and len(server.requests) == 2  # refused once, then answered
            assert status.window == 2048 and status.served_window == 2048
            assert s.budget.reserved_output == 512 and server.requests[1]["max_tokens"] == 512
            assert [a.alert for a in seen] == ["served-window"] and "2048" in seen[0].detail
            assert count(server.requests[1]) + 512 <= 2048
            for i in range(12):  # the session stays inside the served window from now on
                s.add(Message.user(f"next {i}: " + "more details about the parser " * 30))
                s.complete(model)
            assert len(server.requests) == 2 + 12
            assert all(count(body) + 512 <= 2048 for body in server.requests[1:])
    # the adopted window is part of the saved state: a restarted session starts with it
    again = Session("big", window=8192, reserved_output=1024, counter=COUNTER, store=store)
    assert again.status().window == 2048 and again.budget.reserved_output == 512


def test_a_view_emergency_compaction_cannot_shrink_is_not_sent_again() -> None:
    s = Session("stuck", window=4000, reserved_output=0, counter=COUNTER)
    s.add([Message.system("You are a test agent."), Message.user("review: " + "a long pasted file " * 500)])
    script = [ScriptedError.context_length_exceeded(limit=4000, requested=4200)] * 2
    with ScriptedOpenAIServer(script) as server, OpenAIChatModel("m", base_url=server.base_url) as model:
        with pytest.raises(OverflowUnresolved) as caught:
            s.complete(model)
        assert len(server.requests) == 1  # the same view was not resent
    assert caught.value.limit == 4000 and caught.value.view_tokens == s.status().used
    assert "could not make the view any smaller" in str(caught.value)
    assert s.transcript[-1].role == "user"


def test_calibration_is_applied_to_status_triggers_and_budget() -> None:
    s = Session("cal", window=3000, reserved_output=0, counter=COUNTER)
    s.add([Message.system("You are a test agent."), Message.user("task: summarize the logs")])
    count = server_counter(1.3)  # the model's tokenizer makes 30% more tokens of the same text than ours
    with ScriptedOpenAIServer(default="noted", count_tokens=count) as server:
        with OpenAIChatModel("m", base_url=server.base_url) as model:
            for turn in range(2):
                s.complete(model)
                s.add(Message.user(f"log {turn}: " + "service restarted after timeout " * 12))
            assert s.status().calibration == 1.0  # two samples: not applied yet
            s.complete(model)
            status = s.status()
            assert status.calibration == pytest.approx(1.3, abs=0.02) and s.accountant.calibration.samples == 3
            assert status.used == s.budget.calibrated(status.used_raw) > status.used_raw
            assert s.budget.effective == int(3000 / status.calibration) and status.budget == 3000
            for turn in range(2, 40):
                s.add(Message.user(f"log {turn}: " + "service restarted after timeout " * 12))
                s.complete(model)
            prompts = [count(body) for body in server.requests]
    assert s.status().compactions  # compaction ran on calibrated counts
    # raw counts alone would have let the view grow to 3000 counted = 3900 real tokens
    assert max(prompts[3:]) <= 3000, max(prompts[3:])


def test_usage_a_stream_did_not_report_is_not_counted_as_zero() -> None:
    s = _long_session()
    with ScriptedOpenAIServer.llama_cpp_python(default="fine") as server:
        with OpenAIChatModel("m", base_url=server.base_url) as model:
            events = list(s.stream(model))
            s.complete(model)
    done = events[-1]
    assert isinstance(done, ResponseDone) and done.response.usage.reported is False
    assert s.usage.unreported == 1 and s.usage.requests == 1  # the plain request reported usage
    # one sample from the server's count of the streamed request, one from the plain request's usage
    assert s.accountant.calibration.samples == 2 and s.served_counts.taken == 1


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_stream_against_a_server_that_answers_overflow_with_an_empty_stream(twin: str) -> None:
    count = server_counter(1.0)
    with ScriptedOpenAIServer.llama_cpp_python(n_ctx=2048, count_tokens=count, default="streamed ok") as server:
        if twin == "sync":
            s: Any = big_session()
            with OpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model:
                events = list(s.stream(model))
        else:
            s = AsyncSession("big", window=8192, reserved_output=1024, counter=COUNTER)
            s.add(big_session().transcript)

            async def run() -> list[Any]:
                async with AsyncOpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model:
                    return [e async for e in s.stream(model)]

            events = anyio.run(run)
        streamed = [bool(body.get("stream")) for body in server.requests]
    # empty stream, then the same request without streaming (the real error), then the compacted view
    assert streamed == [True, False, True]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "streamed ok"
    assert s.transcript[-1].text == "streamed ok" and s.status().served_window == 2048


def test_an_empty_stream_answered_without_streaming_is_replayed() -> None:
    s = _long_session()
    with ScriptedOpenAIServer([ScriptedStream(done=False), "the answer"]) as server:
        with OpenAIChatModel("m", base_url=server.base_url) as model:
            events = list(s.stream(model))
        assert [bool(b.get("stream")) for b in server.requests] == [True, False]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "the answer"
    assert isinstance(events[-1], ResponseDone) and s.transcript[-1].text == "the answer"


def test_an_empty_stream_for_a_view_smaller_than_one_answered_is_raised() -> None:
    s = big_session()
    with ScriptedOpenAIServer(["first", ScriptedStream(done=False)]) as server:
        with OpenAIChatModel("m", base_url=server.base_url) as model:
            s.complete(model)
            s.add(Message.user("and now?"))
            s.on_context_overflow()  # the view shrinks below the one the server answered
            with pytest.raises(StreamInterrupted):
                list(s.stream(model))
        assert len(server.requests) == 2  # a transient failure: no second request


CUT = '{"path": "src/parser.py", "content": "def parse(tokens):\\n    for t in tok'


def _check_kept_invalid_call(s: Any, reply: ModelResponse) -> None:
    assert reply.tool_calls == () and reply.invalid_tool_calls[0].arguments == CUT
    call_msg, result = s.transcript[-2:]
    assert call_msg.tool_calls[0].arguments == "{}"
    kept = call_msg.extra["contextwarden"]["invalid_tool_calls"][0]
    assert kept["arguments"] == CUT and kept["call_id"] == "call_w"
    assert result.role == "tool" and result.is_error and result.tool_call_id == "call_w"
    assert "not valid JSON" in result.text and "length limit" in result.text
    assert not s.engine.has_open_calls()


@pytest.mark.parametrize("twin", ["sync", "async"])
@pytest.mark.parametrize("streamed", [False, True])
def test_a_reply_with_cut_off_tool_arguments_is_kept(twin: str, streamed: bool) -> None:
    cut = ScriptedReply(
        tool_calls=[ToolCall(call_id="call_w", name="write_file", arguments=CUT)], finish_reason="length"
    )
    with ScriptedOpenAIServer([cut, "retrying the write"]) as server:
        if twin == "sync":
            s: Any = _long_session()
            with OpenAIChatModel("m", base_url=server.base_url) as model:
                reply = list(s.stream(model))[-1].response if streamed else s.complete(model)
                _check_kept_invalid_call(s, reply)
                s.complete(model)
        else:
            s = AsyncSession("complete", window=3000, reserved_output=0, counter=COUNTER)
            s.add([Message.system("You are a test agent."), Message.user("task: find the bug in parser.py")])

            async def run() -> None:
                async with AsyncOpenAIChatModel("m", base_url=server.base_url) as model:
                    if streamed:
                        reply = [e async for e in s.stream(model)][-1].response
                    else:
                        reply = await s.complete(model)
                    _check_kept_invalid_call(s, reply)
                    await s.complete(model)

            anyio.run(run)
        resent = server.requests[1]["messages"]
    # the model sees its call and an error it can react to
    assert resent[-2]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert resent[-1]["role"] == "tool" and "call the tool again" in resent[-1]["content"].lower()
    assert s.transcript[-1].text == "retrying the write"


_ARGUMENTS = st.one_of(
    st.text(max_size=40),
    st.builds(lambda d, n: json.dumps(d)[:n], st.dictionaries(st.text(max_size=5), st.integers()), st.integers(0, 30)),
    st.sampled_from(["", "{}", "[1]", "3", "null", '{"a": 1}', '{"a": ', "{'a': 1}"]),
)


@settings(max_examples=200, deadline=None)
@given(arguments=st.lists(_ARGUMENTS, min_size=1, max_size=4), text=st.text(max_size=20))
def test_repaired_replies_are_valid_messages_that_keep_what_the_model_wrote(arguments: list[str], text: str) -> None:
    calls = [ToolCall(call_id=f"call_{i}", name=f"tool{i}", arguments=a) for i, a in enumerate(arguments)]
    response = ModelResponse(message=Message.assistant(text, tool_calls=calls), finish_reason="length")
    kept, messages = repair_reply(response)
    for i, m in enumerate(messages):
        check_message(m, index=i)
    assert toolpairs.validate([Message.user("go"), *messages]) == []
    invalid = {c.call_id: c for c in kept.invalid_tool_calls}
    assert [m.tool_call_id for m in messages[1:]] == list(invalid)  # one error result per bad call, in order
    for original, repaired in zip(calls, messages[0].tool_calls, strict=True):
        if original.call_id in invalid:
            assert repaired.arguments == "{}" and invalid[original.call_id].arguments == original.arguments
        else:
            assert repaired == original and json.loads(original.arguments or "{}").__class__ is dict
    assert [c.call_id for c in kept.tool_calls] == [c.call_id for c in calls if c.call_id not in invalid]
    assert messages[0].text == response.message.text


def test_async_complete_adopts_the_served_window_and_refuses_to_resend() -> None:
    s = AsyncSession("big", window=8192, reserved_output=1024, counter=COUNTER)
    s.add(big_session().transcript)
    stuck = AsyncSession("stuck", window=4000, reserved_output=0, counter=COUNTER)
    stuck.add([Message.system("You are a test agent."), Message.user("review: " + "a long pasted file " * 500)])
    tiny = AsyncSession("tiny", window=8192, reserved_output=0, counter=COUNTER)
    tiny.add([Message.system("You are a test agent."), Message.user("review: " + "a long pasted file " * 500)])

    async def run(url: str, session: AsyncSession) -> Any:
        async with AsyncOpenAIChatModel("m", base_url=url, max_retries=0) as model:
            return await session.complete(model)

    with ScriptedOpenAIServer.llama_cpp_python(n_ctx=2048, count_tokens=server_counter(1.0), default="ok") as server:
        assert anyio.run(run, server.base_url, s).text == "ok"
        assert len(server.requests) == 2 and s.status().window == 2048 == s.status().served_window
        # the part compaction may not touch does not fit the served window: said at once, not resent
        with pytest.raises(BudgetExceeded, match="protected part"):
            anyio.run(run, server.base_url, tiny)
        assert len(server.requests) == 3
    with ScriptedOpenAIServer([ScriptedError.context_length_exceeded(limit=4000)] * 2) as server:
        with pytest.raises(OverflowUnresolved):
            anyio.run(run, server.base_url, stuck)
        assert len(server.requests) == 1


def test_a_loop_of_its_own_passes_the_error_to_on_context_overflow() -> None:
    s = big_session()
    seen = alerts(s)
    error = ContextOverflowError("too long", limit=2048, requested=3300)
    view = s.on_context_overflow(format="internal", error=error)
    assert s.status().window == 2048 and [a.alert for a in seen] == ["served-window"]
    assert view.status.used + s.budget.reserved_output <= 2048


def _raw_reply(message: dict[str, Any], finish: str = "tool_calls") -> ScriptedError:
    body = {"id": "c", "model": "m", "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    return ScriptedError(status=200, body=json.dumps(body))


def test_a_reply_add_would_refuse_is_still_kept() -> None:
    def call(call_id: str, arguments: str) -> dict[str, Any]:
        return {"id": call_id, "type": "function", "function": {"name": "ls", "arguments": arguments}}

    deep = "[" * 300 + "]" * 300
    replies = [
        # two calls sharing an id: the second gets a fresh one
        _raw_reply({"role": "assistant", "content": None, "tool_calls": [call("call_1", "{}"), call("call_1", "{}")]}),
        # an escaped half surrogate in the text and in the arguments, arguments nested 300 deep
        _raw_reply(
            {
                "role": "assistant",
                "content": "done \ud83d",
                "tool_calls": [call("call_2", '{"p": "\\ud83d"}'), call("call_3", '{"a": ' + deep + "}")],
            }
        ),
    ]
    s = _long_session()
    with ScriptedOpenAIServer(replies) as server, OpenAIChatModel("m", base_url=server.base_url) as model:
        first = s.complete(model)
        ids = [c.call_id for c in first.tool_calls]
        assert len(set(ids)) == 2 and ids[0] == "call_1"
        assert s.transcript[-1].extra["contextwarden"]["renamed_call_ids"] == {ids[1]: "call_1"}
        for c in first.tool_calls:
            s.on_tool_result("ls", "a.py", call_id=c.call_id)
        second = s.complete(model)
    assert second.text == "done \ufffd" and second.tool_calls == ()
    problems = [c.error for c in second.invalid_tool_calls]
    assert "lone surrogate" in problems[0] and "deeper than" in problems[1]
    assert not s.engine.has_open_calls() and toolpairs.validate(s.transcript) == []

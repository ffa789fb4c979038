"""`Session.complete()` / `stream()` against a real local OpenAI-compatible server (scripted)."""

from __future__ import annotations

import pytest

from contextkeeper import ContextOverflowError, Message
from contextkeeper.llm import AsyncOpenAIChatModel, OpenAIChatModel, TestModel
from contextkeeper.llm.base import ResponseDone, TextDelta
from contextkeeper.session import AsyncSession, Session
from contextkeeper.testing import ScriptedError, ScriptedOpenAIServer, ScriptedReply


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

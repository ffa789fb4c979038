"""TestModel and FunctionModel (and their async twins) behave like a real model would."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from contextwarden.exceptions import ContextOverflowError, UpstreamError, UsageError
from contextwarden.llm import (
    AsyncFunctionModel,
    AsyncTestModel,
    FunctionModel,
    ModelResponse,
    RecordedRequest,
    ResponseDone,
    TestModel,
    TextDelta,
    ToolCallDelta,
)
from contextwarden.llm.test import estimate_tokens
from contextwarden.messages import Message, ToolCall
from contextwarden.usage import RequestUsage

pytestmark = pytest.mark.anyio

CALL = ToolCall(call_id="c1", name="run_tests", arguments='{"path": "tests/"}')


@pytest.fixture
def scripted(mode: str, drivers: Callable[[Any], Any]) -> Callable[..., Any]:
    def make(*args: Any, **kwargs: Any) -> Any:
        return drivers((TestModel if mode == "sync" else AsyncTestModel)(*args, **kwargs))

    return make


@pytest.fixture
def function_model(mode: str, drivers: Callable[[Any], Any]) -> Callable[..., Any]:
    def make(*args: Any, **kwargs: Any) -> Any:
        return drivers((FunctionModel if mode == "sync" else AsyncFunctionModel)(*args, **kwargs))

    return make


async def test_replies_in_order_with_errors_in_between(scripted: Callable[..., Any]) -> None:
    fixed = ModelResponse(message=Message.assistant("fixed"), usage=RequestUsage(input_tokens=99, output_tokens=1))
    model = scripted(
        ["first", Message.assistant("", tool_calls=[CALL]), UpstreamError("boom", url="x", status_code=503), fixed]
    )
    first = await model.request([Message.user("hello")])
    assert first.text == "first" and first.finish_reason == "stop"
    second = await model.request([Message.user("again")])
    assert second.tool_calls == (CALL,) and second.finish_reason == "tool_calls"
    with pytest.raises(UpstreamError, match="boom"):
        await model.request([Message.user("third")])
    assert await model.request([Message.user("fourth")]) is fixed
    with pytest.raises(UsageError, match="no scripted reply left for request 5"):
        await model.request([Message.user("fifth")])
    assert [r.messages[0].text for r in model.model.requests] == ["hello", "again", "third", "fourth", "fifth"]
    assert model.model.usage.requests == 3
    assert model.model.usage.input_tokens == first.usage.input_tokens + second.usage.input_tokens + 99


async def test_an_exception_class_in_the_script_is_raised(scripted: Callable[..., Any]) -> None:
    model = scripted([TimeoutError])
    with pytest.raises(TimeoutError):
        await model.request([Message.user("x")])


async def test_cycle_and_default(scripted: Callable[..., Any]) -> None:
    cycling = scripted(["a", "b"], cycle=True)
    assert [(await cycling.request([Message.user("x")])).text for _ in range(5)] == ["a", "b", "a", "b", "a"]
    default = scripted()
    assert [(await default.request([Message.user("x")])).text for _ in range(3)] == ["ok", "ok", "ok"]


async def test_usage_is_estimated_from_characters(scripted: Callable[..., Any]) -> None:
    messages = [Message.system("s" * 40), Message.user("u" * 400)]
    response = await scripted(["r" * 80]).request(messages)
    # 4 characters per token rounded up (role included), plus 4 tokens of framing per message.
    assert response.usage.input_tokens == (46 // 4 + 1 + 4) + (404 // 4 + 4)
    assert response.usage.input_tokens == estimate_tokens(messages)
    assert response.usage.output_tokens == -(-(80 + len("assistant")) // 4) + 4


async def test_the_request_is_recorded(scripted: Callable[..., Any]) -> None:
    model = scripted(["ok"])
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    await model.request([Message.user("x")], tools=tools, max_tokens=10, temperature=0.5)
    recorded = model.model.requests[0]
    assert recorded == RecordedRequest(
        messages=(model.model.requests[0].messages[0],),
        tools=tuple(tools),
        max_tokens=10,
        temperature=0.5,
        stream=False,
    )


async def test_context_window_raises_overflow_like_a_provider(scripted: Callable[..., Any]) -> None:
    model = scripted(["fits"], context_window=50)
    with pytest.raises(ContextOverflowError) as info:
        await model.request([Message.user("x" * 400)])
    assert info.value.limit == 50 and info.value.requested == estimate_tokens([Message.user("x" * 400)])
    assert (await model.request([Message.user("short")])).text == "fits"


async def test_stream_gives_word_deltas_calls_and_the_response(scripted: Callable[..., Any]) -> None:
    model = scripted([Message.assistant("Running the tests now", tool_calls=[CALL])])
    events = await model.stream([Message.user("x")])
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Running ", "the ", "tests ", "now"]
    assert [e for e in events if isinstance(e, ToolCallDelta)] == [
        ToolCallDelta(index=0, call_id="c1", name="run_tests", arguments_delta='{"path": "tests/"}')
    ]
    assert isinstance(events[-1], ResponseDone) and events[-1].response.tool_calls == (CALL,)
    assert model.model.requests[0].stream is True


async def test_delay(scripted: Callable[..., Any]) -> None:
    model = scripted(["slow"], delay=0.2)
    started = time.monotonic()
    await model.request([Message.user("x")])
    assert time.monotonic() - started >= 0.2


async def test_a_reply_in_the_wrong_role_is_refused(scripted: Callable[..., Any]) -> None:
    with pytest.raises(UsageError, match="assistant"):
        await scripted([Message.user("not a reply")]).request([Message.user("x")])


async def test_function_model_computes_replies(function_model: Callable[..., Any]) -> None:
    def echo(messages: Sequence[Message], request: RecordedRequest) -> str:
        return f"{len(messages)} messages, last: {messages[-1].text}, max_tokens={request.max_tokens}"

    model = function_model(echo)
    response = await model.request([Message.system("s"), Message.user("hello")], max_tokens=7)
    assert response.text == "2 messages, last: hello, max_tokens=7"
    events = await model.stream([Message.user("streamed")])
    assert events[-1].response.text == "1 messages, last: streamed, max_tokens=None"
    assert model.model.usage.requests == 2


async def test_function_model_errors_propagate(function_model: Callable[..., Any]) -> None:
    def fail(messages: Sequence[Message], request: RecordedRequest) -> str:
        raise ContextOverflowError("too long", limit=1, requested=2)

    with pytest.raises(ContextOverflowError):
        await function_model(fail).request([Message.user("x")])


async def test_async_function_model_awaits_coroutines() -> None:
    async def reply(messages: Sequence[Message], request: RecordedRequest) -> Message:
        return Message.assistant("async reply")

    assert (await AsyncFunctionModel(reply).request([Message.user("x")])).text == "async reply"


def test_pytest_does_not_collect_test_model() -> None:
    assert TestModel.__test__ is False

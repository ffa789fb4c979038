"""The Anthropic Messages client over real HTTP against the scripted server's /v1/messages, sync and async."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from contextwarden.exceptions import ContextOverflowError, StreamInterrupted
from contextwarden.llm import (
    AnthropicModel,
    AsyncAnthropicModel,
    ResponseDone,
    RetryPolicy,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
)
from contextwarden.messages import ImagePart, Message, TextPart, ThinkingPart, ToolCall
from contextwarden.testing import ScriptedError, ScriptedOpenAIServer, ScriptedReply

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.01, jitter=0)
READ = ToolCall(call_id="toolu_01", name="read_file", arguments='{"path": "src/app/main.py"}')
GREP = ToolCall(call_id="toolu_02", name="grep", arguments='{"pattern": "TODO"}')


@pytest.fixture
def make_model(mode: str, server: ScriptedOpenAIServer, drivers: Callable[[Any], Any]) -> Callable[..., Any]:
    """``make_model(**options)``: a driven Anthropic client (sync or async) pointed at the server."""

    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("base_url", server.url)
        kwargs.setdefault("retry", FAST)
        kwargs.setdefault("api_key", "sk-ant-test")
        cls = AnthropicModel if mode == "sync" else AsyncAnthropicModel
        return drivers(cls("claude-sonnet-4-5", **kwargs))

    return make


async def test_text_reply_headers_and_usage(make_model: Callable[..., Any], server: ScriptedOpenAIServer) -> None:
    server.push(ScriptedReply(text="Hello.", prompt_tokens=1200, completion_tokens=3, cached_tokens=1000))
    response = await make_model(headers={"anthropic-beta": "test-beta"}).request(
        [Message.system("Be brief."), Message.user("Hi")], temperature=0.0
    )
    assert response.text == "Hello."
    assert response.finish_reason == "stop" and response.provider_finish_reason == "end_turn"
    # Anthropic reports 200 uncached + 1000 cached; the library's input counts both.
    assert response.usage.input_tokens == 1200
    assert response.usage.cache_read_tokens == 1000 and response.usage.output_tokens == 3
    assert response.raw["usage"]["input_tokens"] == 200
    request = server.received[0]
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["anthropic-beta"] == "test-beta"
    assert "authorization" not in request.headers
    body = server.requests[0]
    assert body["system"] == "Be brief."
    assert body["max_tokens"] == 4096 and body["temperature"] == 0.0
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]


async def test_tool_use_tool_result_thinking_and_images_are_converted(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    server.push("done")
    thinking = ThinkingPart(text="I should read both.", signature="sig-abc")
    image = ImagePart(url="data:image/jpeg;base64,/9j/4AAQ", media_type="image/jpeg")
    messages = [
        Message.system("You are a coding agent."),
        Message(role="user", parts=(TextPart(text="Look at this"), image)),
        Message(role="assistant", parts=(thinking, TextPart(text="Reading."), READ, GREP)),
        Message.tool_result("toolu_01", "import app"),
        Message.tool_result("toolu_02", "grep: src/: No such file", is_error=True),
        Message.user("And now?"),
        Message(role="developer", parts=(TextPart(text="Answer in English."),)),
    ]
    await make_model().request(messages)
    body = server.requests[0]
    assert body["system"] == "You are a coding agent.\n\nAnswer in English."
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look at this"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should read both.", "signature": "sig-abc"},
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {"path": "src/app/main.py"}},
                {"type": "tool_use", "id": "toolu_02", "name": "grep", "input": {"pattern": "TODO"}},
            ],
        },
        {
            # Both results of the turn travel in one user turn, followed by the user's text.
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": "import app"}]},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_02",
                    "content": [{"type": "text", "text": "grep: src/: No such file"}],
                    "is_error": True,
                },
                {"type": "text", "text": "And now?"},
            ],
        },
    ]


async def test_thinking_without_a_signature_is_not_sent(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    server.push("ok")
    other_provider = Message(role="assistant", parts=(ThinkingPart(text="from another model"), TextPart(text="Hi")))
    await make_model().request([Message.user("a"), other_provider, Message.user("b")])
    assert server.requests[0]["messages"][1] == {"role": "assistant", "content": [{"type": "text", "text": "Hi"}]}


async def test_tools_and_thinking_settings(make_model: Callable[..., Any], server: ScriptedOpenAIServer) -> None:
    server.push("ok")
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    tools = [
        {"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": schema}},
        {"name": "ls", "input_schema": schema},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
    ]
    thinking = {"type": "enabled", "budget_tokens": 2048}
    await make_model(thinking=thinking, max_tokens=8000).request([Message.user("go")], tools=tools)
    body = server.requests[0]
    assert body["tools"] == [
        {"name": "read_file", "input_schema": schema, "description": "Read a file."},
        tools[1],
        tools[2],
    ]
    assert body["thinking"] == thinking and body["max_tokens"] == 8000


async def test_tool_calls_and_thinking_in_the_reply(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    server.push(ScriptedReply(text="Reading.", tool_calls=[READ, GREP], reasoning="Two files."))
    response = await make_model().request([Message.user("go")])
    assert response.finish_reason == "tool_calls" and response.provider_finish_reason == "tool_use"
    assert response.message.parts[0] == ThinkingPart(text="Two files.", signature="scripted-signature")
    assert response.text == "Reading."
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("toolu_01", "read_file", {"path": "src/app/main.py"}),
        ("toolu_02", "grep", {"pattern": "TODO"}),
    ]


async def test_stream_assembles_thinking_text_and_tool_use(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    reply = ScriptedReply(
        text="Reading the two files now.", tool_calls=[READ, GREP], reasoning="Plan first.", prompt_tokens=900
    )
    server.push(reply, reply)
    model = make_model()
    events = await model.stream([Message.user("go")])
    whole = await model.request([Message.user("go")])

    assert isinstance(events[-1], ResponseDone)
    response = events[-1].response
    assert response.message.parts == whole.message.parts
    assert response.message.parts[0] == ThinkingPart(text="Plan first.", signature="scripted-signature")
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Reading the two files now."
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "Plan first."
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [(d.index, d.call_id, d.name) for d in deltas if d.call_id] == [
        (0, "toolu_01", "read_file"),
        (1, "toolu_02", "grep"),
    ]
    for index, call in enumerate([READ, GREP]):
        assert json.loads("".join(d.arguments_delta for d in deltas if d.index == index)) == json.loads(call.arguments)
    assert response.usage.input_tokens == 900 and response.usage.output_tokens == whole.usage.output_tokens
    assert response.finish_reason == "tool_calls"
    assert server.requests[0]["stream"] is True


async def test_prompt_too_long(make_model: Callable[..., Any], server: ScriptedOpenAIServer) -> None:
    server.push(ScriptedError.context_length_exceeded(limit=200000, requested=209303), "not reached")
    with pytest.raises(ContextOverflowError) as info:
        await make_model().request([Message.user("long")])
    assert (info.value.limit, info.value.requested, info.value.status_code) == (200000, 209303, 400)
    assert info.value.url == f"{server.url}/v1/messages"
    assert len(server.requests) == 1


async def test_prompt_too_long_as_a_stream_error_event(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    server.push(ScriptedError.context_length_exceeded(limit=200000, requested=200001, in_stream=True))
    _, error = await make_model().stream_until_error([Message.user("long")])
    assert isinstance(error, ContextOverflowError) and (error.limit, error.requested) == (200000, 200001)


async def test_overloaded_529_is_retried(make_model: Callable[..., Any], server: ScriptedOpenAIServer) -> None:
    server.push(ScriptedError(status=529, message="Overloaded"), "recovered")
    assert (await make_model().request([Message.user("go")])).text == "recovered"
    assert len(server.requests) == 2


async def test_stream_cut_before_message_stop(make_model: Callable[..., Any], server: ScriptedOpenAIServer) -> None:
    server.push(ScriptedReply(text="one two three four five", disconnect_after=5))
    events, error = await make_model().stream_until_error([Message.user("go")])
    # a stream cut short is its own kind of upstream error (Session.stream reacts to it)
    assert type(error) is StreamInterrupted and "closed the connection" in str(error)
    assert any(isinstance(e, TextDelta) for e in events)

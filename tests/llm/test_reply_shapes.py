"""Replies of the wrong shape raise `UpstreamError` naming the field, never a raw Python error.

Every body and stream goes over real HTTP from the scripted server, to the sync and the async
client alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from contextwarden.exceptions import UpstreamError
from contextwarden.llm import AnthropicModel, AsyncAnthropicModel, AsyncOpenAIChatModel, OpenAIChatModel, RetryPolicy
from contextwarden.messages import Message
from contextwarden.testing import ScriptedError, ScriptedOpenAIServer, ScriptedStream

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(max_retries=0)


@pytest.fixture
def make_model(mode: str, server: ScriptedOpenAIServer, drivers: Callable[[Any], Any]) -> Callable[..., Any]:
    def make(api: str = "openai") -> Any:
        if api == "openai":
            cls: Any = OpenAIChatModel if mode == "sync" else AsyncOpenAIChatModel
            return drivers(cls("m", base_url=server.base_url, retry=FAST))
        cls = AnthropicModel if mode == "sync" else AsyncAnthropicModel
        return drivers(cls("m", base_url=server.url, retry=FAST))

    return make


def _reply(message: Any = None, **top: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "x",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }
    body.update(top)
    return body


def _msg(**fields: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, **fields}


def _call(**function: Any) -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}", **function}}


OPENAI_BODIES = [
    (_reply(_msg(tool_calls="x")), "choices[0].message.tool_calls"),
    (_reply(_msg(tool_calls={"a": 1})), "choices[0].message.tool_calls"),
    (_reply(_msg(tool_calls=["x"])), "choices[0].message.tool_calls[0]"),
    (_reply(_msg(tool_calls=[{"id": "c", "function": "ls"}])), "choices[0].message.tool_calls[0].function"),
    (_reply(_msg(tool_calls=[_call(name=None)])), "choices[0].message.tool_calls[0].function.name"),
    (_reply(_msg(tool_calls=[_call(name=7)])), "choices[0].message.tool_calls[0].function.name"),
    (_reply(_msg(tool_calls=[_call(arguments=5)])), "choices[0].message.tool_calls[0].function.arguments"),
    (_reply(_msg(tool_calls=[_call(arguments=["a"])])), "choices[0].message.tool_calls[0].function.arguments"),
    (_reply(_msg(tool_calls=[{**_call(), "id": {"x": 1}}])), "choices[0].message.tool_calls[0].id"),
    (_reply(_msg(content=12)), "choices[0].message.content"),
    (_reply(_msg(content=[{"type": "text", "text": 3}])), "choices[0].message.content[0].text"),
    (_reply("hello"), "choices[0].message"),
    ({"id": "x", "choices": "abc"}, "choices"),
    ({"id": "x", "choices": {"0": {}}}, "choices"),
    ({"id": "x", "choices": [7]}, "choices[0]"),
    ({**_reply(_msg(content="hi")), "usage": "many"}, "usage"),
    (
        {"id": "x", "choices": [{"index": 0, "message": _msg(content="hi"), "finish_reason": 1}]},
        "choices[0].finish_reason",
    ),
]


@pytest.mark.parametrize(("body", "field"), OPENAI_BODIES)
async def test_openai_reply_of_the_wrong_shape_names_the_field(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer, body: Any, field: str
) -> None:
    server.push(ScriptedError(status=200, body=json.dumps(body)))
    with pytest.raises(UpstreamError) as caught:
        await make_model().request([Message.user("go")])
    assert type(caught.value) is UpstreamError
    assert f"`{field}`" in str(caught.value) and server.base_url in str(caught.value)


def _chunk(delta: Any = None, **choice: Any) -> dict[str, Any]:
    return {"id": "x", "model": "m", "choices": [{"index": 0, "delta": delta, **choice}]}


OPENAI_CHUNKS = [
    ([_chunk({"tool_calls": "x"})], "choices[0].delta.tool_calls"),
    ([_chunk({"tool_calls": [5]})], "choices[0].delta.tool_calls[0]"),
    ([_chunk({"tool_calls": [{"index": "one", "function": {"name": "ls"}}]})], "choices[0].delta.tool_calls[0].index"),
    ([_chunk({"tool_calls": [{"index": 0, "function": "ls"}]})], "choices[0].delta.tool_calls[0].function"),
    (
        [_chunk({"tool_calls": [{"index": 0, "function": {"name": "ls", "arguments": 3}}]})],
        "choices[0].delta.tool_calls[0].function.arguments",
    ),
    ([_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, finish_reason="tool_calls")], "name"),
    ([_chunk({"content": {"text": "hi"}})], "choices[0].delta.content"),
    ([_chunk("delta")], "choices[0].delta"),
    ([{"id": "x", "choices": "abc"}], "choices"),
    ([{"id": "x", "choices": ["abc"]}], "choices[0]"),
    ([_chunk({"content": "hi"}, finish_reason=["stop"])], "choices[0].finish_reason"),
    ([_chunk({"content": "hi"}), {"id": "x", "choices": [], "usage": [1, 2]}], "usage"),
    ([[1, 2, 3]], "chunk"),
    (["7"], "chunk"),
]


@pytest.mark.parametrize(("events", "field"), OPENAI_CHUNKS)
async def test_openai_stream_chunk_of_the_wrong_shape_names_the_field(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer, events: list[Any], field: str
) -> None:
    server.push(ScriptedStream(events=events))
    with pytest.raises(UpstreamError) as caught:
        await make_model().stream([Message.user("go")])
    assert type(caught.value) is UpstreamError
    assert field in str(caught.value)


ANTHROPIC_BODIES = [
    ({"type": "message", "content": ["hi"]}, "content[0]"),
    ({"type": "message", "content": [{"type": "text", "text": 5}]}, "content[0].text"),
    ({"type": "message", "content": [{"type": "tool_use", "id": "t", "input": {}}]}, "content[0].name"),
    ({"type": "message", "content": [{"type": "tool_use", "id": "t", "name": "ls", "input": "x"}]}, "content[0].input"),
    ({"type": "message", "content": [], "stop_reason": 3}, "stop_reason"),
    ({"type": "message", "content": [], "usage": "lots"}, "usage"),
]


@pytest.mark.parametrize(("body", "field"), ANTHROPIC_BODIES)
async def test_anthropic_reply_of_the_wrong_shape_names_the_field(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer, body: Any, field: str
) -> None:
    server.push(ScriptedError(status=200, body=json.dumps(body)))
    with pytest.raises(UpstreamError) as caught:
        await make_model("anthropic").request([Message.user("go")])
    assert type(caught.value) is UpstreamError and f"`{field}`" in str(caught.value)


ANTHROPIC_EVENTS = [
    ([[1]], "event"),
    ([{"type": "message_start", "message": "m"}], "message"),
    ([{"type": "content_block_start", "index": "0", "content_block": {"type": "text"}}], "index"),
    ([{"type": "content_block_start", "index": 0, "content_block": 4}], "content_block"),
    ([{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 9}}], "delta.text"),
    ([{"type": "content_block_delta", "index": 0, "delta": []}], "delta"),
    ([{"type": "message_delta", "delta": {"stop_reason": 1}}], "delta.stop_reason"),
]


@pytest.mark.parametrize(("events", "field"), ANTHROPIC_EVENTS)
async def test_anthropic_stream_event_of_the_wrong_shape_names_the_field(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer, events: list[Any], field: str
) -> None:
    server.push(ScriptedStream(events=events, done=False))
    with pytest.raises(UpstreamError) as caught:
        await make_model("anthropic").stream([Message.user("go")])
    assert type(caught.value) is UpstreamError and f"`{field}`" in str(caught.value)


async def test_anthropic_stream_keeps_cut_off_tool_arguments(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    # max_tokens cut the tool call's JSON: the reply is still assembled, arguments as sent
    events = [
        {"type": "message_start", "message": {"id": "msg_1", "model": "m", "usage": {"input_tokens": 9}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "w"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"pa'}},
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 4}},
        {"type": "message_stop"},
    ]
    server.push(ScriptedStream(events=events, done=False))
    response = (await make_model("anthropic").stream([Message.user("go")]))[-1].response
    (call,) = response.tool_calls
    assert call.arguments == '{"pa' and response.finish_reason == "length"


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("streamed", [False, True], ids=["body", "stream"])
async def test_a_reply_nested_thousands_deep_is_an_upstream_error(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer, api: str, streamed: bool
) -> None:
    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    server.push(ScriptedStream(events=[deep], done=False) if streamed else ScriptedError(status=200, body=deep))
    model = make_model(api)
    with pytest.raises(UpstreamError, match="deeper than 116 levels"):
        await (model.stream if streamed else model.request)([Message.user("go")])


async def test_an_error_body_nested_thousands_deep_is_read_as_text(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    server.push(ScriptedError(status=500, body="[" * 5000 + "]" * 5000))
    with pytest.raises(UpstreamError, match="HTTP 500"):
        await make_model().request([Message.user("go")])

"""The OpenAI-compatible client over real HTTP against the scripted server, sync and async alike."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import pytest

from contextwarden.exceptions import ContextOverflowError, StreamInterrupted, UpstreamError, UsageError
from contextwarden.llm import (
    AsyncOpenAIChatModel,
    ModelResponse,
    OpenAIChatModel,
    ResponseDone,
    RetryPolicy,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
)
from contextwarden.messages import ImagePart, Message, TextPart, ThinkingPart, ToolCall
from contextwarden.testing import ScriptedDisconnect, ScriptedError, ScriptedOpenAIServer, ScriptedReply

pytestmark = pytest.mark.anyio


def final(events: Sequence[StreamEvent]) -> ModelResponse:
    """The response of the stream's last event, which must be its only `ResponseDone`."""
    assert isinstance(events[-1], ResponseDone), events[-1]
    assert not any(isinstance(e, ResponseDone) for e in events[:-1])
    return events[-1].response


FAST = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.01, jitter=0)

READ = ToolCall(call_id="call_read", name="read_file", arguments='{"path": "src/app/main.py"}')
GREP = ToolCall(call_id="call_grep", name="grep", arguments='{"pattern": "def handle_request", "path": "src/"}')


@pytest.fixture
def make_model(mode: str, server: ScriptedOpenAIServer, drivers: Callable[[Any], Any]) -> Callable[..., Any]:
    """``make_model(**options)``: a driven OpenAI client (sync or async) pointed at the server."""

    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("base_url", server.base_url)
        kwargs.setdefault("retry", FAST)
        cls = OpenAIChatModel if mode == "sync" else AsyncOpenAIChatModel
        return drivers(cls("scripted-model", **kwargs))

    return make


CONVERSATION = [
    Message.system("You are a coding agent."),
    Message.user("Find the request handler."),
    Message.assistant("Looking.", tool_calls=[READ, GREP]),
    Message.tool_result("call_read", "import app\n"),
    Message.tool_result("call_grep", "src/app/main.py:12: def handle_request(req):"),
]


async def test_text_reply_usage_and_request_body(make_model: Callable[..., Any], server: ScriptedOpenAIServer) -> None:
    server.push(
        ScriptedReply(text="It is in src/app/main.py.", prompt_tokens=420, completion_tokens=9, cached_tokens=400)
    )
    model = make_model(api_key="sk-test", headers={"x-team": "agents"})

    response = await model.request(CONVERSATION, max_tokens=256, temperature=0.2)

    assert response.text == "It is in src/app/main.py."
    assert response.message.role == "assistant"
    assert response.finish_reason == "stop" and response.provider_finish_reason == "stop"
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.cache_read_tokens) == (
        420,
        9,
        400,
    )
    assert response.model_name == "scripted-model"
    assert response.raw["choices"][0]["message"]["content"] == "It is in src/app/main.py."
    body = server.requests[0]
    assert body["model"] == "scripted-model" and body["max_tokens"] == 256 and body["temperature"] == 0.2
    assert "stream" not in body
    assert body["messages"] == [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Find the request handler."},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {"id": "call_read", "type": "function", "function": {"name": "read_file", "arguments": READ.arguments}},
                {"id": "call_grep", "type": "function", "function": {"name": "grep", "arguments": GREP.arguments}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_read", "content": "import app\n"},
        {"role": "tool", "tool_call_id": "call_grep", "content": "src/app/main.py:12: def handle_request(req):"},
    ]
    headers = server.received[0].headers
    assert headers["authorization"] == "Bearer sk-test"
    assert headers["x-team"] == "agents"
    assert headers["user-agent"].startswith("contextwarden/")


async def test_user_images_and_developer_role_are_converted(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    server.push("seen")
    image = ImagePart(url="data:image/png;base64,iVBORw0KGgo=", detail="low")
    messages = [
        Message(role="developer", parts=(TextPart(text="Be terse."),)),
        Message(role="user", parts=(TextPart(text="What is this?"), image)),
    ]
    await make_model().request(messages)
    assert server.requests[0]["messages"] == [
        {"role": "system", "content": "Be terse."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": image.url, "detail": "low"}},
            ],
        },
    ]


async def test_tools_in_every_accepted_form_are_sent_as_functions(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    server.push("ok")
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    tools = [
        {"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": schema}},
        {"name": "list_dir", "description": "List a folder.", "parameters": schema},
        {"name": "stat", "input_schema": schema},
    ]
    await make_model().request([Message.user("go")], tools=tools)
    assert server.requests[0]["tools"] == [
        tools[0],
        {"type": "function", "function": {"name": "list_dir", "parameters": schema, "description": "List a folder."}},
        {"type": "function", "function": {"name": "stat", "parameters": schema}},
    ]


async def test_tool_calls_and_reasoning_in_the_reply(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    server.push(ScriptedReply(tool_calls=[READ, GREP], reasoning="Two lookups in parallel."))
    response = await make_model().request([Message.user("go")])
    assert response.tool_calls == (READ, GREP)
    assert response.finish_reason == "tool_calls"
    assert response.message.parts[0] == ThinkingPart(text="Two lookups in parallel.")
    assert response.text == ""


async def test_stream_assembles_text_tool_calls_and_usage(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    reply = ScriptedReply(
        text="Reading both files now.",
        tool_calls=[READ, GREP],
        reasoning="Plan: read then grep.",
        prompt_tokens=1000,
        completion_tokens=40,
    )
    server.push(reply, reply)
    model = make_model()

    events = await model.stream([Message.user("go")])
    whole = await model.request([Message.user("go")])

    text_deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(text_deltas) > 1, "the server streams word by word"
    assert "".join(text_deltas) == "Reading both files now."
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "Plan: read then grep."
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    for index, expected in enumerate([READ, GREP]):
        pieces = [e for e in calls if e.index == index]
        assert pieces[0].call_id == expected.call_id and pieces[0].name == expected.name
        assert all(p.call_id is None for p in pieces[1:])
        assert "".join(p.arguments_delta for p in pieces) == expected.arguments
    response = final(events)
    assert response.message.parts == whole.message.parts
    assert response.usage.input_tokens == 1000 and response.usage.output_tokens == 40
    assert response.finish_reason == "tool_calls"
    assert response.raw["choices"][0]["message"]["tool_calls"][1]["function"]["name"] == "grep"
    assert server.requests[0]["stream"] is True
    assert server.requests[0]["stream_options"] == {"include_usage": True}


async def test_stream_without_usage_option(make_model: Callable[..., Any], server: ScriptedOpenAIServer) -> None:
    server.push("plain")
    events = await make_model(stream_usage=False).stream([Message.user("go")])
    assert "stream_options" not in server.requests[0]
    assert final(events).text == "plain"
    assert final(events).usage.input_tokens == 0


async def test_429_is_retried_after_the_servers_retry_after(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    server.push(ScriptedError.rate_limited(retry_after=0.3), "after the wait")
    started = time.monotonic()
    response = await make_model().request([Message.user("go")])
    assert response.text == "after the wait"
    assert time.monotonic() - started >= 0.3, "Retry-After overrides the tiny backoff"
    assert len(server.requests) == 2


async def test_5xx_is_retried_with_backoff(make_model: Callable[..., Any], server: ScriptedOpenAIServer) -> None:
    server.push(ScriptedError.server_error(500), ScriptedError.server_error(503), "third time")
    model = make_model(retry=RetryPolicy(max_retries=2, initial_delay=0.1, jitter=0))
    started = time.monotonic()
    assert (await model.request([Message.user("go")])).text == "third time"
    # Waits of 0.1 then 0.2 seconds: exponential.
    assert time.monotonic() - started >= 0.3
    assert len(server.requests) == 3


async def test_retries_run_out(make_model: Callable[..., Any], server: ScriptedOpenAIServer) -> None:
    server.push(*[ScriptedError.server_error(502)] * 3, "never reached")
    with pytest.raises(UpstreamError) as info:
        await make_model().request([Message.user("go")])
    assert not isinstance(info.value, ContextOverflowError)
    assert info.value.status_code == 502
    assert info.value.url == f"{server.base_url}/chat/completions"
    assert "HTTP 502" in str(info.value) and server.base_url in str(info.value)
    assert len(server.requests) == 3 and server.remaining == 1


async def test_a_retry_after_beyond_the_cap_is_not_waited_for(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    server.push(ScriptedError.rate_limited(retry_after=3600), "not reached")
    started = time.monotonic()
    with pytest.raises(UpstreamError) as info:
        await make_model().request([Message.user("go")])
    assert info.value.status_code == 429
    assert "max_retries" in str(info.value)
    assert time.monotonic() - started < 2
    assert len(server.requests) == 1


async def test_context_overflow_is_classified_and_not_retried(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    server.push(ScriptedError.context_length_exceeded(limit=8192, requested=9500), "not reached")
    with pytest.raises(ContextOverflowError) as info:
        await make_model().request([Message.user("a very long prompt")])
    assert (info.value.limit, info.value.requested, info.value.status_code) == (8192, 9500, 400)
    assert len(server.requests) == 1


async def test_context_overflow_sent_inside_a_stream(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    server.push(ScriptedError.context_length_exceeded(limit=4096, requested=4100, in_stream=True))
    events, error = await make_model().stream_until_error([Message.user("go")])
    assert isinstance(error, ContextOverflowError)
    assert (error.limit, error.requested, error.status_code) == (4096, 4100, None)
    assert events == []


async def test_timeout_raises_upstream_error_naming_the_wait(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    server.push(ScriptedReply(text="too late", delay=3))
    started = time.monotonic()
    with pytest.raises(UpstreamError) as info:
        await make_model(timeout=0.2, max_retries=0).request([Message.user("go")])
    assert time.monotonic() - started < 2
    assert info.value.status_code is None and info.value.url == f"{server.base_url}/chat/completions"
    assert "did not answer within 0.2s" in str(info.value)


async def test_timeout_is_retried(make_model: Callable[..., Any], server: ScriptedOpenAIServer) -> None:
    server.push(ScriptedReply(text="too late", delay=3), "in time")
    assert (await make_model(timeout=0.3).request([Message.user("go")])).text == "in time"


async def test_dropped_connection_is_retried(make_model: Callable[..., Any], server: ScriptedOpenAIServer) -> None:
    server.push(ScriptedDisconnect(), "reconnected")
    assert (await make_model().request([Message.user("go")])).text == "reconnected"
    assert len(server.requests) == 2


async def test_dropped_connections_until_retries_run_out(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    server.push(ScriptedDisconnect(), ScriptedDisconnect())
    with pytest.raises(UpstreamError) as info:
        await make_model(max_retries=1).request([Message.user("go")])
    assert info.value.status_code is None
    assert "closed the connection" in str(info.value)


async def test_connection_dropped_mid_stream(make_model: Callable[..., Any], server: ScriptedOpenAIServer) -> None:
    server.push(ScriptedReply(text="one two three four five six", disconnect_after=3), "next")
    model = make_model()
    events, error = await model.stream_until_error([Message.user("go")])
    assert isinstance(error, StreamInterrupted) and not isinstance(error, ContextOverflowError)
    assert "closed the connection" in str(error)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["one ", "two "]
    # The client is still usable afterwards.
    assert (await model.request([Message.user("again")])).text == "next"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_server_down_names_the_url_and_what_to_check(make_model: Callable[..., Any]) -> None:
    base_url = f"http://127.0.0.1:{_closed_port()}/v1"
    with pytest.raises(UpstreamError) as info:
        await make_model(base_url=base_url).request([Message.user("go")])
    error = info.value
    assert error.url == f"{base_url}/chat/completions"
    assert error.status_code is None
    assert f"Cannot reach the model server at {base_url}/chat/completions" in str(error)
    assert "check that the server is running" in str(error) and "base_url" in str(error)


async def test_script_ran_out_is_a_clear_error(make_model: Callable[..., Any], server: ScriptedOpenAIServer) -> None:
    with pytest.raises(UpstreamError) as info:
        await make_model().request([Message.user("go")])
    assert info.value.status_code == 400 and "script ran out" in str(info.value)


async def test_a_body_that_is_not_json(make_model: Callable[..., Any], server: ScriptedOpenAIServer) -> None:
    server.push(ScriptedError(status=200, body="<html>Welcome to nginx</html>"))
    with pytest.raises(UpstreamError) as info:
        await make_model().request([Message.user("go")])
    assert "not a JSON object" in str(info.value) and "base_url" in str(info.value)


async def test_remote_urls_are_refused_while_requests_are_not_allowed(make_model: Callable[..., Any]) -> None:
    model = make_model(base_url="https://api.openai.com/v1")
    with pytest.raises(UsageError, match="ALLOW_MODEL_REQUESTS"):
        await model.request([Message.user("go")])
    with pytest.raises(UsageError, match="ALLOW_MODEL_REQUESTS"):
        await model.stream([Message.user("go")])


async def test_max_completion_tokens_and_extra_body(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    server.push("a", "b")
    model = make_model(max_tokens=100, max_tokens_field="max_completion_tokens", extra_body={"seed": 7})
    await model.request([Message.user("go")])
    await model.request([Message.user("go")], max_tokens=5)
    assert server.requests[0]["max_completion_tokens"] == 100 and "max_tokens" not in server.requests[0]
    assert server.requests[1]["max_completion_tokens"] == 5
    assert server.requests[0]["seed"] == 7


def test_a_given_http_client_is_used_and_left_open(server: ScriptedOpenAIServer) -> None:
    server.push("hello")
    with httpx.Client(headers={"x-from-client": "yes"}) as client:
        with OpenAIChatModel("m", base_url=server.base_url, http_client=client) as model:
            assert model.request([Message.user("go")]).text == "hello"
        assert not client.is_closed
    assert server.received[0].headers["x-from-client"] == "yes"


async def test_a_given_async_http_client_is_used_and_left_open(server: ScriptedOpenAIServer) -> None:
    server.push("hello")
    async with httpx.AsyncClient(headers={"x-from-client": "yes"}) as client:
        async with AsyncOpenAIChatModel("m", base_url=server.base_url, http_client=client) as model:
            assert (await model.request([Message.user("go")])).text == "hello"
        assert not client.is_closed
    assert server.received[0].headers["x-from-client"] == "yes"


def test_an_owned_client_is_closed_with_the_model(server: ScriptedOpenAIServer) -> None:
    model = OpenAIChatModel("m", base_url=server.base_url)
    model.close()
    assert model._client.is_closed


def test_breaking_out_of_a_stream_releases_the_connection(server: ScriptedOpenAIServer) -> None:
    server.push(ScriptedReply(text=" ".join(["word"] * 200)), "second")
    limits = httpx.Limits(max_connections=1)
    with httpx.Client(limits=limits, timeout=5) as client:
        model = OpenAIChatModel("m", base_url=server.base_url, http_client=client)
        stream = model.stream([Message.user("go")])
        first = next(iter(stream))
        assert isinstance(first, TextDelta)
        stream.close()  # type: ignore[attr-defined]
        # With one connection in the pool, this would wait forever had the stream kept it.
        assert model.request([Message.user("go")]).text == "second"


async def test_closing_an_async_stream_early_releases_the_connection(server: ScriptedOpenAIServer) -> None:
    server.push(ScriptedReply(text=" ".join(["word"] * 200)), "second")
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=1), timeout=5) as client:
        model = AsyncOpenAIChatModel("m", base_url=server.base_url, http_client=client)
        async with contextlib.aclosing(model.stream([Message.user("go")])) as stream:  # type: ignore[type-var]
            assert isinstance(await anext(stream), TextDelta)
        assert (await model.request([Message.user("go")])).text == "second"


def test_owned_clients_ignore_proxy_environment_variables(server: ScriptedOpenAIServer) -> None:
    with OpenAIChatModel("m", base_url=server.base_url) as model:
        assert model._client.trust_env is False


def test_repr_names_model_and_url(server: ScriptedOpenAIServer) -> None:
    with OpenAIChatModel("llama3.1:8b", base_url=server.base_url + "/") as model:
        assert repr(model) == f"OpenAIChatModel(model='llama3.1:8b', base_url='{server.base_url}')"
        assert model.model_name == "llama3.1:8b"


async def test_servers_that_send_decoded_arguments_and_no_call_ids(
    make_model: Callable[..., Any], server: ScriptedOpenAIServer
) -> None:
    # Some local servers send tool-call arguments as an object and omit the id.
    body = {
        "id": "x",
        "model": "local",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"type": "function", "function": {"name": "ls", "arguments": {"path": "/tmp"}}}],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    server.push(ScriptedError(status=200, body=json.dumps(body)))
    response = await make_model().request([Message.user("go")])
    (call,) = response.tool_calls
    assert call.name == "ls" and json.loads(call.arguments) == {"path": "/tmp"}
    assert call.call_id.startswith("call_")


def test_the_reply_limit_goes_in_the_field_the_server_expects(server: ScriptedOpenAIServer) -> None:
    # api.openai.com's reasoning models reject `max_tokens`; other servers expect it
    messages = [Message.user("go")]
    with OpenAIChatModel("o3") as remote, OpenAIChatModel("m", base_url=server.base_url) as local:
        for model, field in ((remote, "max_completion_tokens"), (local, "max_tokens")):
            body = model._body(messages, tools=None, max_tokens=64, temperature=None, stream=False)
            assert body[field] == 64 and len({"max_tokens", "max_completion_tokens"} & set(body)) == 1

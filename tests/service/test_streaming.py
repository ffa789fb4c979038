"""Streaming through the proxy, context-length errors answered by compaction and one retry, disconnects."""

from __future__ import annotations

import json
import time

import httpx
import openai

from contextwarden.testing import ScriptedError, ScriptedOpenAIServer, ScriptedReply

from ._stored import stored
from .conftest import SYSTEM, Running, chat, user


def _events(lines: list[str]) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line[6:]) for line in lines if line.startswith("data: ") and line != "data: [DONE]"]


def test_a_stream_passes_through_and_its_reply_is_recorded(service: Running, upstream: ScriptedOpenAIServer) -> None:
    upstream.push(ScriptedReply(text="Hello there, streaming world.", prompt_tokens=30, completion_tokens=6))
    with service.client.stream(
        "POST", "/v1/chat/completions", json=chat(user("hi"), stream=True), headers={"X-Session-Id": "st"}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in _events(lines) if e["choices"])
    assert text == "Hello there, streaming world."
    assert upstream.requests[-1]["stream_options"] == {"include_usage": True}
    assert stored(service, "st") == [("user", "hi"), ("assistant", "Hello there, streaming world.")]


def test_the_openai_sdk_streams_through_the_proxy(service: Running, upstream: ScriptedOpenAIServer) -> None:
    upstream.push("one two three")
    client = openai.OpenAI(
        base_url=f"{service.url}/v1", api_key="unused", default_headers={"X-Session-Id": "sdk"}, max_retries=0
    )
    with client:
        stream = client.chat.completions.create(model="scripted-model", messages=[SYSTEM, user("count")], stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "one two three"
    assert stored(service, "sdk")[-1] == ("assistant", "one two three")


def _long_history(turns: int) -> list[dict]:  # type: ignore[type-arg]
    history = [SYSTEM]
    for i in range(turns):
        history += [user(f"request {i} " + "details " * 300), {"role": "assistant", "content": f"done {i}"}]
    return history


def test_a_context_length_error_is_answered_by_compaction_and_one_retry(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    upstream.push(ScriptedError.context_length_exceeded(limit=1200, requested=2500), "fits now")
    history = _long_history(6) + [user("and now?")]
    r = service.client.post("/v1/chat/completions", json=chat(*history), headers={"X-Session-Id": "ovf"})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "fits now"
    first, second = upstream.requests[-2:]
    assert len(json.dumps(second["messages"])) < len(json.dumps(first["messages"]))
    assert second["messages"][-1] == user("and now?")
    assert stored(service, "ovf")[-1] == ("assistant", "fits now")
    metrics = service.client.get("/metrics").text
    assert "contextwarden_overflow_retries_total 1.0" in metrics


def test_a_second_context_length_error_reaches_the_client(service: Running, upstream: ScriptedOpenAIServer) -> None:
    overflow = ScriptedError.context_length_exceeded(limit=1200, requested=2500)
    upstream.push(overflow, overflow)
    r = service.client.post(
        "/v1/chat/completions", json=chat(*_long_history(6), user("x")), headers={"X-Session-Id": "ovf2"}
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"
    assert len(upstream.requests) == 2  # one retry, not more


def test_a_streamed_context_length_error_is_retried_before_the_stream_starts(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    upstream.push(ScriptedError.context_length_exceeded(limit=1200, requested=2500, in_stream=True), "streamed ok")
    with service.client.stream(
        "POST",
        "/v1/chat/completions",
        json=chat(*_long_history(6), user("go"), stream=True),
        headers={"X-Session-Id": "ovf3"},
    ) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in _events(lines) if e["choices"])
    assert text == "streamed ok"
    assert len(upstream.requests) == 2


def test_a_client_that_goes_away_cancels_the_upstream_stream(service: Running, upstream: ScriptedOpenAIServer) -> None:
    upstream.push(ScriptedReply(text="word " * 200, chunk_delay=0.05))  # ten seconds of stream
    started = time.monotonic()
    with httpx.Client(base_url=service.url, timeout=10) as client:
        with client.stream(
            "POST", "/v1/chat/completions", json=chat(user("talk"), stream=True), headers={"X-Session-Id": "gone"}
        ) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
            next(lines)
        # leaving the block closes the connection mid-stream
    deadline = time.monotonic() + 5
    metrics = service.app.state.service.metrics
    while metrics.cancelled._value.get() < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert metrics.cancelled._value.get() == 1
    assert time.monotonic() - started < 5
    assert stored(service, "gone") == []  # nothing of the cancelled turn was written, no partial reply
    # the session still works: the client's retry goes through and the turn is stored once
    r = service.client.post("/v1/chat/completions", json=chat(user("talk")), headers={"X-Session-Id": "gone"})
    assert r.status_code == 200
    assert stored(service, "gone") == [("user", "talk"), ("assistant", "ok")]


def test_streamed_tool_calls_are_recorded_and_their_results_pair_with_them(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    from contextwarden.messages import ToolCall

    call = ToolCall(call_id="call_read1", name="read_file", arguments='{"path": "src/app.py"}')
    upstream.push(ScriptedReply(tool_calls=[call]), "The file defines create_app.")
    headers = {"X-Session-Id": "tools"}
    history = [SYSTEM, user("What does src/app.py define?")]
    with service.client.stream(
        "POST", "/v1/chat/completions", json=chat(*history, stream=True), headers=headers
    ) as response:
        lines = [line for line in response.iter_lines() if line]
    deltas = [e["choices"][0]["delta"] for e in _events(lines) if e["choices"]]
    arguments = "".join(d["tool_calls"][0]["function"].get("arguments", "") for d in deltas if d.get("tool_calls"))
    assert arguments == '{"path": "src/app.py"}'
    # the client echoes the call and sends the tool's result, as an agent loop does
    echoed = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_read1", "type": "function", "function": {"name": "read_file", "arguments": arguments}}
        ],
    }
    history += [echoed, {"role": "tool", "tool_call_id": "call_read1", "content": "def create_app(): ..."}]
    r = service.client.post("/v1/chat/completions", json=chat(*history), headers=headers)
    assert r.status_code == 200, r.text
    kinds = [(role, text) for role, text in stored(service, "tools")]
    assert [role for role, _ in kinds] == ["system", "user", "assistant", "tool", "assistant"]
    sent = upstream.requests[-1]["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == "call_read1" and sent[-1]["tool_call_id"] == "call_read1"

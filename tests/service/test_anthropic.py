"""Anthropic Messages through the proxy: system blocks, signed thinking, tool pairs, streams, errors, identity."""

from __future__ import annotations

import json
from typing import Any

from contextwarden.messages import ToolCall
from contextwarden.testing import ScriptedOpenAIServer, ScriptedReply

from ._stored import stored
from .conftest import MODEL, Running

SYSTEM_BLOCKS = [
    {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "Use the tools."},
]
THINKING = {"type": "thinking", "thinking": "Let me look at the file.", "signature": "c2lnbmVkIGJ5dGVz+/=="}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}


def messages_request(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 100, "system": SYSTEM_BLOCKS, "messages": list(messages), **extra}


def turn(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


HEADERS = {"X-Claude-Code-Session-Id": "cc1", "anthropic-version": "2023-06-01", "anthropic-beta": "feature-x"}


def test_a_messages_request_keeps_system_tools_and_signed_thinking_byte_for_byte(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    tools = [{"name": "Read", "description": "Read a file.", "input_schema": {"type": "object", "properties": {}}}]
    history = [
        turn("read a.py"),
        {"role": "system", "content": "a reminder in between"},
        {
            "role": "assistant",
            "content": [THINKING, REDACTED, {"type": "tool_use", "id": "tu_1", "name": "Read", "input": {"p": "a.py"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "print(1)"}]},
    ]
    upstream.push(ScriptedReply(text="It prints 1."))
    body = messages_request(*history, tools=tools, metadata={"user_id": "u"}, context_management={"edits": []})
    r = service.client.post("/v1/messages?beta=true", json=body, headers=HEADERS)
    assert r.status_code == 200, r.text
    assert r.json()["content"] == [{"type": "text", "text": "It prints 1."}]
    assert r.headers["x-session-id"] == "cc1"
    sent = upstream.requests[-1]
    assert sent["system"] == SYSTEM_BLOCKS
    assert sent["tools"] == tools
    assert sent["messages"] == history
    assert sent["metadata"] == {"user_id": "u"} and sent["context_management"] == {"edits": []}
    assert upstream.received[-1].path == "/v1/messages?beta=true"
    received = upstream.received[-1].headers
    assert received["anthropic-version"] == "2023-06-01" and received["anthropic-beta"] == "feature-x"
    assert stored(service, "cc1")[-1] == ("assistant", "It prints 1.")

    # the next request re-sends the reply: only its new message is added
    upstream.push("Done.")
    follow = messages_request(*history, {"role": "assistant", "content": [{"type": "text", "text": "It prints 1."}]},
                              turn("thanks"), tools=tools)  # fmt: skip
    r = service.client.post("/v1/messages", json=follow, headers=HEADERS)
    assert r.status_code == 200, r.text
    assert upstream.requests[-1]["messages"] == follow["messages"]
    assert [role for role, _ in stored(service, "cc1")].count("assistant") == 3


def test_a_streamed_reply_is_relayed_in_anthropic_events_and_recorded_with_its_signature(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    upstream.push(
        ScriptedReply(
            reasoning="Thinking it over.",
            text="Hello.",
            tool_calls=[ToolCall(call_id="tu_9", name="Read", arguments='{"p": "b"}')],
        )
    )
    with service.client.stream(
        "POST", "/v1/messages", json=messages_request(turn("hi"), stream=True), headers=HEADERS
    ) as response:
        assert response.status_code == 200
        events = [line[7:] for line in response.iter_lines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert "content_block_delta" in events
    session = service.app.state.service.pool.loaded("default", "cc1")
    reply = session.state.message(-1)
    assert reply.role == "assistant" and reply.text == "Hello."
    assert reply.tool_calls[0].name == "Read" and json.loads(reply.tool_calls[0].arguments) == {"p": "b"}
    thinking = [p for p in reply.parts if p.kind == "thinking"]
    assert thinking[0].text == "Thinking it over." and thinking[0].signature == "scripted-signature"


def test_a_side_request_with_its_own_system_prompt_gets_a_session_of_its_own(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    upstream.push("A title", "agent reply", "agent reply 2")
    title = {"model": MODEL, "max_tokens": 20, "system": "Generate a title.", "messages": [turn("fix the bug")]}
    r = service.client.post("/v1/messages", json=title, headers={"x-session-id": "oc"})
    assert r.status_code == 200 and r.headers["x-session-id"] == "oc"
    r = service.client.post("/v1/messages", json=messages_request(turn("fix the bug")), headers={"x-session-id": "oc"})
    assert r.status_code == 200
    branch = r.headers["x-session-id"]
    assert branch.startswith("oc~")
    assert upstream.requests[-1]["system"] == SYSTEM_BLOCKS  # the agent's own system prompt, never the title's
    assert stored(service, "oc") == [("system", "Generate a title."), ("user", "fix the bug"), ("assistant", "A title")]
    follow = messages_request(turn("fix the bug"), {"role": "assistant", "content": "agent reply"}, turn("go on"))
    r = service.client.post("/v1/messages", json=follow, headers={"x-session-id": "oc"})
    assert r.headers["x-session-id"] == branch  # the agent's conversation stays in its branch
    assert len(stored(service, branch)) == 5


def test_a_retry_storm_stores_one_reply(service: Running, upstream: ScriptedOpenAIServer) -> None:
    body = messages_request(turn("once"))
    for _ in range(20):
        r = service.client.post("/v1/messages", json=body, headers={"x-session-id": "storm"})
        assert r.status_code == 200, r.text
    assert stored(service, "storm") == [
        ("system", "You are Claude Code.\nUse the tools."),
        ("user", "once"),
        ("assistant", "ok"),
    ]
    # a retry is sent without the stored reply
    assert upstream.requests[-1]["messages"] == body["messages"]


def test_claude_codes_metadata_names_the_session_and_errors_have_anthropics_shape(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    body = messages_request(turn("hi"), metadata={"user_id": json.dumps({"device_id": "d", "session_id": "meta-1"})})
    r = service.client.post("/v1/messages", json=body)
    assert r.status_code == 200 and r.headers["x-session-id"] == "meta-1"
    r = service.client.post("/v1/messages", json={"model": MODEL, "messages": "nope"})
    assert r.status_code == 400
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"


def test_a_request_that_cannot_fit_is_anthropics_prompt_too_long(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    huge = " ".join(f"word{i}" for i in range(6000))
    r = service.client.post("/v1/messages", json=messages_request(turn(huge)), headers={"x-session-id": "big"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"].startswith("prompt is too long")
    assert not upstream.requests


def test_count_tokens_and_the_session_path(service: Running, upstream: ScriptedOpenAIServer) -> None:
    r = service.client.post("/v1/messages/count_tokens", json=messages_request(turn("count me")))
    assert r.status_code == 200 and 0 < r.json()["input_tokens"] < 4000
    r = service.client.post("/s/pathy/v1/messages", json=messages_request(turn("hi")))
    assert r.status_code == 200 and r.headers["x-session-id"] == "pathy"
    assert service.client.get("/s/pathy/v1/models").status_code == 200

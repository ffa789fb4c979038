"""A model turn that calls read_context next to the client's own tools: the client never sees read_context.

The proxy answers the read-back call, gives each client call a result saying it was not run, and asks
the model again; the model's next turn (the client's calls alone) is what the client gets. Every call
keeps its result in the transcript, and the client's next request continues the session.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from contextwarden.messages import ToolCall
from contextwarden.settings import Settings
from contextwarden.testing import ScriptedOpenAIServer, ScriptedReply
from contextwarden.toolpairs import check

from ._read_back_histories import READ, anthropic_read_history, read_history
from ._responses_upstream import ResponsesUpstream, call_item
from .conftest import MODEL, SYSTEM, Running, chat, make_settings, user

SNAPSHOT = re.compile(r"snap_[0-9a-f]+")


def _offered(names: list[str], text: str) -> str | None:
    """The snapshot to read when the proxy offered read_context and it was not answered yet."""
    found = SNAPSHOT.search(text)
    return found.group(0) if "read_context" in names and found and '"rb_m"' not in text else None


def _transcript_pairs_hold(service: Running, session_id: str) -> None:
    session = service.app.state.service.pool.loaded("default", session_id)
    transcript = list(session.state.messages())
    check(transcript)  # every call has its result, no result without its call
    mixed = next(m for m in transcript if {c.name for c in m.tool_calls} == {"read_context", "read_file"})
    answers = {m.tool_call_id: m for m in transcript if m.role == "tool"}
    assert "line" in answers["rb_m"].text
    assert answers["cl_1"].text.startswith("Not run") and answers["cl_1"].is_error
    assert mixed.tool_calls[1].call_id == "cl_1"


@pytest.mark.parametrize("stream", [False, True])
def test_chat_a_mixed_turn_is_answered_and_only_the_client_calls_reach_the_client(
    service: Running, upstream: ScriptedOpenAIServer, stream: bool
) -> None:
    seen: list[dict[str, Any]] = []

    def model(body: dict[str, Any]) -> Any:
        seen.append(body)
        snapshot = _offered([t["function"]["name"] for t in body.get("tools") or ()], json.dumps(body["messages"]))
        if snapshot is not None:
            read = ToolCall(call_id="rb_m", name="read_context", arguments=json.dumps({"ref": snapshot}))
            return ScriptedReply(tool_calls=[read, ToolCall(call_id="cl_1", name="read_file", arguments="{}")])
        return ScriptedReply(tool_calls=[ToolCall(call_id="cl_2", name="read_file", arguments="{}")])

    upstream.push(model, model)
    body = chat(*read_history(8), tools=[READ], stream=stream)
    r = service.client.post("/v1/chat/completions", json=body, headers={"X-Session-Id": "mx"})
    assert r.status_code == 200, r.text
    assert "read_context" not in r.text and "cl_1" not in r.text
    assert "cl_2" in r.text  # the model's turn after the read-back: the client's call alone
    assert len(seen) == 2
    asked_again = seen[-1]["messages"]
    answered = {m["tool_call_id"]: m["content"] for m in asked_again if m["role"] == "tool"}
    assert "line" in answered["rb_m"] and answered["cl_1"].startswith("Not run")
    _transcript_pairs_hold(service, "mx")

    # the client runs its call and sends the result: the same session goes on, managed
    call = {"id": "cl_2", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    follow = chat(
        *read_history(8),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "cl_2", "content": "the file"},
        tools=[READ],
    )
    upstream.push(ScriptedReply(text="done"))
    r = service.client.post("/v1/chat/completions", json=follow, headers={"X-Session-Id": "mx"})
    assert r.status_code == 200 and r.headers["x-session-id"] == "mx"
    metrics = service.app.state.service.metrics.render().decode()
    assert "contextwarden_unmanaged_requests_total{" not in metrics
    assert service.app.state.service.pool.loaded("default", "mx").state.message(-1).text == "done"


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_a_mixed_turn_is_answered_and_only_the_client_calls_reach_the_client(
    service: Running, upstream: ScriptedOpenAIServer, stream: bool
) -> None:
    seen: list[dict[str, Any]] = []

    def model(body: dict[str, Any]) -> Any:
        seen.append(body)
        snapshot = _offered([t["name"] for t in body.get("tools") or ()], json.dumps(body["messages"]))
        if snapshot is not None:
            read = ToolCall(call_id="rb_m", name="read_context", arguments=json.dumps({"ref": snapshot}))
            client = ToolCall(call_id="cl_1", name="read_file", arguments="{}")
            return ScriptedReply(reasoning="Read it first.", tool_calls=[read, client])
        return ScriptedReply(tool_calls=[ToolCall(call_id="cl_2", name="read_file", arguments="{}")])

    upstream.push(model, model)
    tools = [{"name": "read_file", "input_schema": {"type": "object", "properties": {}}}]
    body = {"model": MODEL, "max_tokens": 50, "system": "Agent.", "messages": anthropic_read_history(8), "tools": tools}
    r = service.client.post("/v1/messages", json={**body, "stream": stream}, headers={"X-Session-Id": "mxa"})
    assert r.status_code == 200, r.text
    assert "read_context" not in r.text and "cl_1" not in r.text and "cl_2" in r.text
    assert len(seen) == 2
    results = [b for m in seen[-1]["messages"] for b in m["content"] if isinstance(m["content"], list)]
    answered = {b["tool_use_id"]: b for b in results if b.get("type") == "tool_result"}
    assert set(answered) >= {"rb_m", "cl_1"} and answered["cl_1"].get("is_error") is True
    # the turn the client never saw goes back with its signed thinking, unchanged
    turn = next(
        m for m in seen[-1]["messages"] if isinstance(m["content"], list) and m["content"][-1].get("id") == "cl_1"
    )
    assert turn["content"][0] == {"type": "thinking", "thinking": "Read it first.", "signature": "scripted-signature"}
    _transcript_pairs_hold(service, "mxa")

    follow = [
        *anthropic_read_history(8),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "cl_2", "name": "read_file", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "cl_2", "content": "the file"}]},
    ]
    upstream.push(ScriptedReply(text="done"))
    r = service.client.post("/v1/messages", json={**body, "messages": follow}, headers={"X-Session-Id": "mxa"})
    assert r.status_code == 200 and r.headers["x-session-id"] == "mxa"
    assert service.app.state.service.pool.loaded("default", "mxa").state.message(-1).text == "done"


@pytest.mark.parametrize("stream", [False, True])
def test_responses_a_mixed_turn_is_answered_and_only_the_client_calls_reach_the_client(
    service_factory: Callable[[Settings], Running], sqlite_url: str, stream: bool
) -> None:
    seen: list[dict[str, Any]] = []

    def model(body: dict[str, Any]) -> list[dict[str, Any]]:
        seen.append(body)
        snapshot = _offered([str(t.get("name")) for t in body.get("tools") or ()], json.dumps(body["input"]))
        if snapshot is not None:
            read = call_item("rb_m", "read_context", json.dumps({"ref": snapshot}))
            return [read, call_item("cl_1", "read_file", "{}")]
        return [call_item("cl_2", "read_file", "{}")]

    history: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "read every file"}]
    for i in range(8):
        history.append(call_item(f"c{i}", "read_file", "{}"))
        body = " ".join(f"line{i}_{j}" for j in range(400))
        history.append({"type": "function_call_output", "call_id": f"c{i}", "output": body})
    tools = [{"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {}}}]
    with ResponsesUpstream() as upstream:
        service = service_factory(make_settings(sqlite_url, upstream.base_url))
        upstream.push(model, model)
        request = {"model": MODEL, "instructions": "Agent.", "input": history, "tools": tools, "stream": stream}
        r = service.client.post("/v1/responses", json=request, headers={"session-id": "mxr"})
        assert r.status_code == 200, r.text
        assert "read_context" not in r.text and "cl_1" not in r.text and "cl_2" in r.text
        assert len(seen) == 2
        outputs = {i["call_id"]: i["output"] for i in seen[-1]["input"] if i.get("type") == "function_call_output"}
        assert "line" in outputs["rb_m"] and outputs["cl_1"].startswith("Not run")
        _transcript_pairs_hold(service, "mxr")

        follow = [*history, call_item("cl_2", "read_file", "{}")]
        follow.append({"type": "function_call_output", "call_id": "cl_2", "output": "the file"})
        r = service.client.post(
            "/v1/responses", json={**request, "input": follow, "stream": False}, headers={"session-id": "mxr"}
        )
        assert r.status_code == 200 and r.headers["x-session-id"] == "mxr"
        assert service.app.state.service.pool.loaded("default", "mxr").state.message(-1).text == "ok"


def test_a_turn_calling_only_client_tools_is_relayed_as_the_model_sent_it(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    upstream.push(ScriptedReply(tool_calls=[ToolCall(call_id="cl_9", name="read_file", arguments="{}")]))
    r = service.client.post(
        "/v1/chat/completions", json=chat(SYSTEM, user("read it"), tools=[READ]), headers={"X-Session-Id": "plain"}
    )
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["id"] == "cl_9"
    assert len(upstream.requests) == 1

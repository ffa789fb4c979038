"""The read-back tool served by the proxy: offered when the view refers to it, answered without the client."""

from __future__ import annotations

import json
import re
from typing import Any

from contextwarden.messages import ToolCall
from contextwarden.testing import ScriptedOpenAIServer, ScriptedReply

from ._read_back_histories import READ, anthropic_read_history, read_history
from .conftest import MODEL, Running, chat, user


def test_a_read_context_call_is_answered_by_the_proxy_and_the_client_sees_only_the_reply(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    seen: list[dict[str, Any]] = []

    def model(body: dict[str, Any]) -> Any:
        seen.append(body)
        names = [t["function"]["name"] for t in body.get("tools") or ()]
        text = json.dumps(body["messages"])
        found = re.search(r"snap_[0-9a-f]+", text)
        if "read_context" in names and found and '"rb_1"' not in text:
            return ScriptedReply(
                tool_calls=[
                    ToolCall(call_id="rb_1", name="read_context", arguments=json.dumps({"ref": found.group(0)}))
                ]
            )
        return ScriptedReply(text="all read")

    upstream.push(*[model] * 4)
    r = service.client.post(
        "/v1/chat/completions", json=chat(*read_history(8), tools=[READ]), headers={"X-Session-Id": "rb"}
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"] == {"role": "assistant", "content": "all read"}
    offered = [b for b in seen if any(t["function"]["name"] == "read_context" for t in b.get("tools") or ())]
    assert offered, "the view referred to read_context but the tool was not offered"
    assert len(seen) == 2  # the model called it once: the proxy answered with the snapshot's text
    answer = seen[-1]["messages"][-1]
    assert answer["role"] == "tool" and answer["tool_call_id"] == "rb_1" and "line" in answer["content"]
    # the client's tools are sent as it sent them, the proxy's own added after them
    assert seen[0]["tools"][0] == READ

    # the next request re-sends the client's history: the proxy's own rounds are not the client's to send
    follow = chat(*read_history(8), {"role": "assistant", "content": "all read"}, user("thanks"), tools=[READ])
    upstream.push(ScriptedReply(text="welcome"))
    r = service.client.post("/v1/chat/completions", json=follow, headers={"X-Session-Id": "rb"})
    assert r.status_code == 200 and r.headers["x-session-id"] == "rb"


def test_a_streamed_anthropic_reply_calling_read_context_is_answered_before_anything_is_relayed(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    seen: list[dict[str, Any]] = []

    def model(body: dict[str, Any]) -> Any:
        seen.append(body)
        names = [t["name"] for t in body.get("tools") or ()]
        text = json.dumps(body["messages"])
        found = re.search(r"snap_[0-9a-f]+", text)
        if "read_context" in names and found and '"rb_2"' not in text:
            call = ToolCall(call_id="rb_2", name="read_context", arguments=json.dumps({"ref": found.group(0)}))
            return ScriptedReply(reasoning="I need the full file.", tool_calls=[call])
        return ScriptedReply(text="all read")

    upstream.push(*[model] * 4)
    tools = [{"name": "read_file", "input_schema": {"type": "object", "properties": {}}}]
    body = {
        "model": MODEL,
        "max_tokens": 50,
        "system": "Agent.",
        "messages": anthropic_read_history(8),
        "tools": tools,
        "stream": True,
    }
    with service.client.stream("POST", "/v1/messages", json=body, headers={"X-Session-Id": "rbs"}) as response:
        assert response.status_code == 200
        text = "".join(response.iter_text())
    assert "read_context" not in text  # the client sees only the reply it gets after the read-back
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    deltas = [e["delta"]["text"] for e in events if e["type"] == "content_block_delta" and "text" in e["delta"]]
    assert "".join(deltas) == "all read"
    assert len(seen) == 2
    answer = seen[-1]["messages"][-1]["content"][0]
    assert answer["type"] == "tool_result" and answer["tool_use_id"] == "rb_2"
    # the call the client never saw keeps its signed thinking in what the model gets back
    call = seen[-1]["messages"][-2]["content"]
    assert call[0] == {"type": "thinking", "thinking": "I need the full file.", "signature": "scripted-signature"}
    # after the compaction the proxy marked its context block (and the system prompt) for the prompt cache
    first = seen[0]
    block = next(m for m in first["messages"] if "[contextwarden]" in json.dumps(m))
    assert block["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert json.dumps(first).count('"cache_control"') <= 4

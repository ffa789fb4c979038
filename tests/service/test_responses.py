"""OpenAI Responses through the proxy: input items of every kind, encrypted reasoning, hosted tools, streams."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from contextwarden.settings import Settings

from ._responses_upstream import ResponsesUpstream, call_item, text_item
from ._stored import stored
from .conftest import MODEL, Running, make_settings

INSTRUCTIONS = "You are Codex, a coding agent."
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB-opaque+/=="}
TOOLS = [
    {"type": "function", "name": "shell", "description": "Run a command.", "parameters": {"type": "object"}},
    {"type": "web_search"},
    {
        "type": "namespace",
        "name": "mcp__files",
        "description": "A file server.",
        "tools": [{"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}}],
    },
]


@pytest.fixture
def responses_upstream() -> Iterator[ResponsesUpstream]:
    with ResponsesUpstream() as server:
        yield server


@pytest.fixture
def codex_service(
    service_factory: Callable[[Settings], Running], responses_upstream: ResponsesUpstream, sqlite_url: str
) -> Running:
    return service_factory(make_settings(sqlite_url, responses_upstream.base_url))


def request(*items: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "instructions": INSTRUCTIONS,
        "input": list(items),
        "tools": TOOLS,
        "store": False,
        "prompt_cache_key": "pck",
        "include": ["reasoning.encrypted_content"],
        **extra,
    }


def said(role: str, text: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def test_every_input_item_goes_upstream_unchanged_and_the_reply_is_recorded(
    codex_service: Running, responses_upstream: ResponsesUpstream
) -> None:
    history = [
        said("developer", "sandbox: workspace-write"),
        said("user", "list the files"),
        REASONING,
        call_item("c1", "shell", '{"command": ["ls"]}'),
        {"type": "function_call_output", "call_id": "c1", "output": "a.py\nb.py"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "x"}},
    ]
    responses_upstream.push([text_item("Two files.")])
    r = codex_service.client.post("/v1/responses", json=request(*history), headers={"session-id": "cx"})
    assert r.status_code == 200, r.text
    assert r.json()["output"][0]["content"][0]["text"] == "Two files."
    sent = responses_upstream.requests[-1]
    assert sent["input"] == history
    assert sent["instructions"] == INSTRUCTIONS and sent["tools"] == TOOLS
    assert sent["store"] is False and sent["prompt_cache_key"] == "pck"
    assert stored(codex_service, "cx")[0] == ("system", INSTRUCTIONS)
    assert stored(codex_service, "cx")[-1] == ("assistant", "Two files.")

    follow = request(*history, text_item("Two files."), said("user", "thanks"))
    r = codex_service.client.post("/v1/responses", json=follow, headers={"session-id": "cx"})
    assert r.status_code == 200, r.text
    assert [role for role, _ in stored(codex_service, "cx")].count("assistant") >= 3
    assert responses_upstream.requests[-1]["input"][2] == REASONING  # encrypted content byte for byte


def test_a_streamed_response_is_relayed_event_by_event_and_recorded(
    codex_service: Running, responses_upstream: ResponsesUpstream
) -> None:
    responses_upstream.push([call_item("c9", "shell", '{"command": ["pytest"]}')])
    with codex_service.client.stream(
        "POST", "/v1/responses", json=request(said("user", "run the tests"), stream=True), headers={"session-id": "st"}
    ) as response:
        assert response.status_code == 200
        kinds = [json.loads(line[6:])["type"] for line in response.iter_lines() if line.startswith("data: ")]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in kinds
    session = codex_service.app.state.service.pool.loaded("default", "st")
    assert session.state.message(-1).tool_calls[0].name == "shell"


def test_previous_response_id_is_refused_with_how_to_configure_the_client(codex_service: Running) -> None:
    r = codex_service.client.post(
        "/v1/responses", json=request(said("user", "hi"), previous_response_id="resp_1"), headers={"session-id": "p"}
    )
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "previous_response_id" and "store: false" in error["message"]


def test_a_request_that_cannot_fit_is_context_length_exceeded(
    codex_service: Running, responses_upstream: ResponsesUpstream
) -> None:
    huge = " ".join(f"word{i}" for i in range(6000))
    r = codex_service.client.post("/v1/responses", json=request(said("user", huge)), headers={"session-id": "big"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "context_length_exceeded"
    assert not responses_upstream.requests

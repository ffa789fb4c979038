"""Another writer appends to a session while a request with proxy-answered read-back calls is in flight.

Whether the other writer's messages land before this request wrote anything or between its read-back
round and its reply, nothing either of them recorded is lost, every read-back call keeps its result in
the store, and the session this process keeps in memory is the store's transcript.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from contextwarden.adapters import to_messages
from contextwarden.messages import ToolCall
from contextwarden.settings import Settings
from contextwarden.stores import open_store
from contextwarden.testing import ScriptedOpenAIServer, ScriptedReply

from .conftest import SYSTEM, Running, assistant, chat, make_settings, user

READ = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}}}
NOTE = "a note another replica stored"


def _history() -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [SYSTEM, user("start"), assistant("ready"), user("read every file")]
    for i in range(8):
        call = {"id": f"call_{i}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
        history.append({"role": "assistant", "content": None, "tool_calls": [call]})
        history.append(
            {"role": "tool", "tool_call_id": f"call_{i}", "content": " ".join(f"l{i}_{j}" for j in range(400))}
        )
    return history


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "redis_store_url"))


@pytest.mark.parametrize("when", ["before the first write", "after the read-back round"])
def test_a_write_conflict_around_read_back_rounds_loses_nothing_and_keeps_the_session_current(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, store_url: str, when: str
) -> None:
    service = service_factory(make_settings(store_url, upstream.base_url))
    upstream.push("ready")
    first = service.client.post(
        "/v1/chat/completions", json=chat(SYSTEM, user("start")), headers={"X-Session-Id": "rb"}
    )
    assert first.status_code == 200, first.text

    calls: list[dict[str, Any]] = []

    def other_writer() -> None:
        with open_store(store_url) as other:
            other.append_messages("rb", to_messages([user(NOTE)], format="openai"), tenant="default")

    def model(body: dict[str, Any]) -> Any:
        calls.append(body)
        text = json.dumps(body["messages"])
        found = re.search(r"snap_[0-9a-f]+", text)
        if len(calls) == 1:
            if when == "before the first write":
                other_writer()
            assert found, "the view refers to no snapshot"
            return ScriptedReply(
                tool_calls=[
                    ToolCall(call_id="rb_1", name="read_context", arguments=json.dumps({"ref": found.group(0)}))
                ]
            )
        if when == "after the read-back round":
            other_writer()
        return ScriptedReply(text="all read")

    upstream.push(model, model)
    r = service.client.post(
        "/v1/chat/completions", json=chat(*_history(), tools=[READ]), headers={"X-Session-Id": "rb"}
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "all read"
    assert len(calls) == 2

    with open_store(store_url) as store:
        stored = store.load_messages("rb", tenant="default")
    texts = [m.text for m in stored]
    # nothing lost: the other writer's note, the client's messages, the read-back round and the reply
    assert texts.count(NOTE) == 1 and texts[-1] == "all read"
    assert texts.count("read every file") == 1 and sum(t.startswith("l7_0 ") for t in texts) == 1
    calls_stored = [c.call_id for m in stored for c in m.tool_calls]
    results_stored = [m.tool_call_id for m in stored if m.role == "tool"]
    assert "rb_1" in calls_stored and results_stored.count("rb_1") == 1
    assert calls_stored.index("rb_1") >= 0 and set(results_stored) <= set(calls_stored)
    # the session in memory is the store's transcript, not dropped
    entry = service.app.state.service.pool._open[("default", "rb")]
    assert [m.message_id for m in entry.session.engine.transcript] == [m.message_id for m in stored]

    # the next turn goes on from it
    upstream.push("noted")
    follow = chat(*_history(), assistant("all read"), user("thanks"), tools=[READ])
    r = service.client.post("/v1/chat/completions", json=follow, headers={"X-Session-Id": "rb"})
    assert r.status_code == 200, r.text

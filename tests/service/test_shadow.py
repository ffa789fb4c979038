"""Shadow mode: every request reaches the upstream as the client sent it; the session records the
conversation and computes the view it would have sent."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from contextwarden.testing import ScriptedOpenAIServer

from .conftest import MODEL, Running, assistant, chat, make_settings, user

SYSTEM = {"role": "system", "content": "You are a careful agent."}


def _long(turn: int) -> str:
    return f"Turn {turn}: " + " ".join(f"word{turn}_{i}" for i in range(250))


def test_shadow_mode_forwards_each_request_unchanged_and_computes_the_view(
    service_factory: Callable[..., Running], upstream: ScriptedOpenAIServer, sqlite_url: str
) -> None:
    service = service_factory(make_settings(sqlite_url, upstream.base_url, window=2000, shadow=True))
    history: list[dict[str, Any]] = [SYSTEM]
    sent: list[bytes] = []
    for turn in range(8):
        history.append(user(_long(turn)))
        upstream.push(f"answer {turn}")
        body = json.dumps(chat(*history)).encode()
        sent.append(body)
        response = service.client.post(
            "/v1/chat/completions",
            content=body,
            headers={"X-Session-Id": "shadowed", "content-type": "application/json"},
        )
        assert response.status_code == 200, response.text
        history.append(assistant(f"answer {turn}"))
    # the upstream saw exactly what the client sent, read_context never offered
    assert [json.loads(b) for b in sent] == upstream.requests[-8:]
    assert all("tools" not in r for r in upstream.requests[-8:])
    # while the session holds the whole conversation and the view it would send fits the window
    view = service.client.get("/v1/sessions/shadowed/view").json()
    assert view["status"]["used"] <= 2000
    assert len(view["messages"]) < len(history)
    listed = service.client.get("/v1/sessions").json()["data"]
    assert [s["message_count"] for s in listed if s["session_id"] == "shadowed"] == [len(history)]


def test_shadow_mode_forwards_a_request_it_could_not_fit(
    service_factory: Callable[..., Running], upstream: ScriptedOpenAIServer, sqlite_url: str
) -> None:
    service = service_factory(make_settings(sqlite_url, upstream.base_url, window=300, shadow=True))
    upstream.push("still answered")
    body = chat(SYSTEM, user(_long(0)))
    response = service.client.post("/v1/chat/completions", json=body, headers={"X-Session-Id": "too-big"})
    assert response.status_code == 200, response.text
    assert upstream.requests[-1] == body
    assert body["model"] == MODEL

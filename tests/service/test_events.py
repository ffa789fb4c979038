"""SSE events of a session over real HTTP: typed events, keep-alives, Last-Event-ID resume."""

from __future__ import annotations

from collections.abc import Callable

from contextwarden.settings import Settings
from contextwarden.testing import ScriptedOpenAIServer

from .conftest import SYSTEM, Running, chat, make_settings, user
from .sse import SSEReader


def test_status_events_arrive_with_keepalives_and_resume_after_the_last_id(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, sqlite_url: str
) -> None:
    service = service_factory(make_settings(sqlite_url, upstream.base_url, keepalive_seconds=0.2))
    headers = {"X-Session-Id": "ev"}
    assert service.client.post("/v1/chat/completions", json=chat(SYSTEM, user("a")), headers=headers).status_code == 200
    reader = SSEReader(f"{service.url}/v1/sessions/ev/events")
    try:
        reader.wait_for(lambda r: r.status == 200)
        reader.wait_for(lambda r: any(f.get("comment") == "keep-alive" for f in r.frames))
        history = [SYSTEM, user("a"), {"role": "assistant", "content": "ok"}, user("b")]
        assert service.client.post("/v1/chat/completions", json=chat(*history), headers=headers).status_code == 200
        reader.wait_for(lambda r: len(r.events("context.status")) >= 1)
        status = reader.events("context.status")[-1]
        assert {"used", "budget", "ratio", "state", "layer"} <= set(status["data"])
        assert status["data"]["session_id"] == "ev" and 0 < status["data"]["ratio"] < 1
        ids = [int(f["id"]) for f in reader.events()]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
    finally:
        reader.close()
    # a reconnecting client gets what came after the id it saw last, then live events
    first = ids[0]
    resumed = SSEReader(f"{service.url}/v1/sessions/ev/events", headers={"Last-Event-ID": str(first)})
    try:
        resumed.wait_for(lambda r: len(r.events()) >= 1)
        assert int(resumed.events()[0]["id"]) == first + 1
    finally:
        resumed.close()


def test_the_event_stream_is_never_compressed(service: Running, upstream: ScriptedOpenAIServer) -> None:
    service.client.post("/v1/chat/completions", json=chat(user("a")), headers={"X-Session-Id": "gz"})
    with service.client.stream("GET", "/v1/sessions/gz/events", headers={"Accept-Encoding": "gzip"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers.get("content-encoding", "identity") == "identity"
        assert next(response.iter_lines()) == "retry: 2000"

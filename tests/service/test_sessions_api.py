"""The sessions API over real HTTP: list, inspect, view, snapshots, compact, delete."""

from __future__ import annotations

from contextwarden.testing import ScriptedOpenAIServer

from .conftest import SYSTEM, Running, chat, user


def _talk(service: Running, session_id: str, turns: int = 3) -> None:
    history = [SYSTEM]
    for i in range(turns):
        history.append(user(f"question {i} " + "with some words " * 30))
        r = service.client.post("/v1/chat/completions", json=chat(*history), headers={"X-Session-Id": session_id})
        assert r.status_code == 200, r.text
        history.append(r.json()["choices"][0]["message"])


def test_list_show_view_compact_delete(service: Running, upstream: ScriptedOpenAIServer) -> None:
    _talk(service, "a")
    _talk(service, "b", turns=1)
    listed = service.client.get("/v1/sessions").json()
    assert [s["session_id"] for s in listed["data"]] == ["a", "b"]
    assert listed["data"][0]["message_count"] == 7
    assert 0 < listed["data"][0]["status"]["ratio"] < 1

    detail = service.client.get("/v1/sessions/a").json()
    assert detail["session"]["session_id"] == "a"
    assert set(detail["status"]["breakdown"]) == {"system", "context", "history", "tool_results"}
    assert detail["status"]["transcript_messages"] == 7
    assert "entries" in detail["ledger"] or detail["ledger"]

    view = service.client.get("/v1/sessions/a/view").json()
    assert view["messages"][0] == SYSTEM
    assert view["status"]["view_messages"] == len(view["messages"])

    compacted = service.client.post("/v1/sessions/a/compact").json()
    assert compacted["status"]["used"] <= compacted["tokens_before"]

    assert service.client.delete("/v1/sessions/a").json()["deleted"] is True
    gone = service.client.get("/v1/sessions/a")
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "session_not_found"
    assert [s["session_id"] for s in service.client.get("/v1/sessions").json()["data"]] == ["b"]


def test_a_snapshot_reads_back_by_page(service: Running, upstream: ScriptedOpenAIServer) -> None:
    _talk(service, "snap", turns=2)
    step = service.client.get("/v1/sessions/snap/snapshots/%231")
    assert step.status_code == 200, step.text
    assert "question 0" in step.json()["text"]
    missing = service.client.get("/v1/sessions/snap/snapshots/snap_nope")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "not_found_error"


def test_unknown_sessions_and_routes_are_404_in_openai_shape(service: Running) -> None:
    for path in ("/v1/sessions/nope", "/v1/sessions/nope/view", "/v1/sessions/nope/events", "/nothing"):
        r = service.client.get(path)
        assert r.status_code == 404, path
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    # another /v1 route is the upstream's: its own answer comes back
    assert service.client.get("/v1/nothing").status_code == 404

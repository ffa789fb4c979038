"""The proxy over real HTTP: the client's history in, the session's view to the upstream, the reply back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contextwarden.settings import Settings
from contextwarden.stores import open_store
from contextwarden.testing import ScriptedOpenAIServer, ScriptedReply

from ._stored import stored
from .conftest import SYSTEM, Running, assistant, chat, make_settings, user


def test_a_reply_passes_through_and_both_sides_land_in_the_transcript(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    upstream.push(ScriptedReply(text="Paris.", prompt_tokens=40, completion_tokens=2))
    response = service.client.post(
        "/v1/chat/completions", json=chat(SYSTEM, user("Capital of France?")), headers={"X-Session-Id": "s1"}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["choices"][0]["message"]["content"] == "Paris."
    assert body["usage"]["prompt_tokens"] == 40
    assert response.headers["x-session-id"] == "s1"
    sent = upstream.requests[-1]
    assert [m["role"] for m in sent["messages"]][:1] == ["system"]
    assert sent["messages"][-1] == {"role": "user", "content": "Capital of France?"}
    assert stored(service, "s1") == [
        ("system", "You are a careful agent."),
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
    ]


def test_the_re_sent_history_is_not_added_twice(service: Running, upstream: ScriptedOpenAIServer) -> None:
    upstream.push("first answer", "second answer", "third answer")
    history = [SYSTEM, user("one")]
    for turn, question in enumerate(["two", "three", None]):
        r = service.client.post("/v1/chat/completions", json=chat(*history), headers={"X-Session-Id": "s2"})
        assert r.status_code == 200, r.text
        # the client echoes the reply with the extra fields the OpenAI SDK adds
        echoed = {**r.json()["choices"][0]["message"], "refusal": None, "annotations": []}
        history += [echoed] + ([user(question)] if question else [])
        assert len(stored(service, "s2")) == 3 + 2 * turn
    assert [text for _, text in stored(service, "s2")] == [
        "You are a careful agent.",
        "one",
        "first answer",
        "two",
        "second answer",
        "three",
        "third answer",
    ]


def test_the_user_field_names_the_session_when_there_is_no_header(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    r = service.client.post("/v1/chat/completions", json=chat(user("hi"), user="agent-7"))
    assert r.status_code == 200
    assert stored(service, "agent-7") == [("user", "hi"), ("assistant", "ok")]


def test_without_a_session_the_request_passes_through_unmanaged(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    r = service.client.post("/v1/chat/completions", json=chat(user("hi"), temperature=0.2, seed=7))
    assert r.status_code == 200
    assert upstream.requests[-1] == chat(user("hi"), temperature=0.2, seed=7)
    listed = service.client.get("/v1/sessions").json()
    assert listed["data"] == []


def test_other_request_fields_reach_the_upstream_unchanged(service: Running, upstream: ScriptedOpenAIServer) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    extra = {
        "temperature": 0.1,
        "tools": tools,
        "tool_choice": "auto",
        "response_format": {"type": "text"},
        "seed": 2**70 + 1,  # past 64 bits: still an exact integer upstream
        "metadata": {"note": "caf\u00e9 \U0001f600", "big": 12345678901234567890123},
    }
    r = service.client.post("/v1/chat/completions", json=chat(user("go"), **extra), headers={"X-Session-Id": "s3"})
    assert r.status_code == 200
    sent = upstream.requests[-1]
    assert {k: sent[k] for k in extra} == extra


def test_a_long_session_is_compacted_before_it_reaches_the_upstream(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    history = [SYSTEM]
    for i in range(40):
        history.append(user(f"step {i}: " + "the build log says nothing new here " * 12))
        r = service.client.post("/v1/chat/completions", json=chat(*history), headers={"X-Session-Id": "long"})
        assert r.status_code == 200, r.text
        history.append(r.json()["choices"][0]["message"])
    last = upstream.requests[-1]["messages"]
    assert len(last) < len(history) - 1  # the upstream got the compacted view, not the whole history
    assert last[0]["role"] == "system" and last[-1]["content"].startswith("step 39:")
    assert len(stored(service, "long")) == len(history)  # the transcript keeps everything
    detail = service.client.get("/v1/sessions/long").json()
    assert sum(detail["status"]["compactions"].values()) >= 1
    assert detail["status"]["used"] <= detail["status"]["budget"]


def _tool_rounds(count: int) -> list[dict[str, Any]]:
    """``count`` rounds of a user request, a tool call, its result and an answer."""
    history: list[dict[str, Any]] = [SYSTEM]
    for n in range(count):
        call = {"id": f"call_{n}", "type": "function", "function": {"name": "read", "arguments": f'{{"n": {n}}}'}}
        history += [
            user(f"read part {n}"),
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{n}", "content": f"part {n} says {n * n}"},
            assistant(f"part {n} read"),
        ]
    return history


def test_a_client_joining_with_a_long_history_stores_it_once_and_in_order(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, sqlite_url: str
) -> None:
    service = service_factory(make_settings(sqlite_url, upstream.base_url, window=128_000))
    history = _tool_rounds(60) + [user("summarize")]
    r = service.client.post("/v1/chat/completions", json=chat(*history), headers={"X-Session-Id": "long"})
    assert r.status_code == 200, r.text
    url = service.app.state.service.settings.store_url
    with open_store(url) as store:
        kept = store.load_messages("long", tenant="default")
    assert [m.role for m in kept] == [m["role"] for m in history] + ["assistant"]
    assert [m.tool_calls[0].name for m in kept if m.tool_calls] == ["read"] * 60
    # as the client wrote it, a tool call's null content as "" (the servers that refuse null accept that)
    sent = [{**m, "content": ""} if m.get("tool_calls") and m["content"] is None else m for m in history[1:]]
    assert upstream.requests[-1]["messages"][1:] == sent
    history += [assistant("ok"), user("and now?")]
    r = service.client.post("/v1/chat/completions", json=chat(*history), headers={"X-Session-Id": "long"})
    assert r.status_code == 200, r.text
    assert len(stored(service, "long")) == len(history) + 1


def test_a_bad_message_late_in_a_long_history_is_a_400_and_nothing_of_it_is_kept(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, sqlite_url: str
) -> None:
    service = service_factory(make_settings(sqlite_url, upstream.base_url, window=128_000))
    history = _tool_rounds(60) + [user("summarize")]
    broken = list(history)
    broken[201] = {"role": "tool", "tool_call_id": "call_unknown", "content": "stray"}  # answers no call
    r = service.client.post("/v1/chat/completions", json=chat(*broken), headers={"X-Session-Id": "bad"})
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("messages[201]")
    assert service.client.get("/v1/sessions").json()["data"] == []  # a refused request leaves no session
    r = service.client.post("/v1/chat/completions", json=chat(*history), headers={"X-Session-Id": "bad"})
    assert r.status_code == 200, r.text
    assert len(stored(service, "bad")) == len(history) + 1


def test_several_choices_record_no_reply_and_the_clients_pick_comes_with_its_next_request(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    headers = {"X-Session-Id": "n2"}
    r = service.client.post("/v1/chat/completions", json=chat(SYSTEM, user("name a colour"), n=2), headers=headers)
    assert r.status_code == 200
    assert stored(service, "n2") == [("system", "You are a careful agent."), ("user", "name a colour")]
    picked = chat(SYSTEM, user("name a colour"), assistant("blue"), user("why?"))
    r = service.client.post("/v1/chat/completions", json=picked, headers=headers)
    assert r.status_code == 200 and r.headers["x-session-id"] == "n2"
    assert stored(service, "n2")[2:] == [("assistant", "blue"), ("user", "why?"), ("assistant", "ok")]


def test_a_request_with_no_identity_passes_through_and_is_counted(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    r = service.client.post("/v1/chat/completions", json=chat(SYSTEM, user("who am I?")))
    assert r.status_code == 200 and "x-session-id" not in r.headers
    assert upstream.requests[-1]["messages"] == [SYSTEM, user("who am I?")]
    metrics = service.app.state.service.metrics.render().decode()
    assert 'contextwarden_unmanaged_requests_total{reason="no_session"} 1.0' in metrics


def test_the_fingerprint_names_a_conversation_that_sends_no_session(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, sqlite_url: str
) -> None:
    service = service_factory(make_settings(sqlite_url, upstream.base_url, session_fingerprint=True))
    first = service.client.post("/v1/chat/completions", json=chat(SYSTEM, user("plan the work")))
    session = first.headers["x-session-id"]
    assert session.startswith("fp_")
    follow = chat(SYSTEM, user("plan the work"), assistant("ok"), user("go"))
    assert service.client.post("/v1/chat/completions", json=follow).headers["x-session-id"] == session
    assert [text for _, text in stored(service, session)][1:] == ["plan the work", "ok", "go", "ok"]

"""Tenants, API keys, limits, timeouts and OpenAI-style errors over real HTTP."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import httpx
import pytest

from contextwarden.service import hash_key
from contextwarden.settings import Settings
from contextwarden.testing import ScriptedDisconnect, ScriptedError, ScriptedOpenAIServer, ScriptedReply

from ._stored import stored
from .conftest import Running, chat, make_settings, user

SECRET = "sk-upstream-secret-do-not-leak"


def _error(response: httpx.Response, status: int) -> dict:  # type: ignore[type-arg]
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error  # type: ignore[no-any-return]


@pytest.fixture
def keyed(
    service_factory: Callable[[Settings], Running],
    upstream: ScriptedOpenAIServer,
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Running:
    monkeypatch.setenv("CW_TEST_UPSTREAM_KEY", SECRET)
    keys = [
        {"tenant": "acme", "key_sha256": hash_key("key-acme")},
        {"tenant": "globex", "key_sha256": hash_key("key-globex")},
    ]
    return service_factory(make_settings(sqlite_url, upstream.base_url, api_keys=keys))


def test_keys_map_to_tenants_and_a_tenant_never_sees_another_tenants_session(
    keyed: Running, upstream: ScriptedOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    acme = {"Authorization": "Bearer key-acme", "X-Session-Id": "shared"}
    globex = {"Authorization": "Bearer key-globex", "X-Session-Id": "shared"}
    secret_text = "my account number is 4417-1234"
    assert keyed.client.post("/v1/chat/completions", json=chat(user(secret_text)), headers=acme).status_code == 200
    # the upstream got the service's key, never the client's
    assert upstream.received[-1].headers["authorization"] == f"Bearer {SECRET}"
    assert keyed.client.get("/v1/sessions/shared", headers=acme).status_code == 200
    _error(keyed.client.get("/v1/sessions/shared", headers=globex), 404)
    _error(keyed.client.get("/v1/sessions/shared/events", headers=globex), 404)
    _error(keyed.client.delete("/v1/sessions/shared", headers=globex), 404)
    assert keyed.client.get("/v1/sessions", headers=globex).json()["data"] == []
    # the same id under globex is globex's own session: created, and acme's is untouched
    assert keyed.client.post("/v1/chat/completions", json=chat(user("x")), headers=globex).status_code == 200
    assert [s["session_id"] for s in keyed.client.get("/v1/sessions", headers=globex).json()["data"]] == ["shared"]
    assert [s["session_id"] for s in keyed.client.get("/v1/sessions", headers=acme).json()["data"]] == ["shared"]
    assert keyed.client.get("/v1/sessions/shared", headers=acme).json()["session"]["message_count"] == 2
    assert _error(keyed.client.get("/v1/sessions"), 401)["code"] == "invalid_api_key"
    _error(keyed.client.get("/v1/sessions", headers={"Authorization": "Bearer wrong"}), 401)
    logged = caplog.text
    assert "chat.completions tenant=acme session=shared" in logged
    assert SECRET not in logged and "key-acme" not in logged and secret_text not in logged


def test_an_upstream_refusing_the_service_key_is_a_502_that_does_not_show_it(
    keyed: Running, upstream: ScriptedOpenAIServer
) -> None:
    upstream.push(ScriptedError(status=401, message=f"Incorrect API key provided: {SECRET}", type="invalid_api_key"))
    r = keyed.client.post(
        "/v1/chat/completions", json=chat(user("x")), headers={"Authorization": "Bearer key-acme", "X-Session-Id": "k"}
    )
    assert _error(r, 502)["code"] == "upstream_error"
    assert SECRET not in r.text


def test_bad_requests_are_400_in_openai_shape(service: Running) -> None:
    post = service.client.post
    json_type = {"content-type": "application/json"}
    assert _error(post("/v1/chat/completions", content=b"{not json", headers=json_type), 400)["code"] == "invalid_json"
    assert _error(post("/v1/chat/completions", json=[1, 2]), 400)["code"] == "invalid_json"
    assert _error(post("/v1/chat/completions", json={"model": "m", "messages": "hi"}), 400)["param"] == "messages"
    assert _error(post("/v1/chat/completions", json={"messages": [user("x")]}), 400)["param"] == "model"
    bad_stream = chat(user("x"), stream="yes")
    assert _error(post("/v1/chat/completions", json=bad_stream), 400)["param"] == "stream"
    unknown = {"model": "no-such-model-zzz", "messages": [user("x")]}
    error = _error(post("/v1/chat/completions", json=unknown, headers={"X-Session-Id": "u"}), 400)
    assert error["code"] == "unknown_model" and "no-such-model-zzz" in error["message"]
    long_id = {"X-Session-Id": "s" * 300}
    assert (
        _error(post("/v1/chat/completions", json=chat(user("x")), headers=long_id), 400)["code"] == "invalid_session_id"
    )
    orphan = chat({"role": "tool", "tool_call_id": "call_nope", "content": "result"})
    assert _error(post("/v1/chat/completions", json=orphan, headers={"X-Session-Id": "o"}), 400)["param"] == "messages"


def test_a_session_id_can_be_required(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, sqlite_url: str
) -> None:
    service = service_factory(make_settings(sqlite_url, upstream.base_url, require_session_id=True))
    error = _error(service.client.post("/v1/chat/completions", json=chat(user("x"))), 400)
    assert error["code"] == "missing_session_id"


def test_a_body_over_the_limit_is_413(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, sqlite_url: str
) -> None:
    service = service_factory(make_settings(sqlite_url, upstream.base_url, max_body_bytes=2000))
    big = chat(user("x" * 5000))
    assert _error(service.client.post("/v1/chat/completions", json=big), 413)["code"] == "request_too_large"
    chunked = service.client.post(
        "/v1/chat/completions",
        content=iter([b"{" + b" " * 1500, b" " * 1500 + b"}"]),
        headers={"content-type": "application/json"},
    )
    _error(chunked, 413)
    assert upstream.requests == []


def test_a_tenant_over_its_concurrency_limit_gets_429(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, sqlite_url: str
) -> None:
    service = service_factory(make_settings(sqlite_url, upstream.base_url, max_concurrent_per_tenant=1))
    upstream.push(ScriptedReply(text="slow", delay=1.0))
    results: list[int] = []
    slow = threading.Thread(
        target=lambda: results.append(
            httpx.post(f"{service.url}/v1/chat/completions", json=chat(user("a")), timeout=10).status_code
        )
    )
    slow.start()
    deadline = threading.Event()
    while not upstream.requests and not deadline.wait(0.01):
        pass
    r = service.client.post("/v1/chat/completions", json=chat(user("b")))
    assert _error(r, 429)["code"] == "concurrency_limit_exceeded"
    assert r.headers["retry-after"] == "1"
    slow.join()
    assert results == [200]


def test_upstream_failures_keep_their_status_and_leave_the_session_whole(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, sqlite_url: str
) -> None:
    service = service_factory(make_settings(sqlite_url, upstream.base_url, upstream_timeout=0.5))
    headers = {"X-Session-Id": "f"}
    post = service.client.post
    upstream.push(
        ScriptedReply(text="too late", delay=2.0),
        ScriptedError.server_error(503),
        ScriptedError(status=200, body="<html>not an API</html>"),
        ScriptedDisconnect(),
        ScriptedError.rate_limited(retry_after=3),
        "finally",
    )

    def ask() -> httpx.Response:
        return post("/v1/chat/completions", json=chat(user("q")), headers=headers)

    assert _error(ask(), 504)["code"] == "upstream_timeout"
    assert _error(ask(), 503)["type"] == "server_error"  # the upstream's own error, its status kept
    assert _error(ask(), 502)["code"] == "upstream_bad_reply"
    _error(ask(), 502)
    limited = ask()
    assert limited.status_code == 429 and limited.headers["retry-after"] == "3"
    assert ask().status_code == 200
    # every retry re-sent the same message: it is in the transcript once, with the one reply
    assert stored(service, "f") == [("user", "q"), ("assistant", "finally")]


def test_a_streamed_timeout_mid_stream_ends_with_an_error_event(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, sqlite_url: str
) -> None:
    # the first chunk comes at once and the second after the timeout, with room for a loaded machine
    service = service_factory(make_settings(sqlite_url, upstream.base_url, upstream_timeout=1.5))
    upstream.push(ScriptedReply(text="a b c d e f", chunk_delay=4.0))
    with service.client.stream(
        "POST", "/v1/chat/completions", json=chat(user("s"), stream=True), headers={"X-Session-Id": "t"}
    ) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]
    assert '"code": "upstream_timeout"' in lines[-1]
    assert service.client.get("/v1/sessions").json()["data"] == []  # the failed request made the session: not kept

"""The service under attack: cross-site writes, leaked keys, lost replies, bad input, over real HTTP."""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from contextwarden.exceptions import ConfigError
from contextwarden.settings import Settings, validate_config_file
from contextwarden.testing import ScriptedError, ScriptedOpenAIServer, ScriptedStream

from ._cut_upstream import REPLY, responses_events
from ._raw_upstream import RawAnswer, RawUpstream
from ._stored import stored
from .conftest import MODEL, Running, chat, make_settings, user

UPSTREAM_KEY = "sk-live-UPSTREAMSECRET0123456789"


@pytest.fixture(autouse=True)
def _upstream_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CW_TEST_UPSTREAM_KEY", UPSTREAM_KEY)


def data_events(text: str) -> list[str]:
    return [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]


def _stored(service: Running, session_id: str) -> list[dict[str, Any]]:
    response = service.client.get(f"/v1/sessions/{session_id}/view")
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


# --- cross-site writes --------------------------------------------------------------------------


def test_a_cross_site_text_plain_write_is_refused_before_anything_is_stored(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    body = json.dumps(chat(user("from evil.example"), user="victim-session"))
    no_cors = service.client.post(
        "/v1/chat/completions",
        content=body,
        headers={"content-type": "text/plain;charset=UTF-8", "origin": "https://evil.example"},
    )
    assert no_cors.status_code == 403 and no_cors.json()["error"]["code"] == "cross_origin_refused"
    plain = service.client.post("/v1/chat/completions", content=body, headers={"content-type": "text/plain"})
    assert plain.status_code == 415 and plain.json()["error"]["code"] == "unsupported_media_type"
    assert upstream.requests == []
    assert service.client.get("/v1/sessions/victim-session").status_code == 404


def test_dns_rebinding_is_refused_and_the_service_s_own_pages_pass(service: Running) -> None:
    rebound = service.client.get("/v1/sessions", headers={"host": "evil.example:8787", "sec-fetch-site": "same-origin"})
    assert rebound.status_code == 403 and rebound.json()["error"]["code"] == "host_not_allowed"
    own = f"http://127.0.0.1:{service.port}"
    same = service.client.post(
        "/v1/chat/completions", json=chat(user("hi")), headers={"origin": own, "x-session-id": "mine"}
    )
    assert same.status_code == 200, same.text


def test_an_allowed_origin_may_write(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, sqlite_url: str
) -> None:
    service = service_factory(make_settings(sqlite_url, upstream.base_url, allowed_origins=["https://app.example"]))
    answer = service.client.post(
        "/v1/chat/completions", json=chat(user("hi")), headers={"origin": "https://app.example"}
    )
    assert answer.status_code == 200, answer.text


def test_the_dashboard_carries_a_content_security_policy_and_nosniff(service: Running) -> None:
    page = service.client.get("/")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert service.client.get("/healthz").headers["x-content-type-options"] == "nosniff"


# --- credentials ----------------------------------------------------------------------------------


@pytest.fixture
def leaky_upstream() -> Iterator[ScriptedOpenAIServer]:
    leak = f"Incorrect API key provided: Bearer {UPSTREAM_KEY}. You can find your API key at ..."
    script = [
        ScriptedError(status=400, message=leak, type="invalid_request_error", code="invalid_api_key"),
        ScriptedError(status=200, body={"error": {"message": leak}}, in_stream=True),
        ScriptedStream(events=[{"choices": [{"index": 0, "delta": {"content": "a"}}]}, {"error": {"message": leak}}]),
    ]
    with ScriptedOpenAIServer(script, default="ok", model=MODEL) as server:
        yield server


def test_an_upstream_error_quoting_the_key_reaches_neither_client_nor_log(
    service_factory: Callable[[Settings], Running],
    leaky_upstream: ScriptedOpenAIServer,
    sqlite_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = service_factory(make_settings(sqlite_url, leaky_upstream.base_url))
    caplog.set_level(logging.DEBUG, logger="contextwarden")
    plain = service.client.post("/v1/chat/completions", json=chat(user("a")))
    assert plain.status_code == 400 and UPSTREAM_KEY not in plain.text and "[redacted]" in plain.text
    first = service.client.post("/v1/chat/completions", json=chat(user("b"), stream=True))
    assert first.status_code == 502 and UPSTREAM_KEY not in first.text
    mid = service.client.post("/v1/chat/completions", json=chat(user("c"), stream=True))
    assert UPSTREAM_KEY not in mid.text and "[redacted]" in mid.text
    assert leaky_upstream.received[0].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert all(UPSTREAM_KEY not in record.getMessage() for record in caplog.records)


# --- /metrics and configuration -------------------------------------------------------------------


def test_metrics_name_no_session_by_default_and_need_the_token_when_one_is_set(
    service_factory: Callable[[Settings], Running],
    upstream: ScriptedOpenAIServer,
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CW_TEST_METRICS_TOKEN", "metrics-token-123")
    service = service_factory(make_settings(sqlite_url, upstream.base_url, metrics_token_env="CW_TEST_METRICS_TOKEN"))
    service.client.post("/v1/chat/completions", json=chat(user("hi")), headers={"x-session-id": "acme-r1"})
    assert service.client.get("/metrics").status_code == 401
    text = service.client.get("/metrics", headers={"authorization": "Bearer metrics-token-123"}).text
    assert "contextwarden_requests_total" in text and "acme-r1" not in text


def test_config_refuses_one_digest_for_two_tenants_and_control_characters_in_names(tmp_path: Any) -> None:
    digest = "ab" * 32
    with pytest.raises(ValueError, match="digest of tenant 'a'"):
        Settings(
            service={"api_keys": [{"tenant": "a", "key_sha256": digest}, {"tenant": "b", "key_sha256": digest.upper()}]}
        )
    with pytest.raises(ValueError, match="U\\+0007"):
        Settings(service={"api_keys": [{"tenant": "bad\x07", "key_sha256": digest}]})
    path = tmp_path / "c.toml"
    path.write_text(
        f'[[service.api_keys]]\ntenant = "a"\nkey_sha256 = "{digest}"\n'
        f'[[service.api_keys]]\ntenant = "b"\nkey_sha256 = "{digest.upper()}"\n'
    )
    problems = validate_config_file(path, environment=False)
    assert problems and "digest of tenant" in problems[0].message
    assert ConfigError  # the CLI reports these as configuration problems


# --- paid replies are kept ------------------------------------------------------------------------


def _reply(message: dict[str, Any], *, finish: str = "tool_calls", usage: Any = None) -> ScriptedError:
    body = {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage if usage is not None else {"prompt_tokens": 5, "completion_tokens": 3},
    }
    return ScriptedError(status=200, body=body)


def _call(call_id: Any, arguments: Any, name: str = "lookup") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


HOSTILE_REPLIES = {
    "cut-off arguments": _reply(
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", '{"q": "ab')]}, finish="length"
    ),
    "duplicate ids": _reply(
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "{}"), _call("c1", "{}")]}
    ),
    "object arguments": _reply({"role": "assistant", "content": None, "tool_calls": [_call("c1", {"q": 1})]}),
    "missing id": _reply({"role": "assistant", "content": None, "tool_calls": [_call(None, "{}")]}),
    "integer id": _reply({"role": "assistant", "content": None, "tool_calls": [_call(7, "{}")]}),
    "lone surrogate": _reply({"role": "assistant", "content": "bad \ud800 text"}, finish="stop"),
    "deep arguments": _reply(
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", '{"a":' + "[" * 150 + "]" * 150 + "}")]}
    ),
    "negative usage": _reply(
        {"role": "assistant", "content": "fine"}, finish="stop", usage={"prompt_tokens": -5000, "completion_tokens": 1}
    ),
    "huge usage": _reply(
        {"role": "assistant", "content": "fine"},
        finish="stop",
        usage={"prompt_tokens": 10**400, "completion_tokens": 1},
    ),
    "deep extra field": ScriptedError(
        status=200,
        body='{"choices": [{"index": 0, "message": {"role": "assistant", "content": "kept"}, "finish_reason": "stop"}],'
        ' "extra": ' + "[" * 3000 + "]" * 3000 + "}",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_REPLIES))
def test_a_reply_the_library_would_keep_is_kept_and_returned(
    case: str, service_factory: Callable[[Settings], Running], sqlite_url: str
) -> None:
    with ScriptedOpenAIServer([HOSTILE_REPLIES[case]], default="ok", model=MODEL) as upstream:
        service = service_factory(make_settings(sqlite_url, upstream.base_url))
        answer = service.client.post("/v1/chat/completions", json=chat(user("go")), headers={"x-session-id": "paid"})
        assert answer.status_code == 200, answer.text
        stored = _stored(service, "paid")
        assert [m["role"] for m in stored] == ["user", "assistant"]


def test_a_streamed_reply_with_cut_off_arguments_is_kept_and_ends_with_done(
    service_factory: Callable[[Settings], Running], sqlite_url: str
) -> None:
    events = [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": '{"a": "x'}}]
                    },
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
    ]
    with ScriptedOpenAIServer([ScriptedStream(events=events)], default="ok", model=MODEL) as upstream:
        service = service_factory(make_settings(sqlite_url, upstream.base_url))
        answer = service.client.post(
            "/v1/chat/completions", json=chat(user("go"), stream=True), headers={"x-session-id": "streamed"}
        )
        assert answer.status_code == 200 and data_events(answer.text)[-1] == "[DONE]"
        assert [m["role"] for m in _stored(service, "streamed")] == ["user", "assistant"]


def test_replies_that_reuse_the_upstreams_earlier_item_ids_are_each_stored(
    service_factory: Callable[[Settings], Running], sqlite_url: str
) -> None:
    # a server that numbers its output items per reply: every reply's message is ``msg_cut0``
    # (a reply with an earlier one's id and text too: not a copy to skip, a new answer to the new question)
    texts = iter(["same answer", "same answer", "other answer"])

    def answer(path: str, body: bytes) -> RawAnswer:
        if json.loads(body).get("stream"):  # the same stream, ids and text, every time
            return 200, {"content-type": "text/event-stream"}, responses_events(0)
        item = {"type": "message", "id": "msg_cut0", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": next(texts), "annotations": []}]}  # fmt: skip
        reply = {"id": "resp_1", "object": "response", "status": "completed", "model": MODEL, "output": [item]}
        return 200, {"content-type": "application/json"}, [json.dumps(reply).encode()]

    with RawUpstream(answer) as upstream:
        service = service_factory(make_settings(sqlite_url, upstream.base_url))
        history: list[dict[str, Any]] = [user("one")]
        expected: list[tuple[str, str]] = []
        plain = [(False, "same answer"), (False, "same answer"), (False, "other answer")]
        replies = [*plain, (True, REPLY), (True, REPLY)]
        for turn, (stream, reply) in enumerate(replies):
            body = {"model": MODEL, "input": history, "store": False, "stream": stream}
            answered = service.client.post("/v1/responses", json=body, headers={"x-session-id": "ids"})
            assert answered.status_code == 200 and reply in answered.text, answered.text[:300]
            expected += [("user", history[-1]["content"]), ("assistant", reply)]
            assert stored(service, "ids") == expected, turn
            history += [{"role": "assistant", "content": reply}, user(f"next {turn}")]


@pytest.mark.parametrize("name", ["東京の会議", "اجتماع", "zero\u200bwidth"])
def test_a_non_ascii_session_id_comes_back_percent_encoded(service: Running, name: str) -> None:
    answer = service.client.post("/v1/chat/completions", json=chat(user("hi"), user=name))
    assert answer.status_code == 200, answer.text
    assert unquote(answer.headers["x-session-id"]) == name


# --- bad input gets a 400 that names the field ----------------------------------------------------


def test_deep_bodies_bad_stream_options_and_lone_surrogates_are_400s_naming_the_field(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    post = service.client.post
    headers = {"content-type": "application/json"}
    deep = b'{"model": "' + MODEL.encode() + b'", "messages": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    error = post("/v1/chat/completions", content=deep, headers=headers)
    assert error.status_code == 400 and error.json()["error"]["param"] == "messages"
    options = post("/v1/chat/completions", json=chat(user("x"), stream=True, stream_options="yes"))
    assert options.status_code == 400 and options.json()["error"]["param"] == "stream_options"
    lone = b'{"model": "m\\ud800", "messages": [{"role": "user", "content": "x"}]}'
    surrogate = post("/v1/chat/completions", content=lone, headers=headers)
    assert surrogate.status_code == 400 and surrogate.json()["error"]["param"] == "model"
    assert upstream.requests == []


def test_a_client_that_sends_no_json_type_gets_415_not_a_crash() -> None:
    # what a browser's no-cors fetch sends; checked without a server by the guard alone
    from contextwarden.service.guard import GuardPolicy, refusal

    scope = {"type": "http", "method": "POST", "headers": [(b"content-length", b"10"), (b"host", b"127.0.0.1")]}
    assert refusal(scope, GuardPolicy()) == refusal(scope, GuardPolicy()) and refusal(scope, GuardPolicy())[0] == 415  # type: ignore[index]
    assert httpx  # the server tests above use it through the fixtures


# --- memory stays bounded -------------------------------------------------------------------------


def _json_answer(size: int) -> RawAnswer:
    filler = "x" * size
    body = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": filler}}]}).encode()
    return 200, {"content-type": "application/json"}, [body]


def _endless(path: str, body: bytes) -> RawAnswer:
    event = b'data: {"choices": [{"index": 0, "delta": {"content": "' + b"y" * 1000 + b'"}}]}\n\n'
    return 200, {"content-type": "text/event-stream"}, itertools.repeat(event)


def _no_blank_line(path: str, body: bytes) -> RawAnswer:
    return 200, {"content-type": "text/event-stream"}, itertools.repeat(b"data: " + b"z" * 1000)


def test_a_reply_past_the_size_bound_is_a_502_naming_the_setting(
    service_factory: Callable[[Settings], Running], sqlite_url: str
) -> None:
    with RawUpstream(lambda path, body: _json_answer(2_000_000)) as upstream:
        service = service_factory(make_settings(sqlite_url, upstream.base_url, max_reply_bytes=100_000))
        answer = service.client.post("/v1/chat/completions", json=chat(user("big")))
        assert answer.status_code == 502 and "max_reply_bytes" in answer.json()["error"]["message"]


def test_an_endless_stream_is_cut_with_an_error_event(
    service_factory: Callable[[Settings], Running], sqlite_url: str
) -> None:
    with RawUpstream(_endless) as upstream:
        service = service_factory(make_settings(sqlite_url, upstream.base_url, max_stream_bytes=200_000))
        answer = service.client.post("/v1/chat/completions", json=chat(user("go"), stream=True))
        assert answer.status_code == 200
        last = json.loads(data_events(answer.text)[-1])
        assert last["error"]["code"] == "upstream_stream_too_long" and len(answer.content) < 400_000


def test_an_event_without_its_blank_line_is_refused_past_the_event_bound(
    service_factory: Callable[[Settings], Running], sqlite_url: str
) -> None:
    with RawUpstream(_no_blank_line) as upstream:
        service = service_factory(make_settings(sqlite_url, upstream.base_url, max_event_bytes=50_000))
        answer = service.client.post("/v1/chat/completions", json=chat(user("go"), stream=True))
        assert answer.status_code == 502 and answer.json()["error"]["code"] == "upstream_event_too_large"


def test_a_first_stream_event_nested_thousands_deep_is_skipped_not_a_500(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    upstream.push(ScriptedStream(events=['{"choices":' + "[" * 3000 + "]" * 3000 + "}"]))
    answer = service.client.post(
        "/v1/chat/completions", json=chat(user("go"), stream=True), headers={"X-Session-Id": "d"}
    )
    assert answer.status_code == 200, answer.text
    assert data_events(answer.text)[-1] == "[DONE]"


def test_refused_session_ids_leave_no_lock_behind(service: Running) -> None:
    for i in range(60):
        answer = service.client.post("/v1/chat/completions", json=chat(user("x"), user=f"{i}-" + "s" * 300))
        assert answer.status_code == 400
    assert len(service.app.state.service.pool._locks) == 0


def test_a_cursor_with_a_control_character_is_a_400_naming_it(service: Running) -> None:
    answer = service.client.get("/v1/sessions", params={"cursor": "\x00"})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "cursor"


def test_a_user_message_larger_than_the_window_is_a_400(service: Running, upstream: ScriptedOpenAIServer) -> None:
    huge = chat(user("word " * 20_000))
    answer = service.client.post("/v1/chat/completions", json=huge, headers={"x-session-id": "huge"})
    assert 400 <= answer.status_code < 500, answer.text


def test_a_redis_database_out_of_range_is_a_503_store_error(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer
) -> None:
    from _services import REDIS_URL

    base = REDIS_URL.rsplit("/", 1)[0] if REDIS_URL.count("/") > 2 else REDIS_URL
    service = service_factory(make_settings(f"{base}/99?prefix=cw-attack", upstream.base_url))
    answer = service.client.post("/v1/chat/completions", json=chat(user("hi")), headers={"x-session-id": "s"})
    assert answer.status_code == 503, answer.text


def test_a_retry_storm_stores_one_reply_and_sends_one_upstream(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    request = chat(user("the same question"))
    for _ in range(20):
        answer = service.client.post("/v1/chat/completions", json=request, headers={"x-session-id": "storm"})
        assert answer.status_code == 200, answer.text
    info = service.client.get("/v1/sessions/storm").json()["session"]
    assert info["message_count"] == 2
    follow = chat(user("the same question"), answer.json()["choices"][0]["message"], user("next"))
    assert (
        service.client.post("/v1/chat/completions", json=follow, headers={"x-session-id": "storm"}).status_code == 200
    )
    sent = upstream.requests[-1]["messages"]
    assert sum(1 for m in sent if m["role"] == "assistant") == 1


def test_negative_usage_in_a_streamed_responses_reply_is_unreported_not_a_broken_stream(
    service_factory: Callable[[Settings], Running], sqlite_url: str
) -> None:
    completed = {
        "type": "response.completed",
        "response": {
            "id": "resp_1",
            "object": "response",
            "status": "completed",
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
            "usage": {"input_tokens": -1, "output_tokens": 1},
        },
    }
    frame = f"data: {json.dumps(completed)}\n\n".encode()
    with RawUpstream(lambda path, body: (200, {"content-type": "text/event-stream"}, [frame])) as upstream:
        service = service_factory(make_settings(sqlite_url, upstream.base_url))
        answer = service.client.post(
            "/v1/responses", json={"model": MODEL, "input": "hi", "stream": True}, headers={"x-session-id": "neg"}
        )
        assert answer.status_code == 200 and "response.completed" in answer.text

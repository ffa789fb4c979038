"""The HTTP surface of every dialect under hostile input: a real `serve` over a scripted, hostile upstream.

Hypothesis generates client bodies (JSON of every shape, raw bytes, deep nesting), headers
(content types, origins, session ids) and upstream replies (JSON bodies and SSE streams for
Chat Completions, Anthropic Messages and Responses, error bodies quoting the upstream key). Every
exchange must hold:

1. the answer is a well-formed HTTP response; an error is in the dialect's error shape with a
   4xx for the client's mistakes and a 5xx for the upstream's (never a 500 "internal_error");
2. no credential (the upstream key, a tenant's API key) appears in a response or a log line;
3. a chat-completions reply the service acknowledged (200 for a request naming a session) is in
   the store: the session holds the user message and the assistant reply;
4. no tenant reads another tenant's session;
5. the process grows by less than `RSS_BOUND` over the run.

The default run is derandomized and bounded (CI); ``make fuzz`` runs it with random seeds and ten
times the examples.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given, strategies as st

from service._raw_upstream import RawAnswer, RawUpstream
from service.conftest import MODEL, Running, make_settings, start_service

from ._harness import Failed, fuzz_settings, probe

UPSTREAM_KEY = "sk-proj-FUZZUPSTREAMKEY000111222333"
TENANT_KEYS = {"acme": "cw-acme-key-0123456789", "beta": "cw-beta-key-9876543210"}
SECRETS = (UPSTREAM_KEY, *TENANT_KEYS.values())
RSS_BOUND = 256 * 1024 * 1024
"""Largest growth of the process's resident memory over one test's run."""

ROUTES = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# --- the hostile upstream -----------------------------------------------------------------------


class Script:
    """The upstream's next answer, set by each example (one request in flight at a time)."""

    def __init__(self) -> None:
        self.answer: RawAnswer = (200, {"content-type": "application/json"}, [b"{}"])
        self.lock = threading.Lock()

    def __call__(self, path: str, body: bytes) -> RawAnswer:
        with self.lock:
            return self.answer


def _sse(events: list[Any], *, done: bool) -> list[bytes]:
    out = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events]
    return out + ([b"data: [DONE]\n\n"] if done else [])


texts = st.text(max_size=40) | st.sampled_from(
    [f"Incorrect API key provided: Bearer {UPSTREAM_KEY}", "\u202e\u200b東京", "x" * 500, "\ud800"]
)
ids = st.none() | st.integers(-5, 10**30) | st.text(max_size=8) | st.just("dup")
arguments = (
    st.text(max_size=30)
    | st.just('{"q": "cut')
    | st.just('{"a":' + "[" * 150 + "]" * 150 + "}")
    | st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)
    | st.none()
)
usages = st.none() | st.fixed_dictionaries(
    {
        "prompt_tokens": st.integers(-(10**6), 10**400) | st.none() | st.text(max_size=3),
        "completion_tokens": st.integers(-5, 10**6),
    }
)
calls = st.lists(
    st.fixed_dictionaries(
        {
            "id": ids,
            "type": st.just("function"),
            "function": st.fixed_dictionaries({"name": st.text(max_size=8), "arguments": arguments}),
        }
    ),
    max_size=3,
)
chat_messages = st.fixed_dictionaries(
    {"role": st.just("assistant"), "content": st.none() | texts, "tool_calls": st.none() | calls}
)


@st.composite
def chat_replies(draw: st.DrawFn) -> tuple[RawAnswer, bool]:
    """A chat-completions reply from a hostile upstream, and whether the service must store it."""
    message = draw(chat_messages)
    finish = draw(st.sampled_from(["stop", "length", "tool_calls", None]))
    kind = draw(st.sampled_from(["json", "sse", "error", "garbage", "deep"]))
    if kind == "json":
        body = {"choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": draw(usages)}
        return (200, {"content-type": "application/json"}, [json.dumps(body).encode()]), True
    if kind == "deep":
        body = json.dumps({"choices": [{"index": 0, "message": message, "finish_reason": finish}]})
        return (200, {}, [body[:-1].encode() + b', "x": ' + b"[" * 3000 + b"]" * 3000 + b"}"]), True
    if kind == "sse":
        deltas = [{"choices": [{"index": 0, "delta": {"content": draw(texts)}}]}]
        for i, call in enumerate(message.get("tool_calls") or []):
            deltas.append({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, **call}]}}]})
        deltas.append(
            {"choices": [{"index": 0, "delta": {}, "finish_reason": finish or "stop"}], "usage": draw(usages)}
        )
        return (200, {"content-type": "text/event-stream"}, _sse(deltas, done=draw(st.booleans()))), False
    if kind == "error":
        status = draw(st.sampled_from([400, 401, 403, 404, 429, 500, 502, 503]))
        error = {"error": {"message": f"Incorrect API key provided: {UPSTREAM_KEY}", "type": "x"}}
        return (status, {"content-type": "application/json"}, [json.dumps(error).encode()]), False
    raw = draw(st.binary(max_size=200))
    return (draw(st.sampled_from([200, 500])), {}, [raw, UPSTREAM_KEY.encode()]), False


@st.composite
def other_replies(draw: st.DrawFn, dialect: str) -> RawAnswer:
    """An Anthropic Messages or Responses reply (JSON, stream, or an error quoting the key)."""
    text = draw(texts)
    kind = draw(st.sampled_from(["json", "sse", "error", "garbage"]))
    if dialect == "messages":
        body: dict[str, Any] = {
            "type": "message",
            "role": "assistant",
            "content": draw(
                st.lists(
                    st.fixed_dictionaries({"type": st.just("text"), "text": texts})
                    | st.fixed_dictionaries(
                        {"type": st.just("tool_use"), "id": ids, "name": st.text(max_size=5), "input": arguments}
                    ),
                    max_size=3,
                )
            ),
            "stop_reason": "end_turn",
            "usage": {"input_tokens": draw(st.integers(-5, 10**20)), "output_tokens": 1},
        }
        events = [
            {"type": "message_start", "message": {**body, "content": []}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
            {"type": "error", "error": {"type": "api_error", "message": f"Bearer {UPSTREAM_KEY}"}},
            {"type": "message_stop"},
        ]
    else:
        body = {
            "id": "resp_1",
            "object": "response",
            "status": "completed",
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}],
            "usage": {"input_tokens": draw(st.integers(-5, 10**20)), "output_tokens": 1},
        }
        events = [
            {"type": "response.output_text.delta", "delta": text},
            {"type": "error", "message": f"Bearer {UPSTREAM_KEY}"},
            {"type": "response.completed", "response": body},
        ]
    if kind == "json":
        return 200, {"content-type": "application/json"}, [json.dumps(body).encode()]
    if kind == "sse":
        chosen = draw(st.lists(st.sampled_from(events), max_size=6))
        return 200, {"content-type": "text/event-stream"}, _sse(chosen, done=False)
    if kind == "error":
        status = draw(st.sampled_from([400, 401, 429, 500, 529]))
        error = {"type": "error", "error": {"type": "x", "message": f"invalid x-api-key {UPSTREAM_KEY}"}}
        return status, {"content-type": "application/json"}, [json.dumps(error).encode()]
    return 200, {}, [draw(st.binary(max_size=100))]


# --- the service ----------------------------------------------------------------------------------


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Script, _Lines]]:
    from contextwarden.service.auth import hash_key

    script = Script()
    os.environ["CW_TEST_UPSTREAM_KEY"] = UPSTREAM_KEY
    lines = _Lines()
    root = logging.getLogger("contextwarden")
    root.addHandler(lines)
    level = root.level
    root.setLevel(logging.DEBUG)
    store = f"sqlite:///{tmp_path_factory.mktemp('fuzz-http') / 'sessions.db'}"
    keys = [{"tenant": t, "key_sha256": hash_key(k)} for t, k in TENANT_KEYS.items()]
    with RawUpstream(script) as upstream:
        settings = make_settings(store, upstream.base_url, api_keys=keys, max_reply_bytes=1_000_000)
        service = start_service(settings)
        try:
            yield service, script, lines
        finally:
            service.stop()
            root.removeHandler(lines)
            root.setLevel(level)
            os.environ.pop("CW_TEST_UPSTREAM_KEY", None)


def _error_shape(route: str, response: httpx.Response, upstream_status: int | None = None) -> None:
    """Property 1 for an error: JSON in the dialect's shape, never the service's internal error."""
    try:
        body = response.json()
    except ValueError:
        raise Failed(
            f"{route}: HTTP {response.status_code} with a body that is not JSON: {response.text[:200]!r}"
        ) from None
    if route == ROUTES["messages"]:
        ok = isinstance(body, dict) and (body.get("type") == "error" or "error" in body)
    else:
        ok = isinstance(body, dict) and isinstance(body.get("error"), dict)
    if not ok:
        raise Failed(f"{route}: error body not in the dialect's shape: {response.text[:200]!r}")
    error = body.get("error")
    internal = isinstance(error, dict) and error.get("code") == "internal_error"
    if internal or (response.status_code == 500 and upstream_status != 500):
        probe.raw(f"http {route}", f"internal error: {response.text[:300]}")


def _no_secret(route: str, response: httpx.Response, lines: _Lines) -> None:
    """Property 2."""
    seen = response.text + "".join(f"{k}: {v}" for k, v in response.headers.items())
    logged = "\n".join(lines.lines)
    lines.lines.clear()
    for secret in SECRETS:
        if secret in seen or secret in logged:
            where = "the response" if secret in seen else "the log"
            probe.raw(f"http {route}", f"a credential ({secret[:10]}...) appeared in {where}")


def _auth(tenant: str = "acme") -> dict[str, str]:
    return {"authorization": f"Bearer {TENANT_KEYS[tenant]}"}


# --- client input ---------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
message_like = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", "x"]), "content": json_values | texts}
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": st.just(MODEL) | json_values | st.just("m\ud800"),
        "messages": st.lists(message_like, max_size=3) | json_values,
        "input": json_values | texts,
        "stream": st.booleans() | json_values,
        "stream_options": json_values,
        "tools": json_values,
        "user": texts,
        "max_tokens": json_values,
        "n": st.integers(-2, 3),
    },
)
raw_bodies = (
    bodies.map(lambda b: json.dumps(b).encode())
    | st.binary(max_size=300)
    | st.integers(1, 3000).map(lambda d: b'{"model": "m", "messages": ' + b"[" * d + b"]" * d + b"}")
    | st.just(b'{"model": "m", "messages": [{"role": "user", "content": "\\udc00"}]}')
)
content_types = st.sampled_from(
    ["application/json", "text/plain", "application/x-www-form-urlencoded", "", "application/vnd.x+json"]
)
origins = st.none() | st.sampled_from(["https://evil.example", "null", "http://127.0.0.1"])
# what HTTP lets a header carry (the server refuses anything else before the service sees it)
session_ids = st.none() | st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=255, blacklist_characters="\x7f"), max_size=40
)


@fuzz_settings(120)
@given(
    route=st.sampled_from(sorted(ROUTES.values())),
    raw=raw_bodies,
    content_type=content_types,
    origin=origins,
    session=session_ids,
)
def test_hostile_client_requests_get_well_formed_answers(
    served: tuple[Running, Script, _Lines],
    route: str,
    raw: bytes,
    content_type: str,
    origin: str | None,
    session: str | None,
) -> None:
    service, script, lines = served
    with script.lock:
        script.answer = (200, {"content-type": "application/json"}, [b'{"choices": []}'])
    headers: list[tuple[bytes, bytes]] = [
        (k.encode(), v.encode()) for k, v in {**_auth(), "content-type": content_type}.items()
    ]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if session is not None and session.strip():  # HTTP trims the value: the client refuses padded ones
        headers.append((b"x-session-id", session.strip().encode("latin-1")))
    probe.count(f"http {route}")
    response = service.client.post(route, content=raw, headers=headers)
    if response.status_code >= 400:
        _error_shape(route, response)
    refused_type = raw and content_type not in ("application/json", "application/vnd.x+json")
    if refused_type or origin in ("https://evil.example", "null"):
        assert response.status_code in (403, 415), response.text
    _no_secret(route, response, lines)


# --- upstream replies -----------------------------------------------------------------------------

_counter = iter(range(10**9))


@fuzz_settings(150)
@given(reply=chat_replies(), stream=st.booleans())
def test_hostile_chat_replies_are_answered_kept_and_redacted(
    served: tuple[Running, Script, _Lines], reply: tuple[RawAnswer, bool], stream: bool
) -> None:
    service, script, lines = served
    answer, recordable = reply
    with script.lock:
        script.answer = answer
    route = ROUTES["chat"]
    session = f"fz-{next(_counter)}"
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "stream": stream}
    probe.count(f"http {route} upstream")
    response = service.client.post(route, json=body, headers={**_auth(), "x-session-id": session})
    if response.status_code >= 400:
        status = answer[0]
        _error_shape(route, response, status)
        if 400 <= status < 500 and status not in (401, 403):
            assert response.status_code == status, response.text
        elif status >= 500:
            assert response.status_code >= 500, response.text
    _no_secret(route, response, lines)
    if response.status_code == 200 and recordable and not stream:
        stored = service.client.get(f"/v1/sessions/{session}", headers=_auth())
        count = stored.json()["session"]["message_count"] if stored.status_code == 200 else 0
        if count < 2:
            probe.ledger.tally(f"http {route} upstream").data_lost += 1
            raise Failed(f"an acknowledged reply was not stored (messages: {count}): {answer[2]!r:.300}")
    other = service.client.get(f"/v1/sessions/{session}", headers=_auth("beta"))
    probe.isolated(
        f"http {route} upstream", other.status_code != 404, f"tenant beta read {session}: {other.text[:200]}"
    )


@fuzz_settings(80)
@given(data=st.data(), dialect=st.sampled_from(["messages", "responses"]), stream=st.booleans())
def test_hostile_messages_and_responses_replies_are_answered_and_redacted(
    served: tuple[Running, Script, _Lines], data: st.DataObject, dialect: str, stream: bool
) -> None:
    service, script, lines = served
    answer = data.draw(other_replies(dialect))
    with script.lock:
        script.answer = answer
    route = ROUTES[dialect]
    if dialect == "messages":
        body: dict[str, Any] = {"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    else:
        body = {"model": MODEL, "input": "hi"}
    body["stream"] = stream
    probe.count(f"http {route} upstream")
    response = service.client.post(route, json=body, headers={**_auth(), "x-session-id": f"fz-{next(_counter)}"})
    if response.status_code >= 400:
        _error_shape(route, response, answer[0])
    _no_secret(route, response, lines)


def test_memory_stays_bounded_over_the_hostile_runs(served: tuple[Running, Script, _Lines]) -> None:
    """Property 5, over a burst of oversized and endless replies after the runs above."""
    service, script, lines = served
    gc.collect()
    before = _rss()
    big = b'{"choices": [{"message": {"role": "assistant", "content": "' + b"x" * 3_000_000 + b'"}}]}'
    for _ in range(30):
        with script.lock:
            script.answer = (200, {"content-type": "application/json"}, [big])
        probe.count("http memory")
        response = service.client.post(
            ROUTES["chat"], json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]}, headers=_auth()
        )
        assert response.status_code == 502 and "max_reply_bytes" in response.text
    gc.collect()
    grown = _rss() - before
    assert grown < RSS_BOUND, f"the process grew by {grown / 2**20:.0f} MiB (bound {RSS_BOUND / 2**20:.0f} MiB)"
    lines.lines.clear()

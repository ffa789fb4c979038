"""A request the proxy does not answer with a reply leaves no session behind, in every dialect and store.

The upstream here is a raw HTTP server scripted byte by byte: it fails before the first token
(an error reply, an error event right after the stream's opening event, a stream that ends after
its opening event) or streams past the service's bound. A session the failed request created is
gone from the sessions list and from the store; a session that existed before keeps its history.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

from contextwarden.settings import Settings

from ._raw_upstream import RawAnswer, RawUpstream
from ._stored import stored
from .conftest import MODEL, Running, make_settings

_SSE = {"content-type": "text/event-stream"}


def _event(data: dict[str, Any], name: str | None = None) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


class _Dialect:
    """How one dialect's request, reply and stream events look on the wire."""

    def __init__(
        self,
        path: str,
        request: Callable[[list[dict[str, str]]], dict[str, Any]],
        reply: dict[str, Any],
        opening: bytes,
        error: bytes,
        delta: bytes,
    ) -> None:
        self.path, self.request, self.reply = path, request, reply
        self.opening, self.error, self.delta = opening, error, delta


_CHAT = _Dialect(
    "/v1/chat/completions",
    lambda turns: {"model": MODEL, "messages": turns},
    {"id": "c1", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]},
    _event({"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
    _event({"error": {"message": "The server is overloaded.", "type": "server_error", "code": None}}),
    _event({"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "y" * 900}}]}),
)  # fmt: skip
_MESSAGES = _Dialect(
    "/v1/messages",
    lambda turns: {"model": MODEL, "max_tokens": 50, "messages": turns},
    {"id": "m1", "type": "message", "role": "assistant", "model": MODEL, "stop_reason": "end_turn",
     "content": [{"type": "text", "text": "ok"}], "usage": {"input_tokens": 5, "output_tokens": 1}},
    _event({"type": "message_start", "message": {"id": "m1", "type": "message", "role": "assistant", "model": MODEL,
            "content": [], "usage": {"input_tokens": 5, "output_tokens": 0}}}, "message_start")
    + _event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
             "content_block_start"),
    _event({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error"),
    _event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "y" * 900}},
           "content_block_delta"),
)  # fmt: skip
_RESPONSES = _Dialect(
    "/v1/responses",
    lambda turns: {"model": MODEL, "input": turns, "store": False},
    {"id": "r1", "object": "response", "status": "completed", "model": MODEL, "output": [
        {"type": "message", "id": "msg1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "ok", "annotations": []}]}]},
    _event({"type": "response.created", "response": {"id": "r1", "status": "in_progress", "output": []}},
           "response.created"),
    _event({"type": "response.failed", "response": {"id": "r1", "status": "failed", "output": [],
            "error": {"code": "server_error", "message": "The model failed."}}}, "response.failed"),
    _event({"type": "response.output_text.delta", "item_id": "msg1", "output_index": 0, "content_index": 0,
            "delta": "y" * 900}, "response.output_text.delta"),
)  # fmt: skip
DIALECTS = {"chat": _CHAT, "messages": _MESSAGES, "responses": _RESPONSES}

_Failure = Callable[[_Dialect], Iterable[bytes]]


def _opening(dialect: _Dialect) -> Iterator[bytes]:
    """The stream's opening event alone, so that the proxy starts relaying before what follows."""
    yield dialect.opening
    time.sleep(0.2)


def _error_event_before_the_first_token(dialect: _Dialect) -> Iterable[bytes]:
    return itertools.chain(_opening(dialect), [dialect.error])


def _stream_ends_after_its_opening(dialect: _Dialect) -> Iterable[bytes]:
    return _opening(dialect)


def _stream_past_the_bound(dialect: _Dialect) -> Iterable[bytes]:
    return itertools.chain(_opening(dialect), itertools.repeat(dialect.delta))


STREAM_FAILURES: dict[str, _Failure] = {
    "error event": _error_event_before_the_first_token,
    "cut": _stream_ends_after_its_opening,
    "bound": _stream_past_the_bound,
}


class _Script:
    """What the raw upstream answers next: a good reply, or the failure under test."""

    def __init__(self, dialect: _Dialect) -> None:
        self.dialect = dialect
        self.failure: Callable[[bool], RawAnswer] | None = None

    def __call__(self, path: str, body: bytes) -> RawAnswer:
        stream = bool(json.loads(body).get("stream"))
        if self.failure is not None:
            return self.failure(stream)
        if stream:
            raise AssertionError("the good replies of these tests are not streamed")
        return 200, {"content-type": "application/json"}, [json.dumps(self.dialect.reply).encode()]


def _sessions(service: Running) -> list[str]:
    answer = service.client.get("/v1/sessions")
    assert answer.status_code == 200, answer.text
    return [s["session_id"] for s in answer.json()["data"]]


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    if request.param == "sqlite":
        return sqlite_url
    return str(request.getfixturevalue("redis_store_url"))


def _run(
    service_factory: Callable[[Settings], Running],
    store_url: str,
    dialect: _Dialect,
    failure: Callable[[bool], RawAnswer],
    *,
    stream: bool,
) -> None:
    script = _Script(dialect)
    with RawUpstream(script) as upstream:
        settings = make_settings(store_url, upstream.base_url, max_stream_bytes=60_000)
        service = service_factory(settings)
        first = [{"role": "user", "content": "hello"}]
        kept = service.client.post(dialect.path, json=dialect.request(first), headers={"X-Session-Id": "kept"})
        assert kept.status_code == 200, kept.text
        script.failure = failure
        again = {"role": "user", "content": "once more"}
        histories = {"fresh": [again], "kept": [*first, {"role": "assistant", "content": "ok"}, again]}
        for session_id, history in histories.items():
            body = {**dialect.request(history), "stream": stream}
            answer = service.client.post(dialect.path, json=body, headers={"X-Session-Id": session_id})
            # the client learns of the failure (a stream that merely stops ends with an error event)
            assert answer.status_code >= 400 or "error" in answer.text, answer.text[:300]
        assert _sessions(service) == ["kept"]  # the session the refused request created is gone
        detail = service.client.get("/v1/sessions/fresh")
        assert detail.status_code == 404, detail.text
        assert stored(service, "kept")[:2] == [("user", "hello"), ("assistant", "ok")]  # an existing one is kept


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("failure", STREAM_FAILURES)
def test_a_stream_refused_mid_relay_leaves_no_session(
    service_factory: Callable[[Settings], Running], store_url: str, dialect: str, failure: str
) -> None:
    wire = DIALECTS[dialect]
    events = STREAM_FAILURES[failure]

    def answer(stream: bool) -> RawAnswer:
        assert stream
        return 200, _SSE, events(wire)

    _run(service_factory, store_url, wire, answer, stream=True)


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_request_the_upstream_refuses_leaves_no_session(
    service_factory: Callable[[Settings], Running], store_url: str, dialect: str, stream: bool
) -> None:
    def answer(streamed: bool) -> RawAnswer:
        assert streamed == stream
        error = {"error": {"message": "The server is overloaded.", "type": "server_error"}}
        return 500, {"content-type": "application/json"}, [json.dumps(error).encode()]

    _run(service_factory, store_url, DIALECTS[dialect], answer, stream=stream)

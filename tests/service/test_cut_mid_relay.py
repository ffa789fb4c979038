"""A stream the upstream cuts mid-relay ends with the dialect's own error event, and its retry is stored once.

Through a real `serve` in front of an upstream that streams a whole reply or cuts it after N
events, by ending its body or dropping its connection, in the three dialects. A cut stream never
ends with the dialect's end marker: its last event is the error the client's SDK raises on,
saying the upstream cut the stream and that the request can be retried. Nothing of the cut
reply is stored (as `Session.stream()` appends nothing of a cut stream); the client's retry
with the same history stores the one reply, and sending that request once more stores nothing
again. A stream that stops after the reply's finish reason holds the whole reply: it is stored
and relayed as sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

from contextwarden.settings import Settings

from ._cut_upstream import MODEL, REPLY, WIRES, CutUpstream, How, Wire
from ._raw_upstream import RawAnswer, RawUpstream
from ._stored import stored
from .conftest import Running, make_settings, user

QUESTION = "How does the checker work?"
FIRST = [user("What does the parser build?"), {"role": "assistant", "content": REPLY}]
"""A turn answered before the cut one: the session exists when the stream is cut."""

Frame = tuple[str | None, str]
"""(event name, data) of one relayed event."""


def _frames(text: str) -> list[Frame]:
    frames: list[Frame] = []
    for block in text.split("\n\n"):
        name = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            frames.append((name, "\n".join(data)))
    return frames


def _post(service: Running, wire: Wire, history: list[dict[str, Any]], session: str) -> tuple[int, list[Frame]]:
    answer = service.client.post(wire.path, json=wire.request(history), headers={"X-Session-Id": session})
    return answer.status_code, _frames(answer.text)


def _text(dialect: str, frames: list[Frame]) -> str:
    """The reply's text as a client assembles it from the relayed events."""
    pieces: list[str] = []
    for _name, data in frames:
        if data == "[DONE]":
            continue
        event = json.loads(data)
        if dialect == "chat":
            pieces += [c["delta"].get("content") or "" for c in event.get("choices", [])]
        elif dialect == "messages" and event.get("type") == "content_block_delta":
            pieces.append(event["delta"]["text"])
        elif dialect == "responses" and event.get("type") == "response.output_text.delta":
            pieces.append(event["delta"])
    return "".join(pieces)


def _ended_whole(dialect: str, frames: list[Frame]) -> bool:
    """The stream ended with its dialect's end marker."""
    last = frames[-1]
    if dialect == "chat":
        return last[1] == "[DONE]"
    end = "message_stop" if dialect == "messages" else "response.completed"
    return bool(json.loads(last[1])["type"] == end)


def _assert_cut(dialect: str, frames: list[Frame], after: int) -> None:
    """The relayed stream is the upstream's first ``after`` events and then the dialect's error event."""
    assert len(frames) == after + 1, frames
    assert not any(_ended_whole(dialect, frames[: i + 1]) for i in range(len(frames)))
    name, data = frames[-1]
    event = json.loads(data)
    if dialect == "chat":
        assert name is None and event["error"]["code"] == "upstream_stream_cut"
        message = event["error"]["message"]
    elif dialect == "messages":
        assert name == "error" and event["type"] == "error" and event["error"]["type"] == "api_error"
        message = event["error"]["message"]
    else:
        # OpenAI's failed response: the response the stream announced, now failed, with the error
        assert name == "response.failed" and event["type"] == "response.failed"
        assert event["sequence_number"] == after  # one past the last event relayed (numbered from 0)
        response = event["response"]
        announced = json.loads(frames[0][1])["response"]
        assert response["id"] == announced["id"] and response["object"] == "response"
        assert response["status"] == "failed" and response["error"]["code"] == "upstream_stream_cut"
        assert event["error"]["code"] == "upstream_stream_cut"  # what the SDKs raise on
        message = response["error"]["message"]
        assert event["error"]["message"] == message
    assert "before the end of the reply" in message and "Retry the request" in message, message


@pytest.fixture(params=sorted(WIRES))
def dialect(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _service(service_factory: Callable[[Settings], Running], sqlite_url: str, upstream: CutUpstream) -> Running:
    return service_factory(make_settings(sqlite_url, upstream.base_url))


_CUTS: dict[str, int | None] = {"after the first event": 1, "mid reply": 3, "last event": None}
"""Events relayed before the cut (None: all but the one that makes the reply whole)."""


@pytest.mark.parametrize("how", ["ends", "drops"])
@pytest.mark.parametrize("where", sorted(_CUTS))
def test_a_cut_stream_ends_with_an_error_event_and_its_retry_is_stored_once(
    service_factory: Callable[[Settings], Running], sqlite_url: str, dialect: str, how: How, where: str
) -> None:
    wire = WIRES[dialect]
    after = _CUTS[where]
    if after is None:
        after = wire.whole_after - 1
    with CutUpstream(wire) as upstream:
        service = _service(service_factory, sqlite_url, upstream)
        status, frames = _post(service, wire, FIRST[:1], "s")
        assert status == 200 and _ended_whole(dialect, frames)
        history = [*FIRST, user(QUESTION)]
        before = stored(service, "s")
        assert before == [("user", FIRST[0]["content"]), ("assistant", REPLY)]

        upstream.cut(after, how)
        status, frames = _post(service, wire, history, "s")
        assert status == 200  # the stream had started: the error comes as its last event
        _assert_cut(dialect, frames, after)
        assert stored(service, "s") == before  # nothing of the cut reply, nor of its request

        # the client retries with the same history: the one reply is stored
        status, frames = _post(service, wire, history, "s")
        assert status == 200 and _ended_whole(dialect, frames) and _text(dialect, frames) == REPLY
        after_retry = [*before, ("user", QUESTION), ("assistant", REPLY)]
        assert stored(service, "s") == after_retry
        # the same request once more (a second retry): answered, nothing stored twice
        status, frames = _post(service, wire, history, "s")
        assert status == 200 and _ended_whole(dialect, frames)
        assert stored(service, "s") == after_retry
        assert upstream.served == 4


@pytest.mark.parametrize("how", ["ends", "drops"])
def test_a_cut_first_request_leaves_no_session_and_its_retry_is_stored_once(
    service_factory: Callable[[Settings], Running], sqlite_url: str, dialect: str, how: How
) -> None:
    wire = WIRES[dialect]
    with CutUpstream(wire) as upstream:
        service = _service(service_factory, sqlite_url, upstream)
        upstream.cut(2, how)
        status, frames = _post(service, wire, [user(QUESTION)], "new")
        assert status == 200
        _assert_cut(dialect, frames, 2)
        assert service.client.get("/v1/sessions/new").status_code == 404
        for _ in range(2):  # the retry, then the same request again
            status, frames = _post(service, wire, [user(QUESTION)], "new")
            assert status == 200 and _text(dialect, frames) == REPLY
            assert stored(service, "new") == [("user", QUESTION), ("assistant", REPLY)]


@pytest.mark.parametrize("dialect_with_finish", ["chat", "messages"])
def test_a_stream_that_stops_after_the_finish_reason_holds_the_whole_reply(
    service_factory: Callable[[Settings], Running], sqlite_url: str, dialect_with_finish: str
) -> None:
    dialect = dialect_with_finish
    wire = WIRES[dialect]
    with CutUpstream(wire) as upstream:
        service = _service(service_factory, sqlite_url, upstream)
        # the body ends after the finish reason: the reply is whole, stored, and relayed as sent
        upstream.cut(wire.whole_after, "ends")
        status, frames = _post(service, wire, [user(QUESTION)], "w")
        assert status == 200 and len(frames) == wire.whole_after and _text(dialect, frames) == REPLY
        assert not _ended_whole(dialect, frames)  # no end marker the upstream did not send
        assert not any("error" in data for _name, data in frames)
        assert stored(service, "w") == [("user", QUESTION), ("assistant", REPLY)]
        # a client that re-sends the request anyway: nothing stored twice
        status, frames = _post(service, wire, [user(QUESTION)], "w")
        assert status == 200 and _ended_whole(dialect, frames)
        assert stored(service, "w") == [("user", QUESTION), ("assistant", REPLY)]

        # the connection dropped after the finish reason: a cut like any other (the library raises on it too)
        upstream.cut(wire.whole_after, "drops")
        status, frames = _post(service, wire, [user(QUESTION)], "d")
        assert status == 200
        _assert_cut(dialect, frames, wire.whole_after)
        assert service.client.get("/v1/sessions/d").status_code == 404


# --- the official SDKs as clients ------------------------------------------------------------------


@pytest.mark.parametrize("how", ["ends", "drops"])
def test_the_openai_sdk_raises_on_a_cut_chat_stream_and_its_retry_completes(
    service_factory: Callable[[Settings], Running], sqlite_url: str, how: How
) -> None:
    with CutUpstream(WIRES["chat"]) as upstream:
        service = _service(service_factory, sqlite_url, upstream)
        client = openai.OpenAI(
            base_url=f"{service.url}/v1", api_key="unused", max_retries=0, default_headers={"X-Session-Id": "sdk"}
        )
        messages: Any = [user(QUESTION)]
        with client:
            upstream.cut(4, how)
            received: list[str] = []
            with pytest.raises(openai.APIError, match="Retry the request") as raised:
                for chunk in client.chat.completions.create(model=MODEL, messages=messages, stream=True):
                    received += [c.delta.content or "" for c in chunk.choices]
            assert raised.value.code == "upstream_stream_cut"
            assert "".join(received) == REPLY[:36]  # what came before the cut, then the error
            assert service.client.get("/v1/sessions/sdk").status_code == 404  # nothing stored

            stream = client.chat.completions.create(model=MODEL, messages=messages, stream=True)
            text = "".join(c.delta.content or "" for chunk in stream for c in chunk.choices)
            assert text == REPLY
        assert stored(service, "sdk") == [("user", QUESTION), ("assistant", REPLY)]


@pytest.mark.parametrize("how", ["ends", "drops"])
def test_the_anthropic_sdk_raises_on_a_cut_stream_and_its_retry_completes(
    service_factory: Callable[[Settings], Running], sqlite_url: str, how: How
) -> None:
    with CutUpstream(WIRES["messages"]) as upstream:
        service = _service(service_factory, sqlite_url, upstream)
        client = anthropic.Anthropic(
            base_url=service.url, api_key="unused", max_retries=0, default_headers={"X-Session-Id": "sdk"}
        )
        messages: Any = [user(QUESTION)]
        with client:
            upstream.cut(4, how)
            with (
                pytest.raises(anthropic.APIStatusError, match="Retry the request") as raised,
                client.messages.stream(model=MODEL, max_tokens=100, messages=messages) as stream,
            ):
                stream.get_final_message()  # without the error it returns the truncated message as final
            assert raised.value.body["error"]["type"] == "api_error"  # type: ignore[index]
            assert service.client.get("/v1/sessions/sdk").status_code == 404  # nothing stored

            with client.messages.stream(model=MODEL, max_tokens=100, messages=messages) as stream:
                final = stream.get_final_message()
            assert final.stop_reason == "end_turn" and final.content[0].text == REPLY  # type: ignore[union-attr]
        assert stored(service, "sdk") == [("user", QUESTION), ("assistant", REPLY)]


@pytest.mark.parametrize("reader", ["create", "stream"])
@pytest.mark.parametrize("how", ["ends", "drops"])
def test_the_openai_sdk_raises_on_a_cut_responses_stream_and_its_retry_completes(
    service_factory: Callable[[Settings], Running], sqlite_url: str, how: How, reader: str
) -> None:
    with CutUpstream(WIRES["responses"]) as upstream:
        service = _service(service_factory, sqlite_url, upstream)
        client = openai.OpenAI(
            base_url=f"{service.url}/v1", api_key="unused", max_retries=0, default_headers={"X-Session-Id": "sdk"}
        )
        items: Any = [user(QUESTION)]
        with client:
            upstream.cut(5, how)
            seen: list[str] = []
            with pytest.raises(openai.APIError, match="Retry the request") as raised:
                if reader == "create":
                    for event in client.responses.create(model=MODEL, input=items, store=False, stream=True):
                        seen.append(event.type)
                else:
                    with client.responses.stream(model=MODEL, input=items, store=False) as stream:
                        for event in stream:
                            seen.append(event.type)
            assert raised.value.code == "upstream_stream_cut"
            assert seen[0] == "response.created" and "response.completed" not in seen
            assert len(seen) == 5  # the events relayed before the cut, then the raise
            assert service.client.get("/v1/sessions/sdk").status_code == 404  # nothing stored

            with client.responses.stream(model=MODEL, input=items, store=False) as stream:
                final = stream.get_final_response()
            assert final.status == "completed" and final.output_text == REPLY
        assert stored(service, "sdk") == [("user", QUESTION), ("assistant", REPLY)]


def test_an_unfinished_last_event_of_a_cut_stream_is_not_relayed(
    service_factory: Callable[[Settings], Running], sqlite_url: str
) -> None:
    wire = WIRES["chat"]
    events = wire.events(0)
    torn = events[:3] + [events[3][:25]]  # the fourth event stops mid-JSON, without its blank line

    def answer(path: str, body: bytes) -> RawAnswer:
        return 200, {"content-type": "text/event-stream"}, torn

    with RawUpstream(answer) as upstream:
        service = service_factory(make_settings(sqlite_url, upstream.base_url))
        with httpx.Client(base_url=service.url, timeout=30) as client:
            text = client.post(wire.path, json=wire.request([user(QUESTION)]), headers={"X-Session-Id": "t"}).text
    frames = _frames(text)
    _assert_cut("chat", frames, 3)  # the three whole events, then the error: the torn one is dropped

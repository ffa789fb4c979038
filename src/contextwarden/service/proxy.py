"""``POST /v1/chat/completions``: the managed proxy.

Per request: the new messages of the re-sent history are appended to the session's transcript,
the session prepares the view (compacting when due), the view replaces the client's ``messages``
and the request goes upstream with every other field as the client sent it. The upstream's reply
goes back unchanged (streamed chunk by chunk as it arrives) and is appended to the transcript,
with its usage calibrating the counting. A context-length error from the upstream makes the
session compact deeper (the reactive layer) and the request is sent once more.

The reply is written to the store before the client sees the end of it (the non-streaming body,
or a stream's ``[DONE]``), so a client that sends its next request at once, to any replica, finds
it there. A client that goes away mid-stream cancels the upstream call and nothing of the partial
reply is kept.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from ..adapters import to_messages
from ..exceptions import (
    ContextOverflowError,
    ContextWardenError,
    MessageError,
    SessionNotFound,
    UnknownModelError,
    UsageError,
)
from ..llm.errors import classify_error
from ..messages import Message
from . import jsonio
from .errors import ServiceError, error_response
from .history import new_from
from .limits import read_body
from .replies import ChunkAssembler, SSEFramer, usage_of
from .runtime import ServiceState, state_of
from .sessions import Lease, SessionMoved
from .upstream import UpstreamBroken, UpstreamReply

__all__ = ["chat_completions"]

logger = logging.getLogger("contextwarden.service.proxy")

ROUTE = "/v1/chat/completions"
SESSION_HEADER = "x-session-id"


def _parse(raw: bytes) -> dict[str, Any]:
    try:
        body = jsonio.loads(raw)
    except ValueError as exc:
        raise ServiceError(
            400, f"The request body is not valid JSON ({exc}); send a chat-completions request.", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise ServiceError(
            400, f"The request body is a JSON {type(body).__name__}, not an object.", code="invalid_json"
        )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ServiceError(
            400, "`messages` must be a non-empty list of message objects.", param="messages", code="invalid_type"
        )
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise ServiceError(400, "`model` must be a non-empty string.", param="model", code="invalid_type")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise ServiceError(400, "`stream` must be a boolean.", param="stream", code="invalid_type")
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise ServiceError(400, "`tools` must be a list of tool objects.", param="tools", code="invalid_type")
    return body


def _session_id(request: Request, body: Mapping[str, Any]) -> str | None:
    header = request.headers.get(SESSION_HEADER)
    if header:
        return header.strip()
    user = body.get("user")
    return user.strip() if isinstance(user, str) and user.strip() else None


class _Turn:
    """One proxied request: its lease on the session (None when unmanaged) and its bookkeeping."""

    def __init__(self, svc: ServiceState, request: Request, tenant: str, body: dict[str, Any]) -> None:
        self.svc = svc
        self.request = request
        self.tenant = tenant
        self.body = body
        self.stream = bool(body.get("stream"))
        self.lease: Lease | None = None
        self.started = time.perf_counter()
        self.added = 0
        self.status = 200
        self.view_tokens: int | None = None
        self.retried = False

    # --- the session side ---------------------------------------------------------------------
    async def prepare(self) -> list[dict[str, Any]]:
        """Append the new messages and return the view to send (the client's messages when unmanaged).

        The first append expects the transcript at the length this process knows: when another
        replica appended meanwhile (or the session was deleted), nothing is written and the session
        is read again from the store, and the client's history compared with that.
        """
        lease = self.lease
        if lease is None:
            messages: list[dict[str, Any]] = self.body["messages"]
            return messages
        client = self.body["messages"]
        for attempt in range(_MOVED_ATTEMPTS):
            self.added = 0
            lease.sync_keys()
            start = new_from(client, lease.keys)
            fresh = client[start:]
            if not fresh and not lease.checked:
                # nothing to append to carry the check (a client's retry): ask the store, then compare again
                await self.svc.pool.verify(lease, model=self.body["model"], tools=self.body.get("tools") or ())
                continue
            lease.expect(len(lease.session.engine.transcript))
            try:
                if fresh:
                    try:
                        parsed = to_messages(fresh, format="openai")
                    except MessageError as exc:
                        raise _invalid(start, exc) from None
                    before = len(lease.session.engine.transcript)
                    self.added = await self._add(parsed, start)
                    lease.keyed(fresh, before=before)
                prepared = await lease.session.prepare(format="openai")
            except SessionMoved:
                if attempt == _MOVED_ATTEMPTS - 1:
                    raise ServiceError(
                        503,
                        f"Session {lease.session_id!r} kept changing in the store while this request was appended "
                        "(other writers); retry.",
                        code="session_busy",
                    ) from None
                await self.svc.pool.reload(lease, model=self.body["model"], tools=self.body.get("tools") or ())
                continue
            finally:
                lease.expect(None)
            self.view_tokens = prepared.status.used
            return prepared.messages
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _add(self, messages: list[Message], start: int) -> int:
        """Add the new messages; a long history in rounds, letting other requests run in between.

        A client joining with a history of hundreds of messages would otherwise hold the event loop
        for milliseconds, and every other session's request with it. Rounds are cut before a user
        message, where no tool call waits for its result.
        """
        assert self.lease is not None
        session = self.lease.session
        added = 0
        begin = 0
        while begin < len(messages):
            end = _round_end(messages, begin)
            if begin:
                await asyncio.sleep(0)
            try:
                added += session.add(messages[begin:end])
            except MessageError as exc:
                if begin:  # part of the history is in memory only: the store's copy is the truth
                    self.lease.failed = True
                raise _invalid(start + begin, exc) from None
            begin = end
        return added

    async def compact_for_retry(self, error: ContextOverflowError) -> list[dict[str, Any]] | None:
        """After a context-length error: the deeper-compacted view to retry with (None: no retry)."""
        if self.lease is None or self.retried:
            return None
        self.retried = True
        self.svc.metrics.retries.inc()
        prepared = await self.lease.session.on_context_overflow(format="openai", error=error)
        self.view_tokens = prepared.status.used
        logger.info("session %s: upstream context-length error; compacted and retrying", self.lease.session_id)
        return prepared.messages

    async def record(self, message: Mapping[str, Any], usage: Any) -> None:
        """Append the upstream's reply and its usage; write what is new to the store."""
        metrics = self.svc.metrics
        if usage.reported:
            metrics.tokens_in.inc(usage.input_tokens)
            metrics.tokens_out.inc(usage.output_tokens)
        lease = self.lease
        if lease is None:
            return
        session = lease.session
        session.on_turn_end(usage)
        reply = [dict(message)]
        lease.sync_keys()
        before = len(session.engine.transcript)
        session.add(to_messages(reply, format="openai"))
        lease.keyed(reply, before=before)
        await session.flush()
        lease.sync_keys()

    # --- the upstream side --------------------------------------------------------------------
    def upstream_body(self, messages: list[dict[str, Any]]) -> bytes:
        out = dict(self.body)
        out["messages"] = messages
        if self.stream and self.lease is not None:
            # usage calibrates the session's counting; a client that did not ask for it still gets what it asked
            options = dict(out.get("stream_options") or {})
            options.setdefault("include_usage", True)
            out["stream_options"] = options
        return jsonio.dumps(out)

    def upstream_error(self, status: int, content: bytes, headers: Mapping[str, str]) -> ServiceError | Response:
        """What the client gets for an upstream error reply (an overflow was handled before)."""
        if status == 429 or (400 <= status < 500 and status not in (401, 403, 407)):
            # the client's own mistake or the upstream's rate limit: pass the provider's answer through
            passed = {k: v for k, v in headers.items() if k.lower() in ("retry-after", "content-type")}
            if _is_json(content):
                return Response(content, status_code=status, headers=passed)
            return error_response(
                status, f"The upstream answered HTTP {status}.", code="upstream_error", headers=passed
            )
        if status in (401, 403, 407):
            message = (
                f"The upstream at {self.svc.upstream.shown_url} refused the service's credentials (HTTP "
                f"{status}); the operator should check the key in `[service] upstream_api_key_env`."
            )
        else:
            message = f"The upstream at {self.svc.upstream.shown_url} failed (HTTP {status}); retry later."
        return ServiceError(502, message, code="upstream_error")

    def log(self) -> None:
        elapsed = (time.perf_counter() - self.started) * 1000
        session = self.lease.session_id if self.lease is not None else "-"
        logger.info(
            "chat.completions tenant=%s session=%s stream=%s status=%s new_messages=%s view_tokens=%s "
            "retried=%s ms=%.1f",
            self.tenant,
            session,
            self.stream,
            self.status,
            self.added,
            self.view_tokens,
            self.retried,
            elapsed,
        )
        if self.svc.settings.service.log_content:
            last = self.body["messages"][-1]
            logger.info("session %s last message (%s): %.500s", session, last.get("role"), last.get("content"))


_MOVED_ATTEMPTS = 3
"""Times a request reads its session again after another writer appended to it first."""

_ADD_ROUND = 32
"""Messages added at once before a long history lets other requests run (about a millisecond of work)."""


def _round_end(messages: list[Message], begin: int) -> int:
    """Where the round of messages starting at ``begin`` ends: at a user message past ``_ADD_ROUND``."""
    end = begin + _ADD_ROUND
    if end >= len(messages) - _ADD_ROUND // 2:
        return len(messages)
    while end < len(messages) and messages[end].role != "user":
        end += 1
    return end


def _invalid(start: int, exc: MessageError) -> ServiceError:
    return ServiceError(400, f"messages[{start + (exc.index or 0)}]: {exc}", param="messages", code="invalid_message")


def _is_json(content: bytes) -> bool:
    try:
        json.loads(content)
    except ValueError:
        return False
    return True


async def chat_completions(request: Request) -> Response:
    """The proxy route."""
    svc = state_of(request)
    tenant = svc.tenants.tenant(request)
    svc.limits.take(tenant)
    turn: _Turn | None = None
    handed_off = False
    try:
        body = _parse(await read_body(request, svc.settings.service.max_body_bytes))
        turn = _Turn(svc, request, tenant, body)
        session_id = _session_id(request, body)
        if session_id is None and svc.settings.service.require_session_id:
            raise ServiceError(
                400,
                "The request names no session: send the `X-Session-Id` header (or the `user` field); this service "
                "requires one (`[service] require_session_id`).",
                code="missing_session_id",
            )
        if session_id is not None:
            try:
                # the freshness check rides on the first append (see _Turn.prepare)
                turn.lease = await svc.pool.acquire(
                    tenant, session_id, model=body["model"], tools=body.get("tools") or (), check=False
                )
            except SessionNotFound:
                raise ServiceError(404, f"No session {session_id!r}.", code="session_not_found") from None
            except UnknownModelError as exc:
                raise ServiceError(400, str(exc), param="model", code="unknown_model") from None
            except UsageError as exc:  # the store refuses the id (too long, control characters)
                raise ServiceError(400, f"Invalid session id: {exc}", code="invalid_session_id") from None
        svc.metrics.in_flight.inc()
        try:
            response = await (_stream(turn) if turn.stream else _complete(turn))
        except BaseException:
            svc.metrics.in_flight.dec()
            raise
        if isinstance(response, _Relay):
            handed_off = True  # the relay releases the lease and the slot when the stream ends
            return response
        svc.metrics.in_flight.dec()
        turn.status = response.status_code
        return response
    except ServiceError as exc:
        if turn is not None:
            turn.status = exc.status
            if turn.lease is not None and exc.status >= 500:
                turn.lease.failed = True
        return exc.response()
    except ContextWardenError as exc:
        if turn is not None and turn.lease is not None:
            turn.lease.failed = True
        logger.warning("chat.completions failed for tenant %s: %s", tenant, type(exc).__name__)
        status = 503 if type(exc).__name__ in ("StoreUnavailable", "LockTimeout") else 502
        if turn is not None:
            turn.status = status
        return error_response(status, str(exc), code=type(exc).__name__)
    except BaseException:
        if turn is not None and turn.lease is not None:
            turn.lease.failed = True
        raise
    finally:
        if not handed_off:
            if turn is not None:
                if turn.lease is not None:
                    svc.pool.release(turn.lease)
                turn.log()
            svc.limits.give(tenant)


async def _complete(turn: _Turn) -> Response:
    svc = turn.svc
    messages = await turn.prepare()
    headers = svc.upstream.headers(turn.request, stream=False)
    while True:
        sent = time.perf_counter()
        upstream = await svc.upstream.send(turn.upstream_body(messages), headers, stream=False)
        svc.metrics.upstream_latency.observe(time.perf_counter() - sent)
        if upstream.status_code == 200:
            break
        error = classify_error(upstream.status_code, upstream.content, url=svc.upstream.shown_url)
        if isinstance(error, ContextOverflowError):
            retry = await turn.compact_for_retry(error)
            if retry is not None:
                messages = retry
                continue
        answer = turn.upstream_error(upstream.status_code, upstream.content, upstream.headers)
        if isinstance(answer, ServiceError):
            raise answer
        return answer
    try:
        data = jsonio.loads(upstream.content)
        message = data["choices"][0]["message"]
        if not isinstance(message, dict):
            raise TypeError("message is not an object")
    except (ValueError, KeyError, IndexError, TypeError):
        raise ServiceError(
            502,
            f"The upstream at {svc.upstream.shown_url} answered HTTP 200 with a body that is not a chat completion "
            f"({upstream.content[:120]!r}); check `[service] upstream_url`.",
            code="upstream_bad_reply",
        ) from None
    await turn.record(message, usage_of(data.get("usage")))
    return Response(upstream.content, status_code=200, media_type="application/json", headers=_session_headers(turn))


def _session_headers(turn: _Turn) -> dict[str, str]:
    return {"x-session-id": turn.lease.session_id} if turn.lease is not None else {}


async def _stream(turn: _Turn) -> Response:
    svc = turn.svc
    messages = await turn.prepare()
    headers = svc.upstream.headers(turn.request, stream=True)
    while True:
        sent = time.perf_counter()
        upstream = await svc.upstream.send(turn.upstream_body(messages), headers, stream=True)
        if upstream.status_code != 200:
            content = await _read_closing(upstream)
            svc.metrics.upstream_latency.observe(time.perf_counter() - sent)
            error = classify_error(upstream.status_code, content, url=svc.upstream.shown_url)
            if isinstance(error, ContextOverflowError):
                retry = await turn.compact_for_retry(error)
                if retry is not None:
                    messages = retry
                    continue
            answer = turn.upstream_error(upstream.status_code, content, upstream.headers)
            if isinstance(answer, ServiceError):
                raise answer
            return answer
        # read up to the first event: an error sent as the stream's first event is still answerable
        framer = SSEFramer()
        head: list[bytes] = []
        chunks = upstream.aiter_raw()
        first_data: str | None = None
        try:
            while first_data is None:
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    rest = framer.rest()
                    if rest is not None:
                        head.append(rest[0])
                        first_data = rest[1]
                    break
                for raw, data in framer.feed(chunk):
                    head.append(raw)
                    if data is not None and first_data is None:
                        first_data = data
        except ServiceError:
            await upstream.aclose()
            raise
        except UpstreamBroken:
            await upstream.aclose()
            raise ServiceError(
                502,
                f"The upstream at {svc.upstream.shown_url} broke the stream before its first event.",
                code="upstream_disconnected",
            ) from None
        svc.metrics.upstream_latency.observe(time.perf_counter() - sent)
        if first_data is None:
            await upstream.aclose()
            raise ServiceError(
                502, f"The upstream at {svc.upstream.shown_url} sent an empty stream.", code="upstream_empty_stream"
            )
        probe = ChunkAssembler()
        probe.feed(first_data)
        if probe.error is not None:
            await upstream.aclose()
            error = classify_error(None, probe.error, url=svc.upstream.shown_url)
            if isinstance(error, ContextOverflowError):
                retry = await turn.compact_for_retry(error)
                if retry is not None:
                    messages = retry
                    continue
            raise ServiceError(502, str(error), code="upstream_error")
        return _Relay(turn, upstream, chunks, framer, head)


async def _read_closing(response: UpstreamReply) -> bytes:
    try:
        return await response.aread()
    except UpstreamBroken:
        return b""
    finally:
        await response.aclose()


class _Relay(StreamingResponse):
    """The upstream's stream, relayed event by event; the reply is recorded before ``[DONE]`` goes out.

    Whatever ends the stream (its end, an upstream failure, the client going away), the session's
    lease and the tenant's slot are given back, and the upstream response is closed, which cancels
    the upstream call when it was not finished.
    """

    def __init__(
        self,
        turn: _Turn,
        upstream: UpstreamReply,
        chunks: AsyncIterator[bytes],
        framer: SSEFramer,
        head: list[bytes],
    ) -> None:
        self.turn, self.upstream, self.chunks = turn, upstream, chunks
        self.framer, self.assembler, self.head = framer, ChunkAssembler(), head
        self.finished = False
        """The reply was recorded."""
        self.ended = False
        """The relay ran to its end (not cut short by the client going away)."""
        headers = {"cache-control": "no-cache", "x-accel-buffering": "no", **_session_headers(turn)}
        super().__init__(self._events(), media_type="text/event-stream", headers=headers)

    async def _events(self) -> AsyncIterator[bytes]:
        turn, assembler = self.turn, self.assembler
        for raw in self.head:  # the events read before the response started
            data = _data_of(raw)
            if data is not None:
                if data.strip() == "[DONE]":
                    await self._finish()
                assembler.feed(data)
            yield raw
        if assembler.done:
            self.ended = True
            return
        try:
            async for chunk in self.chunks:
                for raw, data in self.framer.feed(chunk):
                    if data is not None and data.strip() == "[DONE]":
                        await self._finish()
                        yield raw
                        self.ended = True
                        return
                    if data is not None:
                        assembler.feed(data)
                    yield raw
            rest = self.framer.rest()
            if rest is not None and rest[1] is not None:
                assembler.feed(rest[1])
            if assembler.complete:
                await self._finish()
            elif turn.lease is not None:
                turn.lease.failed = True
            if rest is not None:
                yield rest[0]
            self.ended = True
        except (ServiceError, UpstreamBroken) as exc:  # the upstream timed out (a 504) or broke the stream
            if turn.lease is not None:
                turn.lease.failed = True
            error = (
                exc
                if isinstance(exc, ServiceError)
                else ServiceError(
                    502,
                    f"The upstream at {turn.svc.upstream.shown_url} broke the stream.",
                    code="upstream_disconnected",
                )
            )
            turn.status = error.status
            body = {"error": {"message": error.message, "type": "upstream_error", "param": None, "code": error.code}}
            yield f"data: {json.dumps(body)}\n\n".encode()
            self.ended = True

    async def _finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        await self.turn.record(self.assembler.message(), self.assembler.usage)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        turn = self.turn
        svc = turn.svc
        try:
            await super().__call__(scope, receive, send)
        except BaseException:
            if turn.lease is not None:
                turn.lease.failed = True
            raise
        finally:
            if not self.ended:
                svc.metrics.cancelled.inc()
                turn.status = 499  # the client went away before the end: the upstream call is cancelled
                if turn.lease is not None:
                    turn.lease.failed = True
            await self.upstream.aclose()
            svc.metrics.in_flight.dec()
            if turn.lease is not None:
                svc.pool.release(turn.lease)
            svc.limits.give(turn.tenant)
            turn.log()


def _data_of(raw: bytes) -> str | None:
    lines = [line for line in raw.decode("utf-8", "replace").split("\n") if line.startswith("data:")]
    return "\n".join(line[5:].removeprefix(" ") for line in lines) if lines else None

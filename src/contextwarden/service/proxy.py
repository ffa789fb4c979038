"""The managed proxy: one flow for every dialect (Chat Completions, Anthropic Messages, Responses).

Per request: the dialect reads the conversation; the history is matched with the session's
transcript (`contextwarden.service.history`): a continuation appends its new messages, a retry of a
request already answered appends nothing (its reply is stored once), and a conversation that starts
differently (a title generator, a summarizer) goes to a session of its own named after the parent
(``<id>~<digest>``); a history the client rewrote shorter (its own compaction) goes to a session
named after the rewrite, which its next requests continue, and so does a side conversation that
starts again with other content; a history that departs from the transcript further on in any other
way is passed through unmanaged. The session prepares the view (compacting when due) with the
request's own tools in the budget, the dialect renders it into the request (everything else as the
client sent it) and the request goes upstream. When the view refers to the read-back tool, the proxy
offers it and answers the model's calls itself until the model replies to the client; those rounds
are recorded in the transcript, never shown to the client. A context-length error from the upstream
makes the session compact deeper and the request is sent once more; a request whose protected part
cannot fit is the dialect's own "prompt is too long" error.

The reply is written to the store before the client sees the end of it (the non-streaming body,
or a stream's end event), so a client that sends its next request at once, to any replica, finds
it there. A client that goes away mid-stream cancels the upstream call and nothing of the partial
reply is kept. A stream the upstream cuts (its connection drops, or its body ends before the
dialect's end marker and without a finish reason) ends with the dialect's error event, never its end
marker, and nothing of the reply is kept: the client's retry is the request whose reply is stored.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from ..exceptions import (
    BudgetExceeded,
    ContextOverflowError,
    ContextWardenError,
    MessageError,
    OverflowUnresolved,
    SessionNotFound,
    UnknownModelError,
    UpstreamError,
    UsageError,
)
from ..llm.errors import classify_error
from ..llm.served_window import ServedWindow
from .dialects import Dialect, StreamAssembler
from .encodings import read_decoded_body
from .errors import ServiceError, status_of
from .headers import header_value
from .history import head_digest
from .identity import fingerprint, session_of
from .intake import upstream_json
from .replies import SSEFramer
from .runtime import state_of
from .sessions import Lease
from .turn import Elsewhere, Turn
from .upstream import UpstreamBroken, UpstreamReply

__all__ = ["proxy"]

logger = logging.getLogger("contextwarden.service.proxy")


async def _lease(turn: Turn, session_id: str) -> Lease:
    svc = turn.svc
    try:
        # the freshness check rides on the first append (see Turn.prepare)
        return await svc.pool.acquire(turn.tenant, session_id, model=turn.body["model"], tools=turn.tools, check=False)
    except SessionNotFound:
        raise ServiceError(404, f"No session {session_id!r}.", code="session_not_found") from None
    except UnknownModelError as exc:
        raise ServiceError(400, str(exc), param="model", code="unknown_model") from None
    except UsageError as exc:  # the store refuses the id (too long, control characters)
        raise ServiceError(400, f"Invalid session id: {exc}", code="invalid_session_id") from None


async def _prepared(turn: Turn, session_id: str | None) -> list[Any] | None:
    """Lease the request's session (its own branch when it is another conversation) and prepare the view."""
    svc = turn.svc
    if session_id is None:
        return None
    if svc.settings.service.shadow:
        try:
            return await _session_view(turn, session_id)
        except (BudgetExceeded, OverflowUnresolved) as exc:  # observed, not enforced: the request goes as sent
            logger.info("shadow: session %s would refuse the request: %s", session_id, exc)
            return None
    return await _session_view(turn, session_id)


async def _session_view(turn: Turn, session_id: str) -> list[Any] | None:
    svc = turn.svc
    name = session_id
    followed = side = False
    while True:
        turn.lease = await _lease(turn, name)
        try:
            return await turn.prepare()
        except Elsewhere as elsewhere:
            svc.pool.release(turn.lease)
            turn.lease = None
            if elsewhere.kind == "other" and "~" not in name:
                # another conversation under the same id (a title generator, a summarizer): a session of its own
                name = f"{session_id}~{head_digest(turn.conversation.keyed)}"
                side = True
                continue
            found = elsewhere.rewrite
            if found is not None and not followed:
                # the client rewrote its history shorter (its own compaction), or a side conversation started
                # again with other content (the next compression): the history is a session of its own,
                # named after the rewrite, which the client's next requests continue
                followed = True
                rewritten = f"{name}~{found.digest}"
                if found.shorter or side or await svc.pool.exists(turn.tenant, rewritten):
                    name = rewritten
                    continue
            turn.unmanaged = elsewhere.kind
            svc.metrics.unmanaged.labels(elsewhere.kind).inc()
            logger.info("session %s: the request's history departs from the transcript; sent unmanaged", name)
            return None


async def proxy(request: Request, dialect: Dialect) -> Response:
    """The proxy route of ``dialect``."""
    svc = state_of(request)
    try:
        tenant = svc.tenants.tenant(request)
        svc.limits.take(tenant)
    except ServiceError as exc:
        return dialect.error_response(exc.status, exc.message, code=exc.code, param=exc.param, headers=exc.headers)
    turn: Turn | None = None
    handed_off = False
    try:
        raw = await read_decoded_body(request, svc.settings.service.max_body_bytes)
        body = dialect.parse(raw)
        refusal = dialect.refuse(body)
        if refusal is not None:
            raise refusal
        turn = Turn(svc, request, tenant, dialect, body, raw)
        session_id = session_of(request, dialect.session_hint(body))
        if session_id is None and svc.settings.service.session_fingerprint:
            session_id = fingerprint(turn.conversation.keyed)
        if session_id is None:
            if svc.settings.service.require_session_id:
                raise ServiceError(
                    400,
                    "The request names no session: send the `X-Session-Id` header, or call the proxy at "
                    "`/s/<session>/v1/...`; this service requires one (`[service] require_session_id`).",
                    code="missing_session_id",
                )
            turn.unmanaged = "no_session"
            svc.metrics.unmanaged.labels("no_session").inc()
        svc.metrics.in_flight.inc()
        try:
            view = await _prepared(turn, session_id)
            response = await (_stream(turn, view) if turn.stream else _complete(turn, view))
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
        return dialect.error_response(exc.status, exc.message, code=exc.code, param=exc.param, headers=exc.headers)
    except (BudgetExceeded, OverflowUnresolved) as exc:
        # the request's own protected part (system prompt, tools, current message) cannot fit: the client's to fix
        if turn is not None:
            turn.status = 400
            if turn.lease is not None:
                turn.lease.failed = True
        return dialect.too_long(str(exc))
    except ContextWardenError as exc:
        if turn is not None and turn.lease is not None:
            turn.lease.failed = True
        logger.warning("%s failed for tenant %s: %s", dialect.name, tenant, type(exc).__name__)
        status = status_of(exc)
        if turn is not None:
            turn.status = status
        return dialect.error_response(status, svc.redactor.text(str(exc)), code=type(exc).__name__)
    except BaseException:
        if turn is not None and turn.lease is not None:
            turn.lease.failed = True
        raise
    finally:
        if not handed_off:
            if turn is not None:
                if turn.lease is not None:
                    if turn.status >= 400:  # refused: a session made for this request is not kept
                        await svc.pool.discard(turn.lease)
                    svc.pool.release(turn.lease)
                turn.log()
            svc.limits.give(tenant)


def _session_headers(turn: Turn) -> dict[str, str]:
    return {"x-session-id": header_value(turn.lease.session_id)} if turn.lease is not None else {}


def _bad_reply(turn: Turn, content: bytes) -> ServiceError:
    return ServiceError(
        502,
        f"The upstream at {turn.svc.upstream.shown_url} answered HTTP 200 with a body that is not a "
        f"{turn.dialect.name} reply ({turn.redacted(content[:120])!r}); check `[service] upstream_url`.",
        code="upstream_bad_reply",
    )


async def _complete(turn: Turn, view: list[Any] | None) -> Response:
    svc, dialect = turn.svc, turn.dialect
    headers = turn.upstream_headers(stream=False)
    while True:
        sent = time.perf_counter()
        upstream = await svc.upstream.send(turn.upstream_body(view), headers, stream=False, path=turn.upstream_path)
        svc.metrics.upstream_latency.observe(time.perf_counter() - sent)
        if upstream.status_code != 200:
            error = classify_error(upstream.status_code, upstream.content, url=svc.upstream.shown_url)
            if isinstance(error, ContextOverflowError):
                retry = await turn.compact_for_retry(error)
                if retry is not None:
                    view = retry
                    continue
            answer = turn.upstream_error(upstream.status_code, upstream.content, upstream.headers)
            if isinstance(answer, ServiceError):
                raise answer
            return answer
        try:
            reply = dialect.reply(turn.body, upstream_json(upstream.content))
        except (ValueError, MessageError):
            raise _bad_reply(turn, upstream.content) from None
        if turn.read_back(reply):
            view = await turn.answer_read_back(reply)
            continue
        await turn.record(reply)
        return Response(
            turn.secrets_out(upstream.content),
            status_code=200,
            media_type="application/json",
            headers=_session_headers(turn),
        )


async def _stream(turn: Turn, view: list[Any] | None) -> Response:
    svc, dialect = turn.svc, turn.dialect
    headers = turn.upstream_headers(stream=True)
    while True:
        sent = time.perf_counter()
        upstream = await svc.upstream.send(turn.upstream_body(view), headers, stream=True, path=turn.upstream_path)
        if upstream.status_code != 200:
            content = await _read_closing(upstream)
            svc.metrics.upstream_latency.observe(time.perf_counter() - sent)
            error = classify_error(upstream.status_code, content, url=svc.upstream.shown_url)
            if isinstance(error, ContextOverflowError):
                retry = await turn.compact_for_retry(error)
                if retry is not None:
                    view = retry
                    continue
            answer = turn.upstream_error(upstream.status_code, content, upstream.headers)
            if isinstance(answer, ServiceError):
                raise answer
            return answer
        # read up to the first event (to the end when the read-back tool is offered: the client must not see
        # its calls); an error sent as the stream's first event is still answerable
        framer = SSEFramer(svc.upstream.limits.max_event_bytes)
        assembler = dialect.assembler(turn.body)
        head: list[bytes] = []
        chunks = upstream.aiter_raw()
        first_data: str | None = None
        whole = turn.offered
        try:
            while first_data is None or whole:
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    rest = framer.rest()
                    if rest is not None:
                        head.append(rest[0])
                        if rest[1] is not None:
                            first_data = first_data or rest[1]
                            if whole:
                                assembler.feed(rest[1])
                    break
                for raw, data in framer.feed(chunk):
                    head.append(raw)
                    if data is not None:
                        if first_data is None:
                            first_data = data
                        if whole:
                            assembler.feed(data)
        except ServiceError:
            await upstream.aclose()
            raise
        except UpstreamBroken:
            await upstream.aclose()
            retry = await _retry_cut_stream(turn)
            if retry is not None:
                view = retry
                continue
            raise ServiceError(
                502,
                f"The upstream at {svc.upstream.shown_url} broke the stream before its first event.",
                code="upstream_disconnected",
            ) from None
        svc.metrics.upstream_latency.observe(time.perf_counter() - sent)
        if first_data is None:
            await upstream.aclose()
            retry = await _retry_cut_stream(turn)
            if retry is not None:
                view = retry
                continue
            raise ServiceError(
                502, f"The upstream at {svc.upstream.shown_url} sent an empty stream.", code="upstream_empty_stream"
            )
        probe = dialect.assembler(turn.body)
        probe.feed(first_data)
        if probe.error is not None:
            await upstream.aclose()
            error = classify_error(None, probe.error, url=svc.upstream.shown_url)
            if isinstance(error, ContextOverflowError):
                retry = await turn.compact_for_retry(error)
                if retry is not None:
                    view = retry
                    continue
            raise ServiceError(502, turn.redacted(str(error).encode()).decode(), code="upstream_error")
        if whole and assembler.complete:
            try:
                reply = assembler.reply()
            except MessageError:
                reply = None
            if reply is not None and turn.read_back(reply):
                await upstream.aclose()
                view = await turn.answer_read_back(reply)
                continue
        return _Relay(turn, upstream, chunks, framer, head)


_SERVED: dict[tuple[str, str], ServedWindow] = {}
"""What each upstream said its window is, by (base URL, model): probed once, on the first cut stream."""


async def _retry_cut_stream(turn: Turn) -> list[Any] | None:
    """A stream cut before its first event, near the upstream's window: compact and retry (None: do not).

    Some servers refuse an over-long streamed prompt with an empty stream or a dropped connection
    (llama-cpp-python's): the upstream's own endpoints name its window
    (`contextwarden.llm.served_window`), and a view near it is compacted as after a context-length error.
    """
    if turn.lease is None or turn.view_tokens is None:
        return None
    from ..llm.served_window import aprobe
    from ..llm.stream_recovery import likely_overflow, overflow_from_window

    base_url, model = turn.svc.upstream.base_url, str(turn.body.get("model"))
    served = _SERVED.get((base_url, model))
    if served is None:
        try:
            served = _SERVED[(base_url, model)] = await aprobe(base_url, model=model)
        except (UpstreamError, UsageError) as exc:
            logger.info("probing the upstream's window failed: %s", exc)
            return None
    # counts may fall short of the server's own: half the window is near enough for a stream cut this way
    if served.window is None or not likely_overflow(
        prompt_tokens=turn.view_tokens, window=served.window, largest_answered=turn.view_tokens, near=0.5
    ):
        return None
    error = overflow_from_window(served, url=turn.svc.upstream.shown_url, prompt_tokens=turn.view_tokens)
    return await turn.compact_for_retry(error) if error is not None else None


async def _read_closing(response: UpstreamReply) -> bytes:
    try:
        return await response.aread()
    except UpstreamBroken:
        return b""
    finally:
        await response.aclose()


class _Relay(StreamingResponse):
    """The upstream's stream, relayed event by event; the reply is recorded before its end event goes out.

    Whatever ends the stream (its end, an upstream failure, the client going away), the session's
    lease and the tenant's slot are given back, and the upstream response is closed, which cancels
    the upstream call when it was not finished. A stream that ends without a reply (an error event,
    a cut, a bound) is a refused request: a session it created is deleted, as for a refused request
    that was not streamed.
    """

    def __init__(
        self,
        turn: Turn,
        upstream: UpstreamReply,
        chunks: AsyncIterator[bytes],
        framer: SSEFramer,
        head: list[bytes],
    ) -> None:
        self.turn, self.upstream, self.chunks = turn, upstream, chunks
        self.framer, self.head = framer, head
        self.assembler: StreamAssembler = turn.dialect.assembler(turn.body)
        self.finished = False
        """The stream's end was handled (its reply recorded, or found unusable)."""
        self.recorded = False
        """The reply was recorded."""
        self.ended = False
        """The relay ran to its end (not cut short by the client going away)."""
        self.discarded = False
        """A session this request created was deleted (the stream ends without a reply)."""
        headers = {"cache-control": "no-cache", "x-accel-buffering": "no", **_session_headers(turn)}
        super().__init__(self._scrubbed(), media_type="text/event-stream", headers=headers)

    async def _scrubbed(self) -> AsyncIterator[bytes]:
        async for raw in self._events():
            yield self.turn.secrets_out(raw)

    async def _events(self) -> AsyncIterator[bytes]:
        turn, assembler = self.turn, self.assembler
        for raw in self.head:  # the events read before the response started
            data = _data_of(raw)
            if data is not None:
                assembler.feed(data)
                if assembler.error is not None:  # an error event: its text may quote a credential
                    raw = turn.redacted(raw)
                if assembler.done:
                    await self._finish()
                    await self._discard_unless_recorded()
            yield raw
        if self.finished:
            self.ended = True
            return
        try:
            async for chunk in self.chunks:
                for raw, data in self.framer.feed(chunk):
                    if data is not None:
                        assembler.feed(data)
                        if assembler.error is not None:  # an error event: its text may quote a credential
                            raw = turn.redacted(raw)
                        if assembler.done:  # every dialect's end event is its stream's last
                            await self._finish()
                            await self._discard_unless_recorded()
                            yield raw
                            self.ended = True
                            return
                    yield raw
            rest = self.framer.rest()
            if rest is not None and rest[1] is not None:
                assembler.feed(rest[1])
            if assembler.complete:
                # a reply with its finish reason is whole without the end marker (as `Session.stream()` takes it)
                await self._finish()
                await self._discard_unless_recorded()
                if rest is not None:
                    yield rest[0]
            elif assembler.error is not None:  # the upstream's own error event ended the stream
                if turn.lease is not None and not self.finished:
                    turn.lease.failed = True
                await self._discard_unless_recorded()
                if rest is not None:
                    yield turn.redacted(rest[0])
            else:
                # cut: the client is told, and an unfinished last event is not relayed (SSE drops it too)
                await self._discard_unless_recorded()
                yield self._cut("ended the stream")
            self.ended = True
        except ServiceError as exc:  # the upstream timed out (a 504), or a bound was passed
            if turn.lease is not None and not self.finished:
                turn.lease.failed = True
            turn.status = exc.status
            await self._discard_unless_recorded()
            yield turn.dialect.error_event(exc.status, exc.message, code=exc.code, after=assembler)
            self.ended = True
        except UpstreamBroken:
            await self._discard_unless_recorded()
            yield self._cut("broke the connection")
            self.ended = True

    def _cut(self, how: str) -> bytes:
        """The error event that ends a stream the upstream cut before its reply was whole.

        Nothing of the reply is stored, as `Session.stream()` appends nothing of a cut stream: the
        client retries with the same history, and that request is the one whose reply is stored.
        """
        turn = self.turn
        if turn.lease is not None and not self.finished:
            turn.lease.failed = True
        turn.status = 502
        message = (
            f"The upstream at {turn.svc.upstream.shown_url} {how} before the end of the reply; nothing of the "
            "reply was stored. Retry the request."
        )
        return turn.dialect.error_event(502, message, code="upstream_stream_cut", after=self.assembler)

    async def _discard_unless_recorded(self) -> None:
        """Before the stream's last event: a session this request created goes when no reply was recorded.

        Done before the client reads the end of the stream, so a client that looks right after it
        finds no session the refused request made.
        """
        lease = self.turn.lease
        if self.recorded or self.discarded or lease is None:
            return
        self.discarded = True
        await self.turn.svc.pool.discard(lease)

    async def _finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        lease = self.turn.lease
        if self.assembler.error is not None:  # an end event that reports a failure (``response.failed``): no reply
            if lease is not None:
                lease.failed = True
            return
        try:
            reply = self.assembler.reply()
        except MessageError:
            if lease is not None:
                lease.failed = True
            return
        await self.turn.record(reply)
        self.recorded = True

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
            elif not self.recorded:
                turn.status = max(turn.status, 502)  # the stream ended without a reply: an error event, a cut
            await self.upstream.aclose()
            svc.metrics.in_flight.dec()
            if turn.lease is not None:  # a refused stream's session was discarded before its last event
                svc.pool.release(turn.lease)
            svc.limits.give(turn.tenant)
            turn.log()


def _data_of(raw: bytes) -> str | None:
    lines = [line for line in raw.decode("utf-8", "replace").split("\n") if line.startswith("data:")]
    return "\n".join(line[5:].removeprefix(" ") for line in lines) if lines else None

"""The managed proxy: one flow for every dialect (Chat Completions, Anthropic Messages, Responses).

Per request: the dialect reads the conversation; the history is matched with the session's
transcript (`contextwarden.service.history`): a continuation appends its new messages, a retry of
a request already answered appends nothing (its reply is stored once), and a conversation that
starts differently (a title generator, a summarizer) goes to a session of its own named after the
parent (``<id>~<digest>``); a history that departs from the transcript further on is passed through
unmanaged. The session prepares the view (compacting when due) with the request's own tools in the
budget, the dialect renders it into the request (everything else as the client sent it) and the
request goes upstream. When the view refers to the read-back tool, the proxy offers it and answers
the model's calls itself until the model replies to the client; those rounds are recorded in the
transcript, never shown to the client. A context-length error from the upstream makes the session
compact deeper and the request is sent once more; a request whose protected part cannot fit is
the dialect's own "prompt is too long" error.

The reply is written to the store before the client sees the end of it (the non-streaming body,
or a stream's end event), so a client that sends its next request at once, to any replica, finds
it there. A client that goes away mid-stream cancels the upstream call and nothing of the partial
reply is kept. A stream the upstream cuts (its connection drops, or its body ends before the
dialect's end marker and without a finish reason) ends with the dialect's error event, never its end
marker, and nothing of the reply is kept: the client's retry is the request whose reply is stored.
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

from ..adapters import from_messages
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
from ..messages import Message, TextPart
from ..snapshots import READ_CONTEXT_TOOL
from . import jsonio
from .auth import presented_key
from .dialects import Conversation, Dialect, Reply, StreamAssembler
from .dialects.openai_chat import invalid_message
from .encodings import read_decoded_body
from .errors import ServiceError, status_of
from .headers import header_value
from .history import READ_BACK, continuation, head_digest
from .identity import fingerprint, session_of
from .intake import upstream_json
from .keep import kept_messages
from .replies import SSEFramer, believable
from .runtime import ServiceState, state_of
from .sessions import Lease, SessionMoved
from .upstream import UpstreamBroken, UpstreamReply

__all__ = ["proxy"]

logger = logging.getLogger("contextwarden.service.proxy")

_MOVED_ATTEMPTS = 3
"""Times a request reads its session again after another writer appended to it first."""

_ADD_ROUND = 32
"""Messages added at once before a long history lets other requests run (about a millisecond of work)."""

_READ_BACK_ROUNDS = 4
"""Read-back calls the proxy answers for one request; the last upstream call is made without the tool."""

_NOT_RUN = (
    "Not run: this call came in the same turn as read_context, which was answered first. "
    "Call it again if it is still needed."
)
"""The result of a client's tool call the model made next to a read-back call (the client never saw it)."""


class _Elsewhere(Exception):
    """The request's history is not this session's conversation (``kind``: ``other`` or ``diverged``)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _offers_read_back(view: list[Message]) -> bool:
    """The view points the model at ``read_context`` (a context block, a shortened output, a summary)."""
    for message in view:
        if (message.snapshot_id or message.source_ids or message.extra.get("contextwarden")) and (
            READ_BACK in message.text
        ):
            return True
    return False


class _Turn:
    """One proxied request: its lease on the session (None when unmanaged) and its bookkeeping."""

    def __init__(
        self, svc: ServiceState, request: Request, tenant: str, dialect: Dialect, body: dict[str, Any], raw: bytes
    ) -> None:
        self.svc = svc
        self.request = request
        self.tenant = tenant
        self.dialect = dialect
        self.body = body
        self.raw = raw
        self.stream = bool(body.get("stream"))
        self._conversation: Conversation | None = None
        self.tools = dialect.tools(body)
        self.lease: Lease | None = None
        self.started = time.perf_counter()
        self.added = 0
        self.status = 200
        self.view_tokens: int | None = None
        self.retried = False
        self.drop = 0
        """A retry: the stored reply's messages, left out of the view and not stored again."""
        self.offered = False
        """The read-back tool is offered to the upstream with this request."""
        self.read_backs = 0
        self.unwritten = False
        """The session holds messages of this request that are not in the store yet (written with the reply)."""
        self.unmanaged: str | None = None
        """Why the request went upstream unmanaged (None: managed, or no session named)."""

    @property
    def conversation(self) -> Conversation:
        """The request's conversation (converted with the help of the session's memo once leased)."""
        if self._conversation is None:
            self._conversation = self.dialect.conversation(self.body, self.lease.memo if self.lease else None)
        return self._conversation

    # --- the session side ---------------------------------------------------------------------
    async def prepare(self) -> list[Any] | None:
        """Append the new messages and return the view to send (None: send the client's request as is).

        The first append expects the transcript at the length this process knows: when another
        replica appended meanwhile (or the session was deleted), nothing is written and the session
        is read again from the store, and the client's history compared with that.

        Raises:
            _Elsewhere: the history is another conversation, or departs from the transcript.
            BudgetExceeded: the request's tools, system prompt and current message cannot fit.
        """
        lease = self.lease
        if lease is None:
            return None
        keyed = self.conversation.keyed
        for attempt in range(_MOVED_ATTEMPTS):
            self.added = 0
            lease.sync_keys()
            found = continuation(keyed, lease.keys)
            start = found.start if found.kind == "extends" else len(keyed)
            if (found.kind != "extends" or start == len(keyed)) and not lease.checked:
                # nothing to append to carry the check (a retry, another conversation): ask the store, compare again
                await self.svc.pool.verify(lease, model=self.body["model"], tools=self.tools)
                continue
            if found.kind in ("other", "diverged"):
                raise _Elsewhere(found.kind)
            self.drop = found.drop
            # the condition rides on the request's one append (its new messages and the reply, written
            # together after the reply: `write`), or on the first append a due compaction makes
            lease.expect(len(lease.session.engine.transcript))
            try:
                lease.session.use_tools(self.tools)
                if start < len(keyed):
                    parsed = self.conversation.convert(start)
                    before = len(lease.session.engine.transcript)
                    self.added = await self._add(parsed, start)
                    self.unwritten = self.unwritten or self.added > 0
                    lease.keyed(keyed[start:], before=before)
                prepared = await lease.session.prepare(format=self.dialect.view_format, defer_write=True)
            except SessionMoved:
                if attempt == _MOVED_ATTEMPTS - 1:
                    raise ServiceError(
                        503,
                        f"Session {lease.session_id!r} kept changing in the store while this request was appended "
                        "(other writers); retry.",
                        code="session_busy",
                    ) from None
                self.unwritten = False  # the session read again holds none of them
                await self.svc.pool.reload(lease, model=self.body["model"], tools=self.tools)
                continue
            self.view_tokens = prepared.status.used
            return self._served(prepared.messages, prepared.view)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _served(self, messages: list[Any], view: list[Message]) -> list[Any] | None:
        """The view to send: without a retried request's stored reply; read-back offered when it is referred to."""
        assert self.lease is not None
        if self.drop:
            transcript = self.lease.session.engine.transcript
            tail = [m.message_id for m in transcript[-self.drop :]]
            if [m.message_id for m in view[-self.drop :]] != tail:
                self.unmanaged = "retry"  # the stored reply is not at the view's end: send the request as is
                self.svc.metrics.unmanaged.labels("retry").inc()
                return None
            messages, view = messages[: -self.drop], view[: -self.drop]
        names = {str(t.get("name") or (t.get("function") or {}).get("name")) for t in self.tools}
        self.offered = (
            not self.svc.settings.service.shadow
            and READ_BACK not in names
            and self.read_backs < _READ_BACK_ROUNDS
            and _offers_read_back(view)
        )
        return messages

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
                raise invalid_message(_FIELDS.get(self.dialect.name, "messages"), start + begin, exc) from None
            begin = end
        return added

    async def compact_for_retry(self, error: ContextOverflowError) -> list[Any] | None:
        """After a context-length error: the deeper-compacted view to retry with (None: no retry)."""
        if self.lease is None or self.retried or self.drop or self.svc.settings.service.shadow:
            return None  # in shadow mode the client's request stands as sent, and so does the upstream's answer
        self.retried = True
        self.svc.metrics.retries.inc()
        prepared = await self.lease.session.on_context_overflow(format=self.dialect.view_format, error=error)
        self.view_tokens = prepared.status.used
        logger.info("session %s: upstream context-length error; compacted and retrying", self.lease.session_id)
        return self._served(prepared.messages, prepared.view)

    async def record(self, reply: Reply) -> None:
        """Append the upstream's reply and its usage; write what is new to the store."""
        metrics = self.svc.metrics
        usage = believable(reply.usage)
        if usage.reported:
            metrics.tokens_in.inc(usage.input_tokens)
            metrics.tokens_out.inc(usage.output_tokens)
        lease = self.lease
        if lease is None or self.unmanaged:
            return  # an unmanaged request has no session
        recorded: list[Message] = []
        if not self.drop:  # a retry's reply is stored already
            session = lease.session
            if not self.svc.settings.service.shadow:  # in shadow mode the usage is the whole request's
                session.on_turn_end(usage)
            if reply.messages is not None:  # several choices: the client's pick comes with its next request
                lease.sync_keys()
                recorded = self._add_reply(reply.messages)
                if reply.keyed is not None and recorded is reply.messages:
                    lease.keyed(reply.keyed, before=len(session.engine.transcript) - len(recorded))
        await self.write(recorded, reply.keyed if recorded is reply.messages else None)
        lease.sync_keys()

    def _add_reply(self, messages: list[Message]) -> list[Message]:
        """Add the reply's messages; the ones added (a reply the validator refuses is kept as `Session.complete`
        keeps it: it was paid for)."""
        assert self.lease is not None
        try:
            self.lease.session.add(messages)
            return messages
        except MessageError:
            kept = kept_messages(messages)
            self.lease.session.add(kept)
            return kept

    async def write(self, reply: list[Message], reply_keyed: list[dict[str, Any]] | None) -> None:
        """Write what the request added (its new messages and the reply) to the store, in one append.

        That append is the request's one store round trip, conditional on the transcript's length
        this process read. When another replica appended meanwhile, the session is read again and
        what this request adds to the stored transcript is appended to it; when that cannot be told
        (the request's read-back rounds, a reply that is not one message per chat dict), the session
        is dropped from memory: the store's copy is the truth, and the client's next request re-sends
        the rest.
        """
        lease = self.lease
        assert lease is not None
        for attempt in range(_MOVED_ATTEMPTS):
            try:
                await lease.session.flush()
                self.unwritten = False
                return
            except SessionMoved:
                if attempt == _MOVED_ATTEMPTS - 1 or self.read_backs:
                    break
                await self.svc.pool.reload(lease, model=self.body["model"], tools=self.tools)
                if not self._append_again(reply, reply_keyed):
                    break
        lease.failed = True
        self.unwritten = False
        logger.info("session %s changed in the store during the request; read again on the next", lease.session_id)

    def _append_again(self, reply: list[Message], reply_keyed: list[dict[str, Any]] | None) -> bool:
        """After the session was read again: add what the request's history and its reply add to it."""
        lease = self.lease
        assert lease is not None
        if reply_keyed is None:
            reply_keyed = from_messages(reply, format="openai")
        if len(reply_keyed) != len(reply):
            return False
        lease.sync_keys()
        keyed = [*self.conversation.keyed, *reply_keyed]
        found = continuation(keyed, lease.keys)
        if found.kind != "extends":
            return False
        sent = len(self.conversation.keyed)
        fresh = [*(self.conversation.convert(found.start) if found.start < sent else []), *reply[found.start - sent :]]
        if found.start > sent:
            fresh = reply[found.start - sent :]
        lease.expect(len(lease.session.engine.transcript))
        lease.session.use_tools(self.tools)
        try:
            lease.session.add(fresh)
        except MessageError:
            return False
        return True

    def read_back(self, reply: Reply) -> bool:
        """Whether the reply calls the read-back tool: the proxy answers it and asks again.

        A reply that calls it next to the client's own tools is not relayed either (the client would
        see a tool it never defined): the client's calls get a result saying they were not run, and
        the model, asked again with what it read, makes the calls it still needs. The relayed reply
        stays the model's own, byte for byte (signed thinking, streams), and every call keeps its result.
        """
        return self.offered and any(call.name == READ_BACK for call in reply.tool_calls)

    async def answer_read_back(self, reply: Reply) -> list[Any] | None:
        """Record the read-back calls, answer them, and return the next view."""
        assert self.lease is not None
        await self.record(reply)
        session = self.lease.session
        results = [
            Message(
                role="tool",
                tool_call_id=call.call_id,
                name=call.name,
                parts=(
                    TextPart(
                        text=(session.handle_tool_call(call.name, call.arguments) or "")
                        if call.name == READ_BACK
                        else _NOT_RUN
                    ),
                ),
                is_error=call.name != READ_BACK,
            )
            for call in reply.tool_calls
        ]
        session.add(results)
        await session.flush()
        self.read_backs += 1
        skipped = sum(call.name != READ_BACK for call in reply.tool_calls)
        logger.info(
            "session %s: answered %d read-back call(s), %d client call(s) left to ask again",
            self.lease.session_id,
            len(results) - skipped,
            skipped,
        )
        prepared = await session.prepare(format=self.dialect.view_format)
        self.view_tokens = prepared.status.used
        return self._served(prepared.messages, prepared.view)

    # --- the upstream side --------------------------------------------------------------------
    def upstream_body(self, view: list[Any] | None) -> bytes:
        if view is None or self.svc.settings.service.shadow:
            return self.raw
        extra = [self.dialect.tool_schema(READ_CONTEXT_TOOL)] if self.offered else []
        return jsonio.dumps(self.dialect.render(self.body, view, extra_tools=extra))

    @property
    def upstream_path(self) -> str:
        """The dialect's path under the upstream's API root, with the client's query (Claude Code's ``beta=true``)."""
        query = self.request.url.query
        return f"{self.dialect.upstream_path}?{query}" if query else self.dialect.upstream_path

    def upstream_headers(self, *, stream: bool) -> dict[str, str]:
        dialect = self.dialect
        return self.svc.upstream.headers(
            self.request, stream=stream, forward=dialect.forwarded_headers, key_header=dialect.key_header
        )

    def upstream_error(self, status: int, content: bytes, headers: Mapping[str, str]) -> ServiceError | Response:
        """What the client gets for an upstream error reply (an overflow was handled before): the upstream's
        own error with its status, except a refusal of the service's credentials."""
        refused_ours = status in (401, 403, 407) and not self.svc.upstream.forwards_client_key
        if not refused_ours:
            passed = {k: v for k, v in headers.items() if k.lower() in ("retry-after", "content-type")}
            if _is_json(content):
                return Response(self.redacted(content), status_code=status, headers=passed)
            return ServiceError(status, f"The upstream answered HTTP {status}.", code="upstream_error", headers=passed)
        return ServiceError(
            502,
            f"The upstream at {self.svc.upstream.shown_url} refused the service's credentials (HTTP {status}); the "
            "operator should check the key in `[service] upstream_api_key_env`.",
            code="upstream_error",
        )

    def redacted(self, content: bytes) -> bytes:
        """An upstream text without credentials (the service's key, the client's bearer, key-shaped tokens)."""
        return self.svc.redactor.body(content, presented_key(self.request))

    def secrets_out(self, content: bytes) -> bytes:
        """A relayed reply without the service's key or the client's bearer in it."""
        return self.svc.redactor.secrets_out(content, presented_key(self.request))

    def log(self) -> None:
        elapsed = (time.perf_counter() - self.started) * 1000
        session = self.lease.session_id if self.lease is not None else "-"
        logger.info(
            "%s tenant=%s session=%s stream=%s status=%s new_messages=%s view_tokens=%s retried=%s read_backs=%s "
            "unmanaged=%s ms=%.1f",
            self.dialect.name,
            self.tenant,
            session,
            self.stream,
            self.status,
            self.added,
            self.view_tokens,
            self.retried,
            self.read_backs,
            self.unmanaged,
            elapsed,
        )
        if self.svc.settings.service.log_content:
            last = self.conversation.keyed[-1] if self.conversation.keyed else {}
            logger.info("session %s last message (%s): %.500s", session, last.get("role"), last.get("content"))


_FIELDS = {"messages": "messages", "responses": "input"}


def _round_end(messages: list[Message], begin: int) -> int:
    """Where the round of messages starting at ``begin`` ends: at a user message past ``_ADD_ROUND``."""
    end = begin + _ADD_ROUND
    if end >= len(messages) - _ADD_ROUND // 2:
        return len(messages)
    while end < len(messages) and messages[end].role != "user":
        end += 1
    return end


def _is_json(content: bytes) -> bool:
    try:
        json.loads(content)
    except ValueError:
        return False
    return True


async def _lease(turn: _Turn, session_id: str) -> Lease:
    svc = turn.svc
    try:
        # the freshness check rides on the first append (see _Turn.prepare)
        return await svc.pool.acquire(turn.tenant, session_id, model=turn.body["model"], tools=turn.tools, check=False)
    except SessionNotFound:
        raise ServiceError(404, f"No session {session_id!r}.", code="session_not_found") from None
    except UnknownModelError as exc:
        raise ServiceError(400, str(exc), param="model", code="unknown_model") from None
    except UsageError as exc:  # the store refuses the id (too long, control characters)
        raise ServiceError(400, f"Invalid session id: {exc}", code="invalid_session_id") from None


async def _prepared(turn: _Turn, session_id: str | None) -> list[Any] | None:
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


async def _session_view(turn: _Turn, session_id: str) -> list[Any] | None:
    svc = turn.svc
    name = session_id
    while True:
        turn.lease = await _lease(turn, name)
        try:
            return await turn.prepare()
        except _Elsewhere as elsewhere:
            svc.pool.release(turn.lease)
            turn.lease = None
            if elsewhere.kind == "other" and "~" not in name:
                # another conversation under the same id (a title generator, a summarizer): a session of its own
                name = f"{session_id}~{head_digest(turn.conversation.keyed)}"
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
    turn: _Turn | None = None
    handed_off = False
    try:
        raw = await read_decoded_body(request, svc.settings.service.max_body_bytes)
        body = dialect.parse(raw)
        refusal = dialect.refuse(body)
        if refusal is not None:
            raise refusal
        turn = _Turn(svc, request, tenant, dialect, body, raw)
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


def _session_headers(turn: _Turn) -> dict[str, str]:
    return {"x-session-id": header_value(turn.lease.session_id)} if turn.lease is not None else {}


def _bad_reply(turn: _Turn, content: bytes) -> ServiceError:
    return ServiceError(
        502,
        f"The upstream at {turn.svc.upstream.shown_url} answered HTTP 200 with a body that is not a "
        f"{turn.dialect.name} reply ({turn.redacted(content[:120])!r}); check `[service] upstream_url`.",
        code="upstream_bad_reply",
    )


async def _complete(turn: _Turn, view: list[Any] | None) -> Response:
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


async def _stream(turn: _Turn, view: list[Any] | None) -> Response:
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


async def _retry_cut_stream(turn: _Turn) -> list[Any] | None:
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
        turn: _Turn,
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
                if rest is not None:
                    yield rest[0]
            elif assembler.error is not None:  # the upstream's own error event ended the stream
                if turn.lease is not None and not self.finished:
                    turn.lease.failed = True
                if rest is not None:
                    yield turn.redacted(rest[0])
            else:
                # cut: the client is told, and an unfinished last event is not relayed (SSE drops it too)
                yield self._cut("ended the stream")
            self.ended = True
        except ServiceError as exc:  # the upstream timed out (a 504), or a bound was passed
            if turn.lease is not None and not self.finished:
                turn.lease.failed = True
            turn.status = exc.status
            yield turn.dialect.error_event(exc.status, exc.message, code=exc.code, after=assembler)
            self.ended = True
        except UpstreamBroken:
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
            if turn.lease is not None:
                if self.ended and not self.recorded:  # refused: a session made for this request is not kept
                    await svc.pool.discard(turn.lease)
                svc.pool.release(turn.lease)
            svc.limits.give(turn.tenant)
            turn.log()


def _data_of(raw: bytes) -> str | None:
    lines = [line for line in raw.decode("utf-8", "replace").split("\n") if line.startswith("data:")]
    return "\n".join(line[5:].removeprefix(" ") for line in lines) if lines else None

"""One proxied request: its session side and its upstream side (`contextwarden.service.proxy` runs the flow).

The session side matches the request's history with the transcript (`contextwarden.service.history`),
adds its new messages, prepares the view, answers the model's read-back calls and records the reply;
the request's new messages and the reply are written to the store in one append after the reply
(`Turn.write`). The upstream side renders the upstream body and headers and shapes the upstream's
errors for the client.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..adapters import from_messages
from ..exceptions import ContextOverflowError, MessageError
from ..messages import Message, TextPart, new_message_id
from ..snapshots import READ_CONTEXT_TOOL
from . import jsonio
from .auth import presented_key
from .dialects import Conversation, Dialect, Reply
from .dialects.openai_chat import invalid_message
from .errors import ServiceError
from .history import READ_BACK, Rewrite, continuation, rewrite
from .keep import kept_messages
from .replies import believable
from .runtime import ServiceState
from .sessions import Lease, SessionMoved

__all__ = ["Elsewhere", "Turn"]

# the proxy's one log: a line per proxied request, whichever module writes it
logger = logging.getLogger("contextwarden.service.proxy")

_MOVED_ATTEMPTS = 3
"""Times a request reads its session again after another writer appended to it first."""

_ADD_ROUND = 32
"""Messages converted or added at once before a long history lets other requests run (about a millisecond of work)."""

_READ_BACK_ROUNDS = 4
"""Read-back calls the proxy answers for one request; the last upstream call is made without the tool."""

_NOT_RUN = (
    "Not run: this call came in the same turn as read_context, which was answered first. "
    "Call it again if it is still needed."
)
"""The result of a client's tool call the model made next to a read-back call (the client never saw it)."""


class Elsewhere(Exception):
    """The request's history is not this session's conversation (``kind``: ``other`` or ``diverged``)."""

    def __init__(self, kind: str, *, rewrite: Rewrite | None = None) -> None:
        super().__init__(kind)
        self.kind = kind
        self.rewrite = rewrite
        """For ``diverged``: where the history first differs from the transcript."""


def _offers_read_back(view: list[Message]) -> bool:
    """The view points the model at ``read_context`` (a context block, a shortened output, a summary)."""
    for message in view:
        if (message.snapshot_id or message.source_ids or message.extra.get("contextwarden")) and (
            READ_BACK in message.text
        ):
            return True
    return False


class Turn:
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
        self.written: int | None = None
        """The transcript length this request knows the store holds (its appends expect it)."""
        self.wrote = False
        """An append of this request reached the store (its turn is there in part)."""
        self.produced: list[Message] = []
        """What this request recorded after the client's messages: read-back rounds, then the reply."""
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
            Elsewhere: the history is another conversation, or departs from the transcript.
            BudgetExceeded: the request's tools, system prompt and current message cannot fit.
        """
        lease = self.lease
        if lease is None:
            return None
        if self._conversation is None:
            for _ in self.dialect.converting(self.body, lease.memo, step=_ADD_ROUND):
                await asyncio.sleep(0)
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
            if found.kind == "diverged":
                raise Elsewhere(found.kind, rewrite=rewrite(keyed, lease.keys))
            if found.kind == "other":
                raise Elsewhere(found.kind)
            self.drop = found.drop
            # the condition rides on the request's one append (its new messages and the reply, written
            # together after the reply: `write`), or on the first append a due compaction makes
            lease.expect(lease.session.state.transcript_length)
            try:
                lease.session.use_tools(self.tools)
                if start < len(keyed):
                    parsed = self.conversation.convert(start)
                    before = lease.session.state.transcript_length
                    self.added = await self._add(parsed, start)
                    self.unwritten = self.unwritten or self.added > 0
                    lease.keyed(keyed[start:], before=before)
                prepared = await lease.session.prepare(format=self.dialect.view_format, defer_write=True)
                # a due compaction wrote the new messages (and used the condition up); else they wait for `write`
                expected = lease.store.expected
                self.written = lease.session.state.transcript_length if expected is None else expected
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
            tail = [m.message_id for m in self.lease.session.state.messages(-self.drop)]
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
        as_sent = False
        if not self.drop:  # a retry's reply is stored already
            session = lease.session
            if not self.svc.settings.service.shadow:  # in shadow mode the usage is the whole request's
                session.on_turn_end(usage)
            if reply.messages is not None:  # several choices: the client's pick comes with its next request
                lease.sync_keys()
                recorded, as_sent = self._add_reply(reply.messages)
                if reply.keyed is not None and as_sent:
                    lease.keyed(reply.keyed, before=session.state.transcript_length - len(recorded))
        self.produced += recorded
        await self.write()
        lease.sync_keys()

    def _add_reply(self, messages: list[Message]) -> tuple[list[Message], bool]:
        """Add the reply's messages: the ones added, and whether they are the reply as sent (ids aside).

        A reply the validator refuses is kept as `Session.complete` keeps it: it was paid for. A reply
        whose ids the upstream already gave earlier messages (a server that numbers its output items
        per reply) gets ids of its own: under a stored id it would be refused, or skipped as a copy.
        """
        assert self.lease is not None
        session = self.lease.session
        try:
            if len(session.state.fresh(messages)) < len(messages):
                messages = _own_ids(messages)
        except MessageError as exc:
            if exc.field == "message_id":
                messages = _own_ids(messages)
        try:
            session.add(messages)
            return messages, True
        except MessageError:
            kept = kept_messages(messages)
            session.add(kept)
            return kept, False

    async def write(self) -> None:
        """Write what the request added (its new messages, read-back rounds, the reply) to the store.

        Each append is conditional on the transcript's length this request knows the store holds
        (the first is the request's one store round trip, its new messages with the reply). When
        another writer appended meanwhile, the session is read again and what this request adds to
        the stored transcript is appended to it: the part of the client's history and of what this
        request recorded that the stored transcript does not continue with; or, for a turn that
        must be whole in the store (part of it is stored, or it answers read-back calls), every
        message of it the store does not hold (by id), after the other writer's. Otherwise the
        session is dropped from memory: the store's copy is the truth, and the client's next request
        re-sends the rest.
        """
        lease = self.lease
        assert lease is not None
        for attempt in range(_MOVED_ATTEMPTS):
            if self.written is not None:
                lease.expect(self.written)
            try:
                await lease.session.flush()
            except SessionMoved:
                if attempt == _MOVED_ATTEMPTS - 1:
                    break
                held = lease.session.state.messages()
                await self.svc.pool.reload(lease, model=self.body["model"], tools=self.tools)
                self.written = lease.session.state.transcript_length
                # by id only when the request's turn must be whole in the store: part of it is there
                # already, or it answers read-back calls (their results need their calls); a plain turn
                # that does not continue the stored transcript is not merged into it
                if not (self._append_again() or (self._bound() and self._append_missing(held))):
                    break
                continue
            finally:
                lease.expect(None)  # a flush with nothing to write leaves the condition unused
            self.unwritten = False
            self.wrote = self.wrote or lease.session.state.transcript_length > (self.written or 0)
            self.written = lease.session.state.transcript_length
            return
        lease.failed = True
        self.unwritten = False
        logger.info("session %s changed in the store during the request; read again on the next", lease.session_id)

    def _bound(self) -> bool:
        """The request's turn is tied to the session: part of it is stored, or it calls the read-back tool."""
        return self.wrote or any(call.name == READ_BACK for m in self.produced for call in m.tool_calls)

    def _append_again(self) -> bool:
        """After the session was read again: add what the request's history and what it recorded add to it."""
        lease = self.lease
        assert lease is not None
        produced = self.produced
        produced_keyed = from_messages(produced, format="openai") if produced else []
        if len(produced_keyed) != len(produced):
            return False
        lease.sync_keys()
        keyed = [*self.conversation.keyed, *produced_keyed]
        found = continuation(keyed, lease.keys)
        if found.kind != "extends":
            return False
        sent = len(self.conversation.keyed)
        if found.start > sent:
            fresh = produced[found.start - sent :]
        else:
            fresh = [*self.conversation.convert(found.start), *produced]
        return self._add_again(fresh)

    def _append_missing(self, held: Sequence[Message]) -> bool:
        """After the session was read again: add the messages this process held that the store lacks, in order."""
        assert self.lease is not None
        stored = {m.message_id for m in self.lease.session.state.messages()}
        return self._add_again([m for m in held if m.message_id not in stored])

    def _add_again(self, fresh: list[Message]) -> bool:
        lease = self.lease
        assert lease is not None
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
        self.produced += results
        await self.write()
        self.read_backs += 1
        skipped = sum(call.name != READ_BACK for call in reply.tool_calls)
        logger.info(
            "session %s: answered %d read-back call(s), %d client call(s) left to ask again",
            self.lease.session_id,
            len(results) - skipped,
            skipped,
        )
        # the session read again when another writer appended meanwhile
        prepared = await self.lease.session.prepare(format=self.dialect.view_format)
        self.view_tokens = prepared.status.used
        return self._served(prepared.messages, prepared.view)

    # --- the upstream side --------------------------------------------------------------------
    def upstream_body(self, view: list[Any] | None) -> bytes:
        if view is None or self.svc.settings.service.shadow:
            return self.raw
        extra = [self.dialect.tool_schema(READ_CONTEXT_TOOL)] if self.offered else []
        memo = self.lease.memo if self.lease is not None else None
        return jsonio.dumps(self.dialect.render(self.body, view, extra_tools=extra, memo=memo))

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


def _own_ids(messages: list[Message]) -> list[Message]:
    """``messages`` under fresh ids (the ids a reply came with are the upstream's, not the transcript's)."""
    return [dataclasses.replace(m, message_id=new_message_id()) for m in messages]


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

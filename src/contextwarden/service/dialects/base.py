"""The contract every proxied API dialect implements, and the pieces the dialects share.

A dialect turns one client request into what the session manages (the conversation as
contextwarden messages, the request's tools and model) and back (the view rendered into the
request's own shape, every other field as the client sent it); it reads the upstream's reply,
whole or streamed, into the messages the session records; and it answers errors in the shape the
client's SDK understands. The flow around it (sessions, compaction, retries, the read-back tool)
is the same for every dialect (`contextwarden.service.proxy`).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.responses import JSONResponse, Response

from ...messages import Message, ToolCall
from ...usage import RequestUsage
from ..errors import ServiceError
from ..intake import check_texts, json_object

__all__ = ["Conversation", "Dialect", "Reply", "StreamAssembler", "parse_object"]


@dataclass(kw_only=True)
class Conversation:
    """A request's conversation, as the session matches and stores it."""

    keyed: Sequence[Mapping[str, Any]]
    """One OpenAI chat dict per message: what history matching compares (`contextwarden.service.history`)."""
    convert: Callable[[int], list[Message]]
    """The messages from an index on, as contextwarden messages (one per entry of ``keyed``)."""


@dataclass(kw_only=True)
class Reply:
    """What the upstream answered, as the session records it."""

    messages: list[Message] | None
    """The reply's messages; None when it is not recorded (several choices: the client's pick comes next)."""
    usage: RequestUsage = field(default_factory=RequestUsage.unreported)
    """The token usage the upstream reported."""
    keyed: list[dict[str, Any]] | None = None
    """The messages as OpenAI chat dicts when the dialect has them at hand (saves rendering them to key them)."""

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls of the reply (empty when it is not recorded)."""
        return [call for m in self.messages or () for call in m.tool_calls]


class StreamAssembler(ABC):
    """Folds a dialect's stream events into the reply."""

    error: Any = None
    """The error object the upstream sent inside the stream, if any."""

    def feed(self, data: str) -> None:
        """Take one event's data (the JSON of the event, or an end marker)."""
        event = json_data(data)
        if event is not None:
            self.take(event)

    def take(self, event: Mapping[str, Any]) -> None:
        """Take one event (a JSON object); the dialects whose events are JSON objects implement it."""
        raise NotImplementedError(f"{type(self).__name__} reads its events in `feed`")

    @property
    @abstractmethod
    def done(self) -> bool:
        """The event just fed ends the reply (the session records it before the client sees that event)."""

    @property
    def complete(self) -> bool:
        """The reply is whole (its end marker or a finish reason arrived)."""
        return self.done

    @abstractmethod
    def reply(self) -> Reply:
        """The assembled reply."""


def parse_object(raw: bytes, what: str) -> dict[str, Any]:
    """The request body as a JSON object.

    Raises:
        ServiceError: 400 when it is not JSON or not an object.
    """
    return json_object(raw, api=what)


def require_model_and_stream(body: Mapping[str, Any]) -> None:
    """Check the ``model`` and ``stream`` fields every dialect has.

    Raises:
        ServiceError: 400 naming the field.
    """
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise ServiceError(400, "`model` must be a non-empty string.", param="model", code="invalid_type")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise ServiceError(400, "`stream` must be a boolean.", param="stream", code="invalid_type")
    check_texts(body, ("model",))


def require_messages(body: Mapping[str, Any]) -> None:
    """Check that ``messages`` is a non-empty list of objects.

    Raises:
        ServiceError: 400 naming the field.
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ServiceError(
            400, "`messages` must be a non-empty list of message objects.", param="messages", code="invalid_type"
        )


def require_tool_list(body: Mapping[str, Any]) -> None:
    """Check that ``tools``, when present, is a list of objects.

    Raises:
        ServiceError: 400 naming the field.
    """
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise ServiceError(400, "`tools` must be a list of tool objects.", param="tools", code="invalid_type")


def as_sent(rendered: list[Any], sent: Any) -> list[Any]:
    """``rendered`` with each item that equals the client's own at the same place, from either end,
    replaced by the client's object: what did not change goes upstream as the client wrote it (its
    keys in its order), not as a rendering of it."""
    if not isinstance(sent, list):
        return rendered
    out = list(rendered)
    head = 0
    limit = min(len(out), len(sent))
    while head < limit and out[head] == sent[head]:
        out[head] = sent[head]
        head += 1
    tail = 1
    while tail <= limit - head and out[-tail] == sent[-tail]:
        out[-tail] = sent[-tail]
        tail += 1
    return out


def json_data(data: str) -> Mapping[str, Any] | None:
    """An event's data as a JSON object (None for anything else)."""
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, Mapping) else None


class Dialect(ABC):
    """One API the proxy speaks: the request's shape, the reply's, the stream's and the errors'."""

    name: str
    """The dialect's name in logs and metrics (``chat.completions``, ``messages``, ``responses``)."""
    route: str
    """The route the client calls (``/v1/messages``)."""
    upstream_path: str
    """The path under the upstream's API root the request goes to (``messages``)."""
    view_format: Literal["openai", "internal"] = "internal"
    """The format the session prepares the view in (``openai``: chat dicts; ``internal``: messages)."""
    forwarded_headers: tuple[str, ...] = ()
    """Client headers sent on to the upstream (API version and feature flags)."""
    key_header: Literal["authorization", "x-api-key"] = "authorization"
    """Where the upstream expects the service's key."""

    @abstractmethod
    def parse(self, raw: bytes) -> dict[str, Any]:
        """The request body, checked.

        Raises:
            ServiceError: 400 naming what is wrong.
        """

    @abstractmethod
    def conversation(self, body: Mapping[str, Any], memo: dict[str, Any] | None = None) -> Conversation:
        """The request's conversation (system prompt first when the request carries one).

        ``memo`` is the session's own dict, kept between its requests: a dialect that converts the
        whole history keeps the conversion there, and converts only what is new the next time.

        Raises:
            ServiceError: 400 for a message the adapter cannot read.
        """

    def converting(self, body: Mapping[str, Any], memo: dict[str, Any], *, step: int) -> Iterator[None]:
        """Convert a long history ahead into ``memo``, ``step`` messages at a time, yielding between steps.

        The proxy lets other requests run at each yield, so a client joining with hundreds of
        messages does not hold the event loop for the whole conversion; `conversation` then finds
        them converted. A dialect that keeps no conversion in the memo yields nothing (the default).
        A message the dialect cannot read ends the steps: `conversation` reports it.
        """
        return iter(())

    def tools(self, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The request's tool schemas (counted in the budget)."""
        tools = body.get("tools")
        return list(tools) if isinstance(tools, list) else []

    def refuse(self, body: Mapping[str, Any]) -> ServiceError | None:
        """A reason the proxy cannot manage this request (sent on unchanged or refused); None when it can."""
        return None

    @abstractmethod
    def render(
        self,
        body: Mapping[str, Any],
        view: list[Any],
        *,
        extra_tools: Sequence[Mapping[str, Any]] = (),
        memo: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The upstream request: ``body`` with the view in place of its conversation (and ``extra_tools`` added).

        ``view`` is in `view_format`. The request's other fields (system prompt, tools, model,
        options) are the client's own, unchanged. ``memo`` is the session's own dict (as for
        `conversation`): a dialect that renders the view itself keeps there what the next view reuses.
        """

    @abstractmethod
    def tool_schema(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """An OpenAI chat tool schema (``{"type": "function", "function": {...}}``) in this dialect's shape."""

    @abstractmethod
    def reply(self, body: Mapping[str, Any], data: Any) -> Reply:
        """The reply to ``body`` in a whole (not streamed) upstream body ``data``.

        Raises:
            ValueError: the body is not a reply of this dialect.
        """

    @abstractmethod
    def assembler(self, body: Mapping[str, Any]) -> StreamAssembler:
        """A fresh assembler for the streamed reply to ``body``."""

    @abstractmethod
    def error_body(self, status: int, message: str, *, code: str | None, param: str | None) -> dict[str, Any]:
        """The error object of this dialect."""

    def error_response(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """An error reply in this dialect's shape."""
        return JSONResponse(
            self.error_body(status, message, code=code, param=param), status_code=status, headers=dict(headers or {})
        )

    def error_event(
        self, status: int, message: str, *, code: str | None, after: StreamAssembler | None = None
    ) -> bytes:
        """An error sent inside a stream that already started (``after``: the events relayed before it)."""
        body = self.error_body(status, message, code=code, param=None)
        return f"data: {json.dumps(body)}\n\n".encode()

    @abstractmethod
    def too_long(self, message: str) -> Response:
        """The provider's own "prompt is too long" error: the request's protected part cannot fit."""

    def session_hint(self, body: Mapping[str, Any]) -> str | None:
        """A session id the body itself carries (OpenAI's ``user``, Anthropic's ``metadata.user_id``)."""
        return None

"""OpenAI Responses (``POST /v1/responses``): input items, reasoning with encrypted content, hosted tools.

``instructions`` is the system prompt (kept in the request as the client sent it); ``input`` (a
string or items) is the conversation. Messages, function calls and their outputs, and reasoning
items go through the adapter (`contextwarden.adapters.openai_responses`), which keeps a reasoning
item's ``encrypted_content`` and every field it has no use for unchanged. A model turn that holds
items of other kinds (custom tool calls, hosted tool calls such as ``web_search_call`` and
``computer_call``, shell calls) is one assistant message whose calls the client answers are tool
calls, paired with the outputs that answer them (`contextwarden.service.dialects.responses_items`):
compaction never splits a call from its output or a turn from its reasoning, and the items go back
exactly as received. Any other item is kept whole.

``previous_response_id`` asks the upstream to prepend a conversation the proxy never saw, so the
proxy cannot manage it: such a request is refused with a 400 that says to send the whole input
(``store: false``), which is what Codex does.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from starlette.responses import Response

from ...adapters import openai_chat, openai_responses as adapter
from ...exceptions import MessageError
from ...messages import Message, TextPart
from ...usage import RequestUsage
from ..errors import ServiceError, error_body
from .base import (
    Conversation,
    Dialect,
    Reply,
    StreamAssembler,
    as_sent,
    parse_object,
    require_model_and_stream,
    require_tool_list,
)
from .openai_chat import invalid_message
from .responses_items import (
    OUTPUT,
    calls_of,
    is_note,
    model_side as _model_side,
    output_message,
    outputs_by_call,
    render_output,
    render_turn,
    turn_message,
)

__all__ = ["OpenAIResponses", "to_messages", "usage_of"]

_ADAPTED = frozenset({"message", "function_call", "function_call_output", "reasoning"})
"""Item types the adapter reads; any other item is kept whole."""
_ITEM = "responses_item"
"""``Message.extra`` key of an item kept whole."""
_INSTRUCTIONS = "responses_instructions"
"""``Message.extra`` key marking the system message made of ``instructions``."""
_END_EVENTS = frozenset({"response.completed", "response.failed", "response.incomplete"})
_LIFECYCLE_EVENTS = frozenset({"response.created", "response.queued", "response.in_progress"})
_RENDERED = "responses.rendered"
"""Memo key of the items the last view's messages rendered to (`_render`)."""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_of(data: Any) -> RequestUsage:
    """`RequestUsage` of a Responses ``usage`` object."""
    if not isinstance(data, Mapping) or not isinstance(data.get("input_tokens"), int):
        return RequestUsage.unreported()
    details = data.get("input_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    return RequestUsage(
        input_tokens=_int(data["input_tokens"]), output_tokens=_int(data.get("output_tokens")), cache_read_tokens=cached
    )


def _adapted(item: Any) -> bool:
    if not isinstance(item, Mapping):
        return True  # the adapter names what is wrong with it
    kind = item.get("type")
    return kind is None or kind in _ADAPTED


def _kept(item: Mapping[str, Any]) -> Message:
    """An item the adapter does not read and the proxy does not pair, as a message that renders back to it."""
    # what the model produced sits on the assistant's side; what answers it (outputs) on the user's
    role: Literal["user", "assistant"] = "assistant" if _model_side(item) else "user"
    text = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
    return Message(role=role, parts=(TextPart(text=text),), extra={_ITEM: dict(item)})


def _adapt(items: Sequence[Any], offset: int = 0) -> list[Message]:
    try:
        return adapter.to_messages(items)
    except MessageError as exc:
        exc.index = offset + (exc.index or 0)
        raise


def to_messages(items: Sequence[Any]) -> list[Message]:
    """Input or output items as messages: adapted runs, model turns holding other items, outputs paired
    with their calls, and each other item kept whole.

    Raises:
        MessageError: an item the adapter cannot read (its index is the item's in ``items``).
    """
    out: list[Message] = []
    names: dict[str, str] = {}
    start = index = 0
    while index < len(items):
        item = items[index]
        if isinstance(item, Mapping) and _model_side(item):
            end = index
            while end < len(items) and isinstance(items[end], Mapping) and _model_side(items[end]):
                end += 1
            if not all(_adapted(i) for i in items[index:end]):
                out.extend(_adapt(items[start:index], start) if start < index else ())
                turn = turn_message(items[index:end], partial(_adapt, offset=index))
                names.update((call.call_id, call.name) for call in turn.tool_calls)
                out.append(turn)
                start = end
            index = end
            continue
        if not _adapted(item):
            out.extend(_adapt(items[start:index], start) if start < index else ())
            out.append(output_message(item, names) or _kept(item))
            start = index + 1
        index += 1
    out.extend(_adapt(items[start:], start) if start < len(items) else ())
    return out


Rendered = dict[int, tuple[Message, list[Any]]]
"""The items of each message of the last view rendered, by the message's identity (see `_render`)."""


def _render(messages: Sequence[Message], sent: Sequence[Any] = (), cache: Rendered | None = None) -> list[Any]:
    """The view as input items (``sent``: the request's own input, whose outputs stand-ins are shaped after).

    ``cache`` holds the items of each message of the last view rendered (messages are immutable: the
    same object renders the same items), so the messages a view shares with the last one are not
    rendered again; it is left holding this view's. The items are shared between renderings: the
    caller writes them out and never changes them.
    """
    out: list[Any] = []
    # what shortened screenshots were: sent after the run of outputs they are in, never between two outputs
    notes: list[Any] = []
    calls = {call_id: kind for m in messages if m.role == "assistant" for call_id, kind in calls_of(m).items()}
    originals = outputs_by_call(sent) if calls else {}
    fresh: Rendered = {}
    for message in messages:
        # a tool result the proxy does not pair renders alone unless its call is a turn's (then the
        # request's own output item shapes it): reused only while that stays so
        alone = (
            message.role != "tool"
            or isinstance(message.extra.get(OUTPUT), Mapping)
            or (message.tool_call_id not in calls)
        )
        hit = cache.get(id(message)) if cache is not None and alone else None
        items = hit[1] if hit is not None and hit[0] is message else _render_one(message, calls, originals)
        if alone:
            fresh[id(message)] = (message, items)
        if message.role == "tool" and len(items) > 1:  # a shortened screenshot and its stand-in
            notes += [i for i in items if is_note(i)]
            out.extend(i for i in items if not is_note(i))
            continue
        if notes and message.role != "tool":
            out.extend(notes)
            notes = []
        out.extend(items)
    out.extend(notes)
    if cache is not None:
        cache.clear()
        cache.update(fresh)
    return out


def _render_one(message: Message, calls: Mapping[str, str], originals: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    """The input items of one message of the view."""
    if message.role == "assistant":
        own = render_turn(message, lambda m: adapter.from_messages([m]))
        if own is not None:
            return own
    if message.role == "tool":
        output = render_output(message, calls, originals)
        if output is not None:
            return output
    item = message.extra.get(_ITEM)
    if isinstance(item, Mapping):
        return [dict(item)]
    return adapter.from_messages([message])


@dataclass(frozen=True, kw_only=True)
class _Piece:
    """Items up to one that ends a model turn (a user message, a tool output), converted."""

    end: int
    """Index of the piece's last item."""
    messages: list[Message]
    keyed: list[dict[str, Any]]


@dataclass(frozen=True, kw_only=True)
class _Converted:
    items: list[Any]
    pieces: list[_Piece]


def _convert(items: list[Any], cached: _Converted | None) -> _Converted:
    """Convert the input items, reusing the pieces of the last request whose items are the same.

    Agents re-send the whole conversation, so the items up to the newest equal the last request's
    (compared as JSON values, in C); only the pieces after the last same one are converted.
    """
    pieces: list[_Piece] = []
    if cached is not None:
        same, limit = 0, min(len(cached.items), len(items))
        while same < limit and cached.items[same] == items[same]:
            same += 1
        # a piece that ends on a model item (the end of the last input) may go on in this request
        pieces = [p for p in cached.pieces if p.end < same and not _model_side(cached.items[p.end])]
    start = pieces[-1].end + 1 if pieces else 0
    begin = start
    for index in range(start, len(items)):
        item = items[index]
        if index + 1 < len(items) and isinstance(item, Mapping) and _model_side(item):
            continue
        try:
            messages = to_messages(items[begin : index + 1])
        except MessageError as exc:
            exc.index = begin + (exc.index or 0)
            raise
        pieces.append(_Piece(end=index, messages=messages, keyed=openai_chat.from_messages(messages)))
        begin = index + 1
    return _Converted(items=list(items), pieces=pieces)


class _ResponsesAssembler(StreamAssembler):
    """Takes the reply from ``response.completed`` (or the ``output_item.done`` items before it)."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.final: Mapping[str, Any] | None = None
        self._done = False
        self.sequence: int | None = None
        """The ``sequence_number`` of the last event that carried one."""
        self.response: Mapping[str, Any] | None = None
        """The response object of the last lifecycle event relayed (``response.created``, ``.in_progress``)."""

    def take(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        number = event.get("sequence_number")
        if isinstance(number, int) and not isinstance(number, bool):
            self.sequence = number
        self._done = kind in _END_EVENTS
        if kind == "error" or kind == "response.failed":
            self.error = event
        elif kind == "response.output_item.done" and isinstance(event.get("item"), Mapping):
            self.items.append(event["item"])
        elif kind in _END_EVENTS and isinstance(event.get("response"), Mapping):
            self.final = event["response"]
        elif kind in _LIFECYCLE_EVENTS and isinstance(event.get("response"), Mapping):
            self.response = event["response"]

    @property
    def done(self) -> bool:
        return self._done

    def reply(self) -> Reply:
        final = self.final or {}
        output = final.get("output")
        items = output if isinstance(output, list) and output else self.items
        return Reply(messages=to_messages(items), usage=usage_of(final.get("usage")))


class OpenAIResponses(Dialect):
    """OpenAI's Responses API."""

    name = "responses"
    route = "/v1/responses"
    upstream_path = "responses"

    def parse(self, raw: bytes) -> dict[str, Any]:
        body = parse_object(raw, "a Responses API request")
        value = body.get("input")
        if not (isinstance(value, str) or (isinstance(value, list) and all(isinstance(i, dict) for i in value))):
            raise ServiceError(400, "`input` must be a string or a list of input items.", param="input")
        instructions = body.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise ServiceError(400, "`instructions` must be a string.", param="instructions", code="invalid_type")
        require_model_and_stream(body)
        require_tool_list(body)
        return body

    def refuse(self, body: Mapping[str, Any]) -> ServiceError | None:
        if body.get("previous_response_id"):
            return ServiceError(
                400,
                "`previous_response_id` continues a conversation the upstream stored, which this proxy cannot manage; "
                "send the whole conversation in `input` with `store: false` (Codex does this by default; with the "
                "OpenAI SDK, pass the earlier output items back in `input` instead of `previous_response_id`).",
                param="previous_response_id",
                code="unsupported_parameter",
            )
        return None

    def conversation(self, body: Mapping[str, Any], memo: dict[str, Any] | None = None) -> Conversation:
        value = body["input"]
        items = [{"role": "user", "content": value}] if isinstance(value, str) else value
        cached: _Converted | None = memo.get(self.name) if memo is not None else None
        try:
            converted = _convert(items, cached)
        except MessageError as exc:
            raise invalid_message("input", 0, exc) from None
        if memo is not None:
            memo[self.name] = converted
        messages = [m for piece in converted.pieces for m in piece.messages]
        keyed = [k for piece in converted.pieces for k in piece.keyed]
        instructions = body.get("instructions")
        if isinstance(instructions, str) and instructions:
            system = Message.system(instructions, extra={_INSTRUCTIONS: True})
            messages.insert(0, system)
            keyed.insert(0, {"role": "system", "content": instructions})
        return Conversation(keyed=keyed, convert=lambda start: messages[start:])

    def converting(self, body: Mapping[str, Any], memo: dict[str, Any], *, step: int) -> Iterator[None]:
        items = body["input"]
        if isinstance(items, str) or memo.get(self.name) is not None:
            return  # a continuation: `conversation` converts only what is new
        for end in range(step, len(items), step):
            try:
                memo[self.name] = _convert(items[:end], memo.get(self.name))
            except MessageError:
                return
            yield

    def render(
        self,
        body: Mapping[str, Any],
        view: list[Any],
        *,
        extra_tools: Sequence[Mapping[str, Any]] = (),
        memo: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        out = dict(body)
        # `instructions` stays the client's own field; its message in the view is not sent twice
        sent = body.get("input")
        cache: Rendered | None = None
        if memo is not None:
            cache = memo.setdefault(_RENDERED, {})
        messages = [m for m in view if not m.extra.get(_INSTRUCTIONS)]
        items = _render(messages, sent if isinstance(sent, list) else (), cache)
        out["input"] = as_sent(items, sent)
        if extra_tools:
            out["tools"] = [*(body.get("tools") or ()), *extra_tools]
        return out

    def tool_schema(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        return {"type": "function", **spec["function"]}

    def reply(self, body: Mapping[str, Any], data: Any) -> Reply:
        if not isinstance(data, Mapping) or not isinstance(data.get("output"), list):
            raise ValueError("not a Responses API reply")
        return Reply(messages=to_messages(data["output"]), usage=usage_of(data.get("usage")))

    def assembler(self, body: Mapping[str, Any]) -> StreamAssembler:
        return _ResponsesAssembler()

    def error_body(self, status: int, message: str, *, code: str | None, param: str | None) -> dict[str, Any]:
        return error_body(status, message, code=code, param=param)

    def error_event(
        self, status: int, message: str, *, code: str | None, after: StreamAssembler | None = None
    ) -> bytes:
        """A ``response.failed`` event: the response the stream announced, with status ``failed`` and the error.

        Every Responses event carries a sequence number, one past the event before it. The failed
        response keeps the id of the one the stream announced (the SDK's stream reader refuses a
        lifecycle event whose response changed identity) and the output items finished before the
        failure. The error is also the event's own ``error`` member: the SDKs raise on an event that
        carries one, so iterating the stream raises instead of ending quietly.
        """
        assembler = after if isinstance(after, _ResponsesAssembler) else None
        last = assembler.sequence if assembler is not None else None
        error = {"code": code or "server_error", "message": message}
        response: dict[str, Any] = dict(assembler.response) if assembler and assembler.response else {}
        if not response:
            response = {"id": f"resp_{uuid.uuid4().hex}", "object": "response", "created_at": int(time.time())}
        response.update(
            status="failed",
            error=error,
            incomplete_details=None,
            output=list(assembler.items) if assembler is not None else [],
        )
        body = {
            "type": "response.failed",
            "sequence_number": 0 if last is None else last + 1,
            "response": response,
            "error": {"type": "server_error" if status >= 500 else "invalid_request_error", **error, "param": None},
        }
        return f"event: response.failed\ndata: {json.dumps(body)}\n\n".encode()

    def too_long(self, message: str) -> Response:
        return self.error_response(400, message, code="context_length_exceeded", param="input")

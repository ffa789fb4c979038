"""Anthropic Messages (``POST /v1/messages``): system blocks, tool_use/tool_result, signed thinking.

The conversation is ``system`` (a string or text blocks) followed by ``messages``; the adapter
(`contextwarden.adapters.anthropic`) keeps every block and key it has no field for, so thinking and
redacted thinking go back byte for byte (their signatures stay valid) and ``cache_control`` markers
stay on the content they were placed on. The rendered request keeps the client's ``system``,
``tools`` and options; only ``messages`` is the view. After a compaction the proxy marks the end of
its context block as a cache breakpoint (and the end of the system prompt when the client marked
nothing there), within Anthropic's limit of four breakpoints per request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from ...adapters import anthropic as adapter, openai_chat
from ...exceptions import MessageError
from ...messages import Message
from ...usage import RequestUsage
from ..errors import ServiceError
from .base import (
    Conversation,
    Dialect,
    Reply,
    StreamAssembler,
    as_sent,
    parse_object,
    require_messages,
    require_model_and_stream,
    require_tool_list,
)
from .openai_chat import invalid_message

__all__ = ["AnthropicMessages", "usage_of"]

MAX_BREAKPOINTS = 4
"""Cache breakpoints Anthropic accepts in one request."""
_RENDERED = "messages.rendered"
"""Memo key of what the last view's messages rendered to (`contextwarden.adapters.anthropic.from_messages_inline`)."""

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_of(data: Any) -> RequestUsage:
    """`RequestUsage` of an Anthropic ``usage`` object (input counts the cached and cache-written tokens)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("input_tokens"), int):
        return RequestUsage.unreported()
    read, written = _int(data.get("cache_read_input_tokens")), _int(data.get("cache_creation_input_tokens"))
    return RequestUsage(
        input_tokens=_int(data.get("input_tokens")) + read + written,
        output_tokens=_int(data.get("output_tokens")),
        cache_read_tokens=read,
        cache_write_tokens=written,
    )


def _markers(value: Any) -> int:
    """``cache_control`` markers in a JSON value."""
    if isinstance(value, Mapping):
        return ("cache_control" in value) + sum(_markers(v) for k, v in value.items() if k != "cache_control")
    if isinstance(value, list):
        return sum(_markers(v) for v in value)
    return 0


def _mark_last_block(content: Any) -> Any:
    """``content`` (a string or blocks) with a cache breakpoint on its last block."""
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": content}] if isinstance(content, str) else [dict(b) for b in content]
    )
    if blocks and isinstance(blocks[-1], dict):
        blocks[-1]["cache_control"] = {"type": "ephemeral"}
    return blocks


class _MessagesAssembler(StreamAssembler):
    """Folds ``message_start`` ... ``message_stop`` into the assistant message (blocks in their order)."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, list[str]] = {}
        self.start_usage: Mapping[str, Any] = {}
        self.output_tokens: int | None = None
        self.stop_reason: str | None = None
        self._done = False

    def take(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        self._done = kind == "message_stop"
        if kind == "error":
            self.error = event
        elif kind == "message_start" and isinstance(event.get("message"), Mapping):
            usage = event["message"].get("usage")
            self.start_usage = usage if isinstance(usage, Mapping) else {}
        elif kind == "content_block_start" and isinstance(event.get("content_block"), Mapping):
            self.blocks[_int(event.get("index"))] = dict(event["content_block"])
        elif kind == "content_block_delta" and isinstance(event.get("delta"), Mapping):
            self._delta(_int(event.get("index")), event["delta"])
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, Mapping) and isinstance(delta.get("stop_reason"), str):
                self.stop_reason = delta["stop_reason"]
            usage = event.get("usage")
            if isinstance(usage, Mapping) and isinstance(usage.get("output_tokens"), int):
                self.output_tokens = usage["output_tokens"]

    def _delta(self, index: int, delta: Mapping[str, Any]) -> None:
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + str(delta.get("text", ""))
        elif kind == "input_json_delta":
            self.json.setdefault(index, []).append(str(delta.get("partial_json", "")))
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + str(delta.get("signature", ""))
        elif kind == "citations_delta" and isinstance(delta.get("citation"), Mapping):
            block.setdefault("citations", []).append(dict(delta["citation"]))

    @property
    def done(self) -> bool:
        return self._done

    @property
    def complete(self) -> bool:
        return self._done or self.stop_reason is not None

    def reply(self) -> Reply:
        content: list[dict[str, Any]] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if index in self.json:
                text = "".join(self.json[index])
                try:
                    block["input"] = json.loads(text) if text.strip() else {}
                except ValueError:
                    block["input"] = {}
            content.append(block)
        usage = dict(self.start_usage)
        if self.output_tokens is not None:
            usage["output_tokens"] = self.output_tokens
        messages = adapter.to_messages([{"role": "assistant", "content": content}])
        return Reply(messages=messages, usage=usage_of(usage))


class AnthropicMessages(Dialect):
    """Anthropic's Messages API."""

    name = "messages"
    route = "/v1/messages"
    upstream_path = "messages"
    forwarded_headers = ("anthropic-version", "anthropic-beta")
    key_header = "x-api-key"

    def parse(self, raw: bytes) -> dict[str, Any]:
        body = parse_object(raw, "a Messages API request")
        require_messages(body)
        system = body.get("system")
        if system is not None and not (
            isinstance(system, str) or (isinstance(system, list) and all(isinstance(b, dict) for b in system))
        ):
            raise ServiceError(400, "`system` must be a string or a list of text blocks.", param="system")
        require_model_and_stream(body)
        require_tool_list(body)
        return body

    def conversation(self, body: Mapping[str, Any], memo: dict[str, Any] | None = None) -> Conversation:
        system, sources = body.get("system"), body["messages"]
        cached: _Converted | None = memo.get(self.name) if memo is not None else None
        try:
            converted = _convert(system, sources, cached)
        except MessageError as exc:
            raise invalid_message("messages", 0, exc) from None
        if memo is not None:
            memo[self.name] = converted
        messages = [m for chunk in converted.chunks for m in chunk]
        keyed = [k for chunk in converted.keyed for k in chunk]
        return Conversation(keyed=keyed, convert=lambda start: messages[start:])

    def converting(self, body: Mapping[str, Any], memo: dict[str, Any], *, step: int) -> Iterator[None]:
        system, sources = body.get("system"), body["messages"]
        if memo.get(self.name) is not None:
            return  # a continuation: `conversation` converts only what is new
        for end in range(step, len(sources), step):
            try:
                memo[self.name] = _convert(system, sources[:end], memo.get(self.name))
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
        cache: adapter.Rendered | None = None
        if memo is not None:
            cache = memo.setdefault(_RENDERED, {})
        rendered = adapter.from_messages_inline(view, cache=cache)
        if "system" in body:
            # the leading system messages are the client's `system`; later ones stay where the client put them
            lead = 0
            while lead < len(rendered) and rendered[lead].get("role") == "system":
                lead += 1
            if lead:
                contents = [m["content"] for m in rendered[:lead]]
                out["system"] = contents[0] if lead == 1 else [b for c in contents for b in _as_blocks(c)]
                rendered = rendered[lead:]
        if extra_tools:
            out["tools"] = [*(body.get("tools") or ()), *extra_tools]
        context = [i for i, m in enumerate(view) if m.extra.get("contextwarden") == "context"]
        if context:
            self._breakpoints(out, rendered, view, context[-1])
        out["messages"] = as_sent(rendered, body.get("messages"))
        return out

    def _breakpoints(self, out: dict[str, Any], rendered: list[dict[str, Any]], view: list[Message], at: int) -> None:
        """Cache breakpoints after a compaction: the context block's end, and the system prompt's end
        when the client marked nothing in its tools or system (never past Anthropic's four)."""
        used = _markers(out.get("tools")) + _markers(out.get("system")) + _markers(rendered)
        block_text = view[at].text
        for index, message in enumerate(rendered):
            content = message.get("content")
            if message.get("role") == "user" and (
                content == block_text
                or (
                    isinstance(content, list)
                    and any(b.get("text") == block_text for b in content if isinstance(b, dict))
                )
            ):
                if used < MAX_BREAKPOINTS and not _markers(content):
                    # a new dict: the rendered ones may be the adapter's cached renderings
                    rendered[index] = {**message, "content": _mark_last_block(content)}
                    used += 1
                break
        system = out.get("system")
        if system and used < MAX_BREAKPOINTS and not _markers(out.get("tools")) and not _markers(system):
            out["system"] = _mark_last_block(system)

    def tool_schema(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        function = spec["function"]
        return {
            "name": function["name"],
            "description": function["description"],
            "input_schema": function["parameters"],
        }

    def reply(self, body: Mapping[str, Any], data: Any) -> Reply:
        if not isinstance(data, Mapping) or not isinstance(data.get("content"), list):
            raise ValueError("not a Messages API reply")
        messages = adapter.to_messages([{"role": "assistant", "content": data["content"]}])
        return Reply(messages=messages, usage=usage_of(data.get("usage")))

    def assembler(self, body: Mapping[str, Any]) -> StreamAssembler:
        return _MessagesAssembler()

    def error_body(self, status: int, message: str, *, code: str | None, param: str | None) -> dict[str, Any]:
        kind = _ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def error_event(
        self, status: int, message: str, *, code: str | None, after: StreamAssembler | None = None
    ) -> bytes:
        body = self.error_body(status, message, code=code, param=None)
        return f"event: error\ndata: {json.dumps(body)}\n\n".encode()

    def too_long(self, message: str) -> Response:
        return self.error_response(400, f"prompt is too long: {message}")

    def session_hint(self, body: Mapping[str, Any]) -> str | None:
        """The session id Claude Code puts in ``metadata.user_id`` (a JSON string holding ``session_id``)."""
        metadata = body.get("metadata")
        user = metadata.get("user_id") if isinstance(metadata, Mapping) else None
        if not isinstance(user, str) or not user.strip():
            return None
        if user.lstrip().startswith("{"):
            try:
                parsed = json.loads(user)
            except ValueError:
                return None
            found = parsed.get("session_id") if isinstance(parsed, Mapping) else None
            return found.strip() if isinstance(found, str) and found.strip() else None
        # older clients: "user_<hash>_account_<uuid>_session_<uuid>"
        _, marker, rest = user.partition("_session_")
        return rest.strip() or None if marker else None


@dataclass(frozen=True, kw_only=True)
class _Converted:
    """A request's history converted, one chunk per source (the system prompt first), kept for the next request."""

    system: Any
    sources: list[Any]
    chunks: list[list[Message]]
    keyed: list[list[dict[str, Any]]]


def _convert(system: Any, sources: list[Any], cached: _Converted | None) -> _Converted:
    """Convert the history, reusing the chunks of the sources the last request had the same.

    Agents re-send the whole conversation, so all but the newest messages equal the last request's
    (compared as JSON values, in C); only the rest is converted, each message in the context of the
    one before it (a tool result takes its tool's name, and its grouping, from it).
    """
    chunks: list[list[Message]] = []
    keyed: list[list[dict[str, Any]]] = []
    reused = 0
    if cached is not None and cached.system == system:
        limit = min(len(cached.sources), len(sources))
        while reused < limit and cached.sources[reused] == sources[reused]:
            reused += 1
        chunks, keyed = cached.chunks[: reused + 1], cached.keyed[: reused + 1]
    else:
        head = adapter.to_messages([], system=system) if system is not None else []
        chunks, keyed = [head], [openai_chat.from_messages(head)]
    for index in range(reused, len(sources)):
        previous = next((chunk[-1] for chunk in reversed(chunks) if chunk), None)
        context = [] if previous is None else [previous]
        try:
            chunk = adapter.to_messages([*context, sources[index]])[len(context) :]
        except MessageError as exc:
            exc.index = index
            raise
        chunks.append(chunk)
        keyed.append(openai_chat.from_messages(chunk))
    return _Converted(system=system, sources=list(sources), chunks=chunks, keyed=keyed)


def _as_blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)

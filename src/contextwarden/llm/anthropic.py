"""Anthropic Messages API client on httpx: `AnthropicModel` and `AsyncAnthropicModel`.

Speaks ``POST {base_url}/v1/messages`` with ``x-api-key`` and ``anthropic-version`` headers.
System and developer messages go to the top-level ``system`` field (in order); tool results
become ``tool_result`` blocks of a user turn; thinking blocks (with their signatures) are sent
back as Anthropic requires when extended thinking is on. Needs the ``llm`` extra.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Generic

import httpx

from .. import _json
from ..exceptions import UpstreamError
from ..messages import ImagePart, Message, Part, TextPart, ThinkingPart, ToolCall
from ..usage import RequestUsage
from ._http import (
    AsyncLifecycle,
    ClientT,
    HTTPModelBase,
    SSEEvent,
    SyncLifecycle,
    base_headers,
    decode_reply,
    incomplete_stream,
    iter_sse_async,
    iter_sse_sync,
    json_body,
    send_async,
    send_sync,
)
from ._openai_format import new_call_id, tool_parts
from ._shapes import ReplyReader
from .base import (
    ANTHROPIC_BASE_URL,
    FinishReason,
    ModelResponse,
    ResponseDone,
    RetryPolicy,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolSchema,
)
from .errors import classify_error

__all__ = ["ANTHROPIC_VERSION", "AnthropicModel", "AsyncAnthropicModel"]

ANTHROPIC_VERSION = "2023-06-01"
"""The API version header every request carries."""

DEFAULT_MAX_TOKENS = 4096
"""Anthropic requires a reply limit on every request; this one is used when none is given."""

_FINISH: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def parse_usage(data: Mapping[str, Any] | None) -> RequestUsage:
    """`RequestUsage` from an Anthropic ``usage`` object; input counts cache reads and writes.

    Without ``input_tokens`` and ``output_tokens`` the usage is unreported (``reported=False``).
    """
    if not isinstance(data, Mapping) or not any(
        isinstance(data.get(key), int) and not isinstance(data.get(key), bool)
        for key in ("input_tokens", "output_tokens")
    ):
        return RequestUsage.unreported()
    cache_read = _int(data.get("cache_read_input_tokens"))
    cache_write = _int(data.get("cache_creation_input_tokens"))
    return RequestUsage(
        # Anthropic's input_tokens excludes the cached part; the library's includes it.
        input_tokens=_int(data.get("input_tokens")) + cache_read + cache_write,
        output_tokens=_int(data.get("output_tokens")),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


_API = "Anthropic Messages"


def _image_block(part: ImagePart) -> dict[str, Any]:
    if part.url.startswith("data:"):
        header, _, data = part.url.partition(",")
        media_type = header[5:].split(";")[0] or part.media_type or "image/png"
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": part.url}}


def _content_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            # Anthropic rejects empty text blocks.
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            blocks.append(_image_block(part))
        elif isinstance(part, ThinkingPart):
            if part.redacted:
                blocks.append({"type": "redacted_thinking", "data": part.text})
            elif part.signature is not None:
                # Thinking without Anthropic's signature (another provider's) would be rejected.
                blocks.append({"type": "thinking", "thinking": part.text, "signature": part.signature})
        else:
            blocks.append({"type": "tool_use", "id": part.call_id, "name": part.name, "input": part.parsed_arguments()})
    return blocks


def messages_to_anthropic(messages: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """The ``system`` text and the ``messages`` list of a Messages API request."""
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        # Consecutive turns of one role are merged: all results of one assistant turn must
        # arrive in the next user turn.
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for message in messages:
        if message.role in ("system", "developer"):
            if message.text:
                system.append(message.text)
        elif message.role == "tool":
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
            content = _content_blocks(message)
            if content:
                block["content"] = content
            if message.is_error:
                block["is_error"] = True
            add("user", [block])
        elif message.role == "user":
            add("user", _content_blocks(message))
        else:
            add("assistant", _content_blocks(message))
    return ("\n\n".join(system) if system else None), out


def tools_to_anthropic(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    """Tool definitions in Anthropic's form (server tools with their own ``type`` pass as they are)."""
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        if "input_schema" in tool or ("type" in tool and tool["type"] != "function" and "function" not in tool):
            out.append(dict(tool))
            continue
        name, description, schema = tool_parts(tool, i)
        converted: dict[str, Any] = {"name": name, "input_schema": dict(schema)}
        if description:
            converted["description"] = description
        out.append(converted)
    return out


def message_from_anthropic(
    content: Sequence[Any],
    *,
    reader: ReplyReader | None = None,
    field: str = "content",
    raw_arguments: Mapping[int, str] | None = None,
) -> Message:
    """The assistant `Message` of a reply's ``content`` blocks.

    Args:
        content: The reply's content blocks.
        reader: Names the reply's source in errors.
        field: The path of ``content`` in the reply (named in errors).
        raw_arguments: Tool-use arguments as the stream sent them, by block position; used as
            they are (they may be cut off, and so not valid JSON).

    Raises:
        UpstreamError: A block has the wrong shape (a ``tool_use`` without a name, an ``input``
            that is not an object, ...); the message names it.
    """
    reader = reader or ReplyReader(None, api=_API)
    parts: list[Part] = []
    for i, block in enumerate(content):
        where = f"{field}[{i}]"
        block = reader.mapping(block, where)
        kind = block.get("type")
        if kind == "text":
            parts.append(TextPart(text=reader.text(block.get("text"), f"{where}.text") or ""))
        elif kind == "thinking":
            signature = reader.text(block.get("signature"), f"{where}.signature")
            parts.append(
                ThinkingPart(text=reader.text(block.get("thinking"), f"{where}.thinking") or "", signature=signature)
            )
        elif kind == "redacted_thinking":
            parts.append(ThinkingPart(text=reader.text(block.get("data"), f"{where}.data") or "", redacted=True))
        elif kind == "tool_use":
            name = reader.name(block.get("name"), f"{where}.name")
            call_id = reader.text(block.get("id"), f"{where}.id") or new_call_id()
            if raw_arguments is not None and i in raw_arguments:
                arguments = raw_arguments[i]
            else:
                arguments = json.dumps(reader.mapping(block.get("input"), f"{where}.input"), ensure_ascii=False)
            parts.append(ToolCall(call_id=call_id, name=name, arguments=arguments))
    return Message(role="assistant", parts=tuple(parts))


class _StreamAssembler:
    """Folds Messages API stream events into events and, at the end, one `ModelResponse`."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._reader = ReplyReader(url, api=_API + " streaming", status_code=200)
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._ordinal: dict[int, int] = {}
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None
        self.done = False
        self.events = 0
        """Stream events received with a payload."""

    def feed(self, event: SSEEvent) -> list[StreamEvent]:
        """The events one SSE event carries.

        Raises:
            UpstreamError: The server sent an ``error`` event (`ContextOverflowError` when it is one),
                or an event of the wrong shape (the message names the field).
        """
        if not event.data.strip():
            return []
        data = decode_reply(event.data, self._url, "a stream event")
        if data is None:
            raise UpstreamError(
                f"{self._url} sent a stream event that is not JSON ({event.data[:200]!r}); check that the server"
                " speaks the Anthropic Messages API.",
                url=self._url,
            )
        self.events += 1
        read = self._reader
        if not isinstance(data, dict):
            raise read.error("event", data, "a stream event object")
        kind = data.get("type") or event.event
        if kind == "error":
            raise classify_error(None, data, url=self._url)
        if kind == "message_start":
            self._message = dict(read.mapping(data.get("message"), "message"))
            self._usage.update(read.mapping(self._message.get("usage"), "message.usage"))
        elif kind == "content_block_start":
            index = read.index(data.get("index"), "index", len(self._blocks))
            return self._start_block(index, dict(read.mapping(data.get("content_block"), "content_block")))
        elif kind == "content_block_delta":
            index = read.index(data.get("index"), "index", 0)
            return self._delta(index, read.mapping(data.get("delta"), "delta"))
        elif kind == "message_delta":
            delta = read.mapping(data.get("delta"), "delta")
            self._stop_reason = read.text(delta.get("stop_reason"), "delta.stop_reason") or self._stop_reason
            usage = read.mapping(data.get("usage"), "usage")
            self._usage.update({k: v for k, v in usage.items() if v is not None})
        elif kind == "message_stop":
            self.done = True
        return []

    def _start_block(self, index: int, block: dict[str, Any]) -> list[StreamEvent]:
        read = self._reader
        self._blocks[index] = block
        kind = block.get("type")
        if kind == "tool_use":
            self._ordinal[index] = len(self._ordinal)
            self._json[index] = []
            call_id = read.text(block.get("id"), "content_block.id")
            name = read.text(block.get("name"), "content_block.name")
            return [ToolCallDelta(index=self._ordinal[index], call_id=call_id, name=name)]
        if kind == "text":
            text = read.text(block.get("text"), "content_block.text")
            return [TextDelta(text=text)] if text else []
        if kind == "thinking":
            text = read.text(block.get("thinking"), "content_block.thinking")
            return [ThinkingDelta(text=text)] if text else []
        return []

    def _delta(self, index: int, delta: Mapping[str, Any]) -> list[StreamEvent]:
        read = self._reader
        block = self._blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            piece = read.text(delta.get("text"), "delta.text") or ""
            block["text"] = (block.get("text") or "") + piece
            return [TextDelta(text=piece)]
        if kind == "thinking_delta":
            piece = read.text(delta.get("thinking"), "delta.thinking") or ""
            block["thinking"] = (block.get("thinking") or "") + piece
            return [ThinkingDelta(text=piece)]
        if kind == "signature_delta":
            block["signature"] = (block.get("signature") or "") + (
                read.text(delta.get("signature"), "delta.signature") or ""
            )
        elif kind == "input_json_delta" and index in self._json:
            piece = read.text(delta.get("partial_json"), "delta.partial_json") or ""
            self._json[index].append(piece)
            return [ToolCallDelta(index=self._ordinal[index], arguments_delta=piece)]
        return []

    def finish(self) -> ModelResponse:
        """The assembled reply.

        Tool arguments that are not valid JSON (cut off by ``max_tokens``, say) are kept as the
        stream sent them; `Session.complete` repairs such a call instead of dropping the reply.

        Raises:
            UpstreamError: The stream ended before ``message_stop``.
        """
        if not self.done:
            raise incomplete_stream(self._url, empty=self.events == 0)
        content: list[dict[str, Any]] = []
        raw_arguments: dict[int, str] = {}
        for position, index in enumerate(sorted(self._blocks)):
            block = dict(self._blocks[index])
            if index in self._json:
                text = "".join(self._json[index])
                try:
                    # bounded: a tool input nested thousands deep is kept raw, like any invalid input
                    block["input"] = _json.loads(text) if text.strip() else {}
                except ValueError:
                    block["input"] = {}
                    raw_arguments[position] = text
                if not isinstance(block["input"], dict):
                    block["input"] = {}
                    raw_arguments[position] = text
            content.append(block)
        raw = {**self._message, "content": content, "stop_reason": self._stop_reason, "usage": dict(self._usage)}
        return ModelResponse(
            message=message_from_anthropic(content, reader=self._reader, raw_arguments=raw_arguments),
            usage=parse_usage(self._usage),
            finish_reason=_FINISH.get(self._stop_reason or ""),
            provider_finish_reason=self._stop_reason,
            model_name=self._reader.label(self._message.get("model")),
            response_id=self._reader.label(self._message.get("id")),
            raw=raw,
        )


class _BaseAnthropicModel(HTTPModelBase[ClientT], Generic[ClientT]):
    """Request building and reply parsing shared by the sync and async clients."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str = ANTHROPIC_BASE_URL,
        api_key: str | None = None,
        anthropic_version: str = ANTHROPIC_VERSION,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        thinking: Mapping[str, Any] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        http_client: ClientT | None = None,
    ) -> None:
        """Configure the client; nothing is sent until the first request.

        Args:
            model: The model name (``"claude-sonnet-4-5"``, ...).
            base_url: The API root, without ``/v1``.
            api_key: Sent as ``x-api-key``.
            anthropic_version: The ``anthropic-version`` header.
            timeout: Seconds (or an `httpx.Timeout`); default 600 s to read, 10 s to connect.
            max_retries: Shortcut for ``RetryPolicy(max_retries=...)``.
            retry: How failed requests are retried (default `RetryPolicy()`).
            headers: Extra headers sent with every request (``anthropic-beta``, ...).
            max_tokens: Reply limit when a request gives none (the API requires one).
            thinking: Extended thinking settings, e.g. ``{"type": "enabled", "budget_tokens": 2048}``.
            extra_body: Extra request fields sent with every request.
            http_client: An httpx client to use; the model then leaves closing it to you.
        """
        super().__init__(
            base_url=base_url,
            headers=headers,
            timeout=timeout,
            retry=retry,
            max_retries=max_retries,
            http_client=http_client,
        )
        self._model = model
        self._api_key = api_key
        self._version = anthropic_version
        self._max_tokens = max_tokens
        self._thinking = dict(thinking) if thinking else None
        self._extra_body = dict(extra_body or {})

    @property
    def model_name(self) -> str:
        """The model this client asks for."""
        return self._model

    @property
    def url(self) -> str:
        """The Messages endpoint."""
        return f"{self.base_url}/v1/messages"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self._model!r}, base_url={self.base_url!r})"

    def _headers(self) -> dict[str, str]:
        auth = {"x-api-key": self._api_key} if self._api_key else {}
        return base_headers({"anthropic-version": self._version, **auth, **self._config.headers})

    def _body(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None,
        max_tokens: int | None,
        temperature: float | None,
        stream: bool,
    ) -> dict[str, Any]:
        system, converted = messages_to_anthropic(messages)
        body: dict[str, Any] = {
            "model": self._model,
            "max_tokens": max_tokens if max_tokens is not None else self._max_tokens,
            "messages": converted,
        }
        if system is not None:
            body["system"] = system
        if tools:
            body["tools"] = tools_to_anthropic(tools)
        if temperature is not None:
            body["temperature"] = temperature
        if self._thinking is not None:
            body["thinking"] = self._thinking
        body.update(self._extra_body)
        if stream:
            body["stream"] = True
        return body

    def _parse(self, data: Mapping[str, Any]) -> ModelResponse:
        if data.get("type") == "error":
            raise classify_error(200, data, url=self.url)
        content = data.get("content")
        if not isinstance(content, list):
            raise UpstreamError(
                f"{self.url} answered without `content` ({json.dumps(data)[:200]}); check that the server speaks"
                " the Anthropic Messages API.",
                url=self.url,
                status_code=200,
            )
        read = ReplyReader(self.url, api=_API)
        stop = read.text(data.get("stop_reason"), "stop_reason")
        if data.get("usage") is not None:
            read.mapping(data["usage"], "usage")
        return ModelResponse(
            message=message_from_anthropic(content, reader=read),
            usage=parse_usage(data.get("usage")),
            finish_reason=_FINISH.get(stop or ""),
            provider_finish_reason=stop,
            model_name=read.label(data.get("model")),
            response_id=read.label(data.get("id")),
            raw=dict(data),
        )


class AnthropicModel(SyncLifecycle, _BaseAnthropicModel[httpx.Client]):
    """Synchronous client for the Anthropic Messages API.

    Example::

        model = AnthropicModel("claude-sonnet-4-5", api_key=key)
        reply = model.request([Message.system("Be brief."), Message.user("Hello")])
    """

    def request(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelResponse:
        """Send the messages and return the reply (see `Model.request`)."""
        body = self._body(messages, tools=tools, max_tokens=max_tokens, temperature=temperature, stream=False)
        response = send_sync(self._client, self._config, self.url, body, self._headers(), stream=False)
        return self._parse(json_body(response, self.url))

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Iterator[StreamEvent]:
        """Send the messages and yield the reply as it arrives (see `Model.stream`)."""
        body = self._body(messages, tools=tools, max_tokens=max_tokens, temperature=temperature, stream=True)
        response = send_sync(self._client, self._config, self.url, body, self._headers(), stream=True)
        assembler = _StreamAssembler(self.url)
        events = iter_sse_sync(response, self.url)
        try:
            for event in events:
                yield from assembler.feed(event)
                if assembler.done:
                    break
        finally:
            events.close()
        yield ResponseDone(response=assembler.finish())


class AsyncAnthropicModel(AsyncLifecycle, _BaseAnthropicModel[httpx.AsyncClient]):
    """Asynchronous client for the Anthropic Messages API."""

    async def request(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelResponse:
        """Send the messages and return the reply (see `Model.request`)."""
        body = self._body(messages, tools=tools, max_tokens=max_tokens, temperature=temperature, stream=False)
        response = await send_async(self._client, self._config, self.url, body, self._headers(), stream=False)
        return self._parse(json_body(response, self.url))

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Send the messages and yield the reply as it arrives (see `Model.stream`)."""
        body = self._body(messages, tools=tools, max_tokens=max_tokens, temperature=temperature, stream=True)
        response = await send_async(self._client, self._config, self.url, body, self._headers(), stream=True)
        assembler = _StreamAssembler(self.url)
        events = iter_sse_async(response, self.url)
        try:
            async for event in events:
                for item in assembler.feed(event):
                    yield item
                if assembler.done:
                    break
        finally:
            await events.aclose()
        yield ResponseDone(response=assembler.finish())

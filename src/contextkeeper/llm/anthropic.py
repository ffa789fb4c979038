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

from ..exceptions import UpstreamError
from ..messages import ImagePart, Message, Part, TextPart, ThinkingPart, ToolCall
from ..usage import RequestUsage
from . import ANTHROPIC_BASE_URL
from ._http import (
    AsyncLifecycle,
    ClientT,
    HTTPModelBase,
    SSEEvent,
    SyncLifecycle,
    base_headers,
    incomplete_stream,
    iter_sse_async,
    iter_sse_sync,
    json_body,
    send_async,
    send_sync,
)
from ._openai_format import tool_parts
from .base import (
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
    """`RequestUsage` from an Anthropic ``usage`` object; input counts cache reads and writes."""
    if not data:
        return RequestUsage()
    cache_read = _int(data.get("cache_read_input_tokens"))
    cache_write = _int(data.get("cache_creation_input_tokens"))
    return RequestUsage(
        # Anthropic's input_tokens excludes the cached part; the library's includes it.
        input_tokens=_int(data.get("input_tokens")) + cache_read + cache_write,
        output_tokens=_int(data.get("output_tokens")),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


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


def message_from_anthropic(content: Sequence[Mapping[str, Any]]) -> Message:
    """The assistant `Message` of a reply's ``content`` blocks."""
    parts: list[Part] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            parts.append(TextPart(text=block.get("text", "")))
        elif kind == "thinking":
            parts.append(ThinkingPart(text=block.get("thinking", ""), signature=block.get("signature")))
        elif kind == "redacted_thinking":
            parts.append(ThinkingPart(text=block.get("data", ""), redacted=True))
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {})
            parts.append(ToolCall(call_id=block.get("id", ""), name=block.get("name", ""), arguments=arguments))
    return Message(role="assistant", parts=tuple(parts))


class _StreamAssembler:
    """Folds Messages API stream events into events and, at the end, one `ModelResponse`."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._ordinal: dict[int, int] = {}
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None
        self.done = False

    def feed(self, event: SSEEvent) -> list[StreamEvent]:
        """The events one SSE event carries.

        Raises:
            UpstreamError: The server sent an ``error`` event (`ContextOverflowError` when it is one).
        """
        if not event.data.strip():
            return []
        try:
            data = json.loads(event.data)
        except ValueError:
            raise UpstreamError(
                f"{self._url} sent a stream event that is not JSON ({event.data[:200]!r}); check that the server"
                " speaks the Anthropic Messages API.",
                url=self._url,
            ) from None
        kind = data.get("type") or event.event
        if kind == "error":
            raise classify_error(None, data, url=self._url)
        if kind == "message_start":
            self._message = dict(data.get("message") or {})
            self._usage.update(self._message.get("usage") or {})
        elif kind == "content_block_start":
            return self._start_block(data.get("index", len(self._blocks)), dict(data.get("content_block") or {}))
        elif kind == "content_block_delta":
            return self._delta(data.get("index", 0), data.get("delta") or {})
        elif kind == "message_delta":
            self._stop_reason = (data.get("delta") or {}).get("stop_reason") or self._stop_reason
            self._usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            self.done = True
        return []

    def _start_block(self, index: int, block: dict[str, Any]) -> list[StreamEvent]:
        self._blocks[index] = block
        kind = block.get("type")
        if kind == "tool_use":
            self._ordinal[index] = len(self._ordinal)
            self._json[index] = []
            return [ToolCallDelta(index=self._ordinal[index], call_id=block.get("id"), name=block.get("name"))]
        if kind == "text" and block.get("text"):
            return [TextDelta(text=block["text"])]
        if kind == "thinking" and block.get("thinking"):
            return [ThinkingDelta(text=block["thinking"])]
        return []

    def _delta(self, index: int, delta: Mapping[str, Any]) -> list[StreamEvent]:
        block = self._blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta.get("text", "")
            return [TextDelta(text=delta.get("text", ""))]
        if kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            return [ThinkingDelta(text=delta.get("thinking", ""))]
        if kind == "signature_delta":
            block["signature"] = block.get("signature", "") + delta.get("signature", "")
        elif kind == "input_json_delta" and index in self._json:
            piece = delta.get("partial_json", "")
            self._json[index].append(piece)
            return [ToolCallDelta(index=self._ordinal[index], arguments_delta=piece)]
        return []

    def finish(self) -> ModelResponse:
        """The assembled reply.

        Raises:
            UpstreamError: The stream ended before ``message_stop``.
        """
        if not self.done:
            raise incomplete_stream(self._url)
        content: list[dict[str, Any]] = []
        for index in sorted(self._blocks):
            block = dict(self._blocks[index])
            if index in self._json:
                text = "".join(self._json[index])
                block["input"] = json.loads(text) if text.strip() else {}
            content.append(block)
        raw = {**self._message, "content": content, "stop_reason": self._stop_reason, "usage": dict(self._usage)}
        return ModelResponse(
            message=message_from_anthropic(content),
            usage=parse_usage(self._usage),
            finish_reason=_FINISH.get(self._stop_reason or ""),
            provider_finish_reason=self._stop_reason,
            model_name=self._message.get("model"),
            response_id=self._message.get("id"),
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
        stop = data.get("stop_reason")
        return ModelResponse(
            message=message_from_anthropic(content),
            usage=parse_usage(data.get("usage")),
            finish_reason=_FINISH.get(stop or ""),
            provider_finish_reason=stop,
            model_name=data.get("model"),
            response_id=data.get("id"),
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

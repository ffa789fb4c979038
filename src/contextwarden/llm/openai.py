"""OpenAI-compatible chat-completions client on httpx: `OpenAIChatModel` and `AsyncOpenAIChatModel`.

Speaks ``POST {base_url}/chat/completions``, which OpenAI, Azure-style gateways, vLLM, Ollama
(``http://localhost:11434/v1``), the llama.cpp server, LiteLLM and most hosted providers accept.
Needs the ``llm`` extra (``pip install contextwarden[llm]``).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Generic, Literal

import httpx

from ..exceptions import UpstreamError
from ..messages import Message, Part, TextPart, ThinkingPart, ToolCall
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
from ._openai_format import message_from_openai, message_to_openai, messages_to_openai, new_call_id, tools_to_openai
from ._shapes import ReplyReader
from .base import (
    OPENAI_BASE_URL,
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

__all__ = ["AsyncOpenAIChatModel", "OpenAIChatModel"]

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
    "error": "error",
}


_MAX_REPORTED = 10**12
"""Largest token count believed; a negative count or one past it reads as not reported."""


def _int(value: Any) -> int:
    return value if _reported(value) else 0


def _reported(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_REPORTED


def parse_usage(data: Mapping[str, Any] | None) -> RequestUsage:
    """`RequestUsage` from an OpenAI ``usage`` object.

    Without ``prompt_tokens`` and ``completion_tokens`` the usage is unreported
    (``reported=False``), not zero; other missing fields count as 0.
    """
    if not isinstance(data, Mapping) or not (
        _reported(data.get("prompt_tokens")) or _reported(data.get("completion_tokens"))
    ):
        return RequestUsage.unreported()
    details: dict[str, int] = {}
    prompt_details = data.get("prompt_tokens_details")
    prompt_details = prompt_details if isinstance(prompt_details, Mapping) else {}
    for key in ("completion_tokens_details", "prompt_tokens_details"):
        group = data.get(key)
        for name, value in group.items() if isinstance(group, Mapping) else ():
            if name != "cached_tokens" and _int(value):
                details[str(name)] = _int(value)
    return RequestUsage(
        input_tokens=_int(data.get("prompt_tokens")),
        output_tokens=_int(data.get("completion_tokens")),
        cache_read_tokens=_int(prompt_details.get("cached_tokens")),
        details=details,
    )


def _usage_dict(usage: RequestUsage) -> dict[str, Any] | None:
    if not usage.reported:
        return None
    out: dict[str, Any] = {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }
    if usage.cache_read_tokens:
        out["prompt_tokens_details"] = {"cached_tokens": usage.cache_read_tokens}
    return out


_API = "OpenAI chat-completions"


class _StreamAssembler:
    """Folds chat-completion chunks into events and, at the end, one `ModelResponse`."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._reader = ReplyReader(url, api=_API + " streaming", status_code=200)
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._usage = RequestUsage.unreported()
        self._finish: str | None = None
        self._model: str | None = None
        self._id: str | None = None
        self._created: int | None = None
        self.done = False
        self.events = 0
        """Stream events received with a payload (the end marker and keep-alives not included)."""

    def feed(self, event: SSEEvent) -> list[StreamEvent]:
        """The events one SSE event carries.

        Raises:
            UpstreamError: The server sent an error object (`ContextOverflowError` when it is one),
                or a chunk of the wrong shape (the message names the field).
        """
        if event.data.strip() == "[DONE]":
            self.done = True
            return []
        if not event.data.strip():
            return []
        chunk = decode_reply(event.data, self._url, "a stream chunk")
        if chunk is None:
            raise UpstreamError(
                f"{self._url} sent a stream chunk that is not JSON ({event.data[:200]!r}); check that the server"
                " speaks the OpenAI streaming format.",
                url=self._url,
            )
        self.events += 1
        read = self._reader
        if not isinstance(chunk, dict):
            raise read.error("chunk", chunk, "a chat.completion.chunk object")
        if "error" in chunk:
            raise classify_error(None, chunk, url=self._url)
        self._id = self._id or read.label(chunk.get("id"))
        self._model = self._model or read.label(chunk.get("model"))
        created = chunk.get("created")
        if self._created is None and isinstance(created, int) and not isinstance(created, bool):
            self._created = created
        if chunk.get("usage") is not None:
            usage = parse_usage(read.mapping(chunk["usage"], "usage"))
            if usage.reported or not self._usage.reported:
                self._usage = usage
        out: list[StreamEvent] = []
        for i, choice in enumerate(read.items(chunk.get("choices"), "choices")):
            choice = read.mapping(choice, f"choices[{i}]")
            if read.index(choice.get("index"), f"choices[{i}].index", 0) != 0:
                continue
            delta = read.mapping(choice.get("delta"), f"choices[{i}].delta")
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._thinking.append(reasoning)
                out.append(ThinkingDelta(text=reasoning))
            content = read.text(delta.get("content"), f"choices[{i}].delta.content")
            if content:
                self._text.append(content)
                out.append(TextDelta(text=content))
            for position, call in enumerate(read.items(delta.get("tool_calls"), f"choices[{i}].delta.tool_calls")):
                out.append(self._feed_call(call, position, f"choices[{i}].delta.tool_calls[{position}]"))
            finish = read.text(choice.get("finish_reason"), f"choices[{i}].finish_reason")
            if finish:
                self._finish = finish
        return out

    def _feed_call(self, call: Any, position: int, field: str) -> ToolCallDelta:
        read = self._reader
        call = read.mapping(call, field)
        index = read.index(call.get("index"), f"{field}.index", position)
        function = read.mapping(call.get("function"), f"{field}.function")
        state = self._calls.setdefault(index, {"id": None, "name": None, "arguments": []})
        call_id = read.text(call.get("id"), f"{field}.id")
        name = read.text(function.get("name"), f"{field}.function.name")
        new_id = call_id if state["id"] is None else None
        new_name = name if state["name"] is None else None
        state["id"] = state["id"] or new_id
        state["name"] = state["name"] or new_name
        raw = function.get("arguments")
        arguments = "" if raw is None else read.arguments(raw, f"{field}.function.arguments")
        state["arguments"].append(arguments)
        return ToolCallDelta(index=index, call_id=new_id, name=new_name, arguments_delta=arguments)

    def finish(self) -> ModelResponse:
        """The assembled reply.

        Raises:
            UpstreamError: The stream ended before the server said it was complete, or a tool
                call never got its name.
        """
        if not self.done and self._finish is None:
            raise incomplete_stream(self._url, empty=self.events == 0)
        parts: list[Part] = []
        if self._thinking:
            parts.append(ThinkingPart(text="".join(self._thinking)))
        if self._text:
            parts.append(TextPart(text="".join(self._text)))
        for index in sorted(self._calls):
            state = self._calls[index]
            call_id = state["id"] or new_call_id()
            name = self._reader.name(state["name"], f"choices[0].delta.tool_calls[index={index}].function.name")
            parts.append(ToolCall(call_id=call_id, name=name, arguments="".join(state["arguments"])))
        message = Message(role="assistant", parts=tuple(parts))
        raw_message = message_to_openai(message)
        if self._thinking:
            raw_message["reasoning_content"] = "".join(self._thinking)
        raw = {
            "id": self._id,
            "object": "chat.completion",
            "created": self._created or int(time.time()),
            "model": self._model,
            "choices": [{"index": 0, "message": raw_message, "finish_reason": self._finish}],
            "usage": _usage_dict(self._usage),
        }
        return ModelResponse(
            message=message,
            usage=self._usage,
            finish_reason=_FINISH.get(self._finish or ""),
            provider_finish_reason=self._finish,
            model_name=self._model,
            response_id=self._id,
            raw=raw,
        )


class _BaseOpenAIChatModel(HTTPModelBase[ClientT], Generic[ClientT]):
    """Request building and reply parsing shared by the sync and async clients."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str = OPENAI_BASE_URL,
        api_key: str | None = None,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        max_tokens: int | None = None,
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = None,
        stream_usage: bool = True,
        extra_body: Mapping[str, Any] | None = None,
        http_client: ClientT | None = None,
    ) -> None:
        """Configure the client; nothing is sent until the first request.

        Args:
            model: The model name the server knows (``"gpt-4o"``, ``"llama3.1:8b"``, ...).
            base_url: The API root, ending in ``/v1`` for most servers.
            api_key: Sent as ``Authorization: Bearer``; local servers usually need none.
            timeout: Seconds (or an `httpx.Timeout`); default 600 s to read, 10 s to connect.
            max_retries: Shortcut for ``RetryPolicy(max_retries=...)``.
            retry: How failed requests are retried (default `RetryPolicy()`).
            headers: Extra headers sent with every request.
            max_tokens: Default reply limit when a request gives none.
            max_tokens_field: The request field of the reply limit. Default: ``"max_completion_tokens"``
                at api.openai.com (its reasoning models reject ``max_tokens``; every current OpenAI
                model takes the new name), ``"max_tokens"`` elsewhere (what other servers expect).
            stream_usage: Ask for usage in streams (``stream_options.include_usage``); turn off
                for servers that reject the option.
            extra_body: Extra request fields sent with every request (``top_p``, ``seed``, ...).
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
        self._max_tokens = max_tokens
        if max_tokens_field is None:
            openai = httpx.URL(self.base_url).host == "api.openai.com"
            max_tokens_field = "max_completion_tokens" if openai else "max_tokens"
        self._max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = max_tokens_field
        self._stream_usage = stream_usage
        self._extra_body = dict(extra_body or {})

    @property
    def model_name(self) -> str:
        """The model this client asks for."""
        return self._model

    @property
    def url(self) -> str:
        """The chat-completions endpoint."""
        return f"{self.base_url}/chat/completions"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self._model!r}, base_url={self.base_url!r})"

    def _headers(self) -> dict[str, str]:
        auth = {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        return base_headers({**auth, **self._config.headers})

    def _body(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None,
        max_tokens: int | None,
        temperature: float | None,
        stream: bool,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self._model, "messages": messages_to_openai(messages)}
        if tools:
            body["tools"] = tools_to_openai(tools)
        limit = max_tokens if max_tokens is not None else self._max_tokens
        if limit is not None:
            body[self._max_tokens_field] = limit
        if temperature is not None:
            body["temperature"] = temperature
        body.update(self._extra_body)
        if stream:
            body["stream"] = True
            if self._stream_usage:
                body["stream_options"] = {"include_usage": True}
        return body

    def _parse(self, data: Mapping[str, Any]) -> ModelResponse:
        if "error" in data:
            raise classify_error(200, data, url=self.url)
        read = ReplyReader(self.url, api=_API)
        choices = read.items(data.get("choices"), "choices")
        if not choices:
            raise UpstreamError(
                f"{self.url} answered without `choices` ({json.dumps(data)[:200]}); check that the server speaks"
                " the OpenAI chat-completions API.",
                url=self.url,
                status_code=200,
            )
        choice = read.mapping(choices[0], "choices[0]")
        finish = read.text(choice.get("finish_reason"), "choices[0].finish_reason")
        if data.get("usage") is not None:
            read.mapping(data["usage"], "usage")
        return ModelResponse(
            message=message_from_openai(read.mapping(choice.get("message"), "choices[0].message"), reader=read),
            usage=parse_usage(data.get("usage")),
            finish_reason=_FINISH.get(finish or ""),
            provider_finish_reason=finish,
            model_name=read.label(data.get("model")),
            response_id=read.label(data.get("id")),
            raw=dict(data),
        )


class OpenAIChatModel(SyncLifecycle, _BaseOpenAIChatModel[httpx.Client]):
    """Synchronous client for any OpenAI-compatible chat-completions server.

    Example::

        model = OpenAIChatModel("llama3.1:8b", base_url="http://localhost:11434/v1")
        reply = model.request([Message.user("Hello")])
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


class AsyncOpenAIChatModel(AsyncLifecycle, _BaseOpenAIChatModel[httpx.AsyncClient]):
    """Asynchronous client for any OpenAI-compatible chat-completions server."""

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
            # Closing the SSE generator closes the response even when we stop at [DONE].
            await events.aclose()
        yield ResponseDone(response=assembler.finish())

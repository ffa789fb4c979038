"""Test doubles that stand in for a real model: scripted (`TestModel`) or computed (`FunctionModel`).

Both record every request they get and report usage estimated from characters (about four per
token, plus a few tokens of framing per message), so code that accounts for usage can be tested
without a server. Each has an async twin with the same methods.

Example::

    model = TestModel(["Hi!", ContextOverflowError("too long", limit=10, requested=20), "Done."])
    model.request([Message.user("hello")]).text        # "Hi!"
    model.request([Message.user("again")])             # raises ContextOverflowError
"""

from __future__ import annotations

import inspect
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Self

from ..exceptions import ContextOverflowError, UsageError
from ..messages import Message, TextPart, ThinkingPart, ToolCall
from ..usage import RequestUsage, SessionUsage
from .base import (
    FinishReason,
    ModelResponse,
    ResponseDone,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolSchema,
)

__all__ = [
    "AsyncFunctionModel",
    "AsyncTestModel",
    "FunctionModel",
    "RecordedRequest",
    "ScriptItem",
    "TestModel",
    "estimate_tokens",
]

ScriptItem = str | Message | ModelResponse | BaseException | type[BaseException]
"""One scripted reply: text, an assistant message, a full response, or an error to raise."""

Reply = str | Message | ModelResponse
"""What a `FunctionModel` function returns."""

_CHARS_PER_TOKEN = 4
_TOKENS_PER_MESSAGE = 4


def _chars(message: Message) -> int:
    total = len(message.role)
    for part in message.parts:
        if isinstance(part, TextPart | ThinkingPart):
            total += len(part.text)
        elif isinstance(part, ToolCall):
            total += len(part.name) + len(part.arguments)
        else:
            total += len(part.url) if part.url.startswith("http") else 85 * _CHARS_PER_TOKEN
    return total


def estimate_tokens(messages: Sequence[Message]) -> int:
    """The test models' token estimate: characters / 4, rounded up, plus 4 per message."""
    return sum(-(-_chars(m) // _CHARS_PER_TOKEN) + _TOKENS_PER_MESSAGE for m in messages)


@dataclass(frozen=True, kw_only=True)
class RecordedRequest:
    """One request a test model received."""

    messages: tuple[Message, ...]
    """The messages as given."""
    tools: tuple[ToolSchema, ...] | None
    """The tool definitions, if any."""
    max_tokens: int | None
    """The reply limit asked for."""
    temperature: float | None
    """The temperature asked for."""
    stream: bool
    """Whether the request came through ``stream()``."""


def _response(reply: Reply, request: RecordedRequest, model_name: str) -> ModelResponse:
    if isinstance(reply, ModelResponse):
        return reply
    if isinstance(reply, str):
        reply = Message.assistant(reply)
    if reply.role != "assistant":
        raise UsageError(
            f"a test model's reply must be an assistant message, got role={reply.role!r}; "
            "build it with `Message.assistant(...)`."
        )
    usage = RequestUsage(input_tokens=estimate_tokens(request.messages), output_tokens=estimate_tokens([reply]))
    finish: FinishReason = "tool_calls" if reply.tool_calls else "stop"
    return ModelResponse(
        message=reply, usage=usage, finish_reason=finish, provider_finish_reason=finish, model_name=model_name
    )


def _stream_events(response: ModelResponse) -> list[StreamEvent]:
    """The events a real stream would give for ``response``: word-sized text deltas, whole calls."""
    events: list[StreamEvent] = []
    for part in response.message.parts:
        if isinstance(part, ThinkingPart):
            events.append(ThinkingDelta(text=part.text))
        elif isinstance(part, TextPart):
            events.extend(TextDelta(text=piece) for piece in re.findall(r"\s*\S+\s*|\s+", part.text))
    for index, call in enumerate(response.message.tool_calls):
        events.append(ToolCallDelta(index=index, call_id=call.call_id, name=call.name, arguments_delta=call.arguments))
    events.append(ResponseDone(response=response))
    return events


class _BaseScripted:
    """Request recording, window check and usage totals shared by every test model."""

    __test__ = False  # keep pytest from collecting the classes named Test*

    def __init__(self, *, model_name: str, context_window: int | None, delay: float) -> None:
        self._model_name = model_name
        self.context_window = context_window
        """When set, a prompt estimated above it raises `ContextOverflowError` (as a provider would)."""
        self.delay = delay
        """Seconds each request waits before answering (for deadline and timeout tests)."""
        self.requests: list[RecordedRequest] = []
        """Every request received, in order."""
        self.usage = SessionUsage()
        """Usage summed over the requests answered."""
        self._lock = threading.Lock()

    @property
    def model_name(self) -> str:
        """The name the model reports."""
        return self._model_name

    def _record(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] | None,
        max_tokens: int | None,
        temperature: float | None,
        stream: bool,
    ) -> RecordedRequest:
        request = RecordedRequest(
            messages=tuple(messages),
            tools=tuple(tools) if tools is not None else None,
            max_tokens=max_tokens,
            temperature=temperature,
            stream=stream,
        )
        with self._lock:
            self.requests.append(request)
        if self.context_window is not None:
            needed = estimate_tokens(messages)
            if needed > self.context_window:
                raise ContextOverflowError(
                    f"{type(self).__name__}: the prompt does not fit the model's context window "
                    f"(requested={needed}, limit={self.context_window}); compact the conversation and retry.",
                    status_code=400,
                    limit=self.context_window,
                    requested=needed,
                )
        return request

    def _count(self, response: ModelResponse) -> ModelResponse:
        with self._lock:
            self.usage.incr(response.usage)
        return response


class _ScriptMixin(_BaseScripted):
    def __init__(
        self,
        replies: Sequence[ScriptItem] | None,
        *,
        cycle: bool,
        model_name: str,
        context_window: int | None,
        delay: float,
    ) -> None:
        super().__init__(model_name=model_name, context_window=context_window, delay=delay)
        self.replies: list[ScriptItem] = list(replies) if replies is not None else ["ok"]
        """The script; consumed in order."""
        self.cycle = cycle if replies is not None else True
        """Start the script over when it runs out (otherwise a further request raises `UsageError`)."""
        self._position = 0

    def _next_item(self) -> ScriptItem:
        with self._lock:
            if self._position >= len(self.replies):
                if not self.cycle or not self.replies:
                    raise UsageError(
                        f"{type(self).__name__} has no scripted reply left for request {len(self.requests)} "
                        f"(it was given {len(self.replies)}); add replies or pass `cycle=True`."
                    )
                self._position = 0
            item = self.replies[self._position]
            self._position += 1
        return item

    def _answer(self, request: RecordedRequest) -> ModelResponse:
        item = self._next_item()
        if isinstance(item, BaseException) or (isinstance(item, type) and issubclass(item, BaseException)):
            raise item
        return self._count(_response(item, request, self._model_name))


class TestModel(_ScriptMixin):
    """A synchronous model that answers from a script.

    Args:
        replies: Replies in order: text, an assistant `Message`, a `ModelResponse`, or an
            exception (instance or class) to raise for that request. ``None`` answers ``"ok"``
            to every request.
        cycle: Start over when the script runs out instead of raising `UsageError`.
        model_name: The name the model reports.
        context_window: Raise `ContextOverflowError` for prompts estimated above this.
        delay: Seconds to wait before each answer.
    """

    def __init__(
        self,
        replies: Sequence[ScriptItem] | None = None,
        *,
        cycle: bool = False,
        model_name: str = "test",
        context_window: int | None = None,
        delay: float = 0.0,
    ) -> None:
        super().__init__(replies, cycle=cycle, model_name=model_name, context_window=context_window, delay=delay)

    def close(self) -> None:
        """Nothing to release; here so test models stand in for HTTP clients."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def request(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelResponse:
        """The next scripted reply (see `Model.request`)."""
        request = self._record(messages, tools, max_tokens, temperature, stream=False)
        if self.delay:
            time.sleep(self.delay)
        return self._answer(request)

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Iterator[StreamEvent]:
        """The next scripted reply as stream events (see `Model.stream`)."""
        request = self._record(messages, tools, max_tokens, temperature, stream=True)
        if self.delay:
            time.sleep(self.delay)
        yield from _stream_events(self._answer(request))


async def _sleep(seconds: float) -> None:
    try:
        import anyio
    except ImportError:  # pragma: no cover - anyio comes with httpx; plain asyncio without it
        import asyncio

        await asyncio.sleep(seconds)
    else:
        await anyio.sleep(seconds)


class AsyncTestModel(_ScriptMixin):
    """The async twin of `TestModel` (same arguments)."""

    def __init__(
        self,
        replies: Sequence[ScriptItem] | None = None,
        *,
        cycle: bool = False,
        model_name: str = "test",
        context_window: int | None = None,
        delay: float = 0.0,
    ) -> None:
        super().__init__(replies, cycle=cycle, model_name=model_name, context_window=context_window, delay=delay)

    async def aclose(self) -> None:
        """Nothing to release; here so test models stand in for HTTP clients."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def request(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelResponse:
        """The next scripted reply (see `Model.request`)."""
        request = self._record(messages, tools, max_tokens, temperature, stream=False)
        if self.delay:
            await _sleep(self.delay)
        return self._answer(request)

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """The next scripted reply as stream events (see `Model.stream`)."""
        request = self._record(messages, tools, max_tokens, temperature, stream=True)
        if self.delay:
            await _sleep(self.delay)
        for event in _stream_events(self._answer(request)):
            yield event


ReplyFunction = Callable[[Sequence[Message], RecordedRequest], Reply]
"""``fn(messages, request) -> reply`` for `FunctionModel`."""

AsyncReplyFunction = Callable[[Sequence[Message], RecordedRequest], Reply | Awaitable[Reply]]
"""``fn(messages, request) -> reply`` (or an awaitable of it) for `AsyncFunctionModel`."""


class FunctionModel(_BaseScripted):
    """A synchronous model whose replies a function computes from the request.

    The function gets the messages and the `RecordedRequest`, and returns text, an assistant
    `Message` or a `ModelResponse`; it may raise to simulate a failure.

    Args:
        fn: The reply function.
        model_name: The name the model reports.
        context_window: Raise `ContextOverflowError` for prompts estimated above this.
        delay: Seconds to wait before each answer.
    """

    def __init__(
        self, fn: ReplyFunction, *, model_name: str = "function", context_window: int | None = None, delay: float = 0.0
    ) -> None:
        super().__init__(model_name=model_name, context_window=context_window, delay=delay)
        self.fn = fn

    def close(self) -> None:
        """Nothing to release; here so test models stand in for HTTP clients."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def request(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelResponse:
        """The function's reply (see `Model.request`)."""
        request = self._record(messages, tools, max_tokens, temperature, stream=False)
        if self.delay:
            time.sleep(self.delay)
        return self._count(_response(self.fn(request.messages, request), request, self._model_name))

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Iterator[StreamEvent]:
        """The function's reply as stream events (see `Model.stream`)."""
        request = self._record(messages, tools, max_tokens, temperature, stream=True)
        if self.delay:
            time.sleep(self.delay)
        yield from _stream_events(self._count(_response(self.fn(request.messages, request), request, self._model_name)))


class AsyncFunctionModel(_BaseScripted):
    """The async twin of `FunctionModel`; the function may be sync or async."""

    def __init__(
        self,
        fn: AsyncReplyFunction,
        *,
        model_name: str = "function",
        context_window: int | None = None,
        delay: float = 0.0,
    ) -> None:
        super().__init__(model_name=model_name, context_window=context_window, delay=delay)
        self.fn = fn

    async def _call(self, request: RecordedRequest) -> ModelResponse:
        if self.delay:
            await _sleep(self.delay)
        reply = self.fn(request.messages, request)
        if inspect.isawaitable(reply):
            reply = await reply
        return self._count(_response(reply, request, self._model_name))

    async def aclose(self) -> None:
        """Nothing to release; here so test models stand in for HTTP clients."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def request(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelResponse:
        """The function's reply (see `Model.request`)."""
        return await self._call(self._record(messages, tools, max_tokens, temperature, stream=False))

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """The function's reply as stream events (see `Model.stream`)."""
        response = await self._call(self._record(messages, tools, max_tokens, temperature, stream=True))
        for event in _stream_events(response):
            yield event

"""The contract every model client meets: `Model` (sync) and `AsyncModel` (async).

A client takes the library's `Message` list and returns a `ModelResponse` whose message is an
assistant `Message` (text, thinking and tool calls) together with the usage the provider
reported. ``stream()`` yields `StreamEvent` values: text, thinking and tool-call deltas as they
arrive, and always a final `ResponseDone` carrying the assembled `ModelResponse`.

Tools are given as JSON schemas in OpenAI's function format
(``{"type": "function", "function": {"name", "description", "parameters"}}``); the flat form
(``{"name", "description", "parameters"}``) and Anthropic's form (``input_schema``) are accepted
too and converted for the provider.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from ..exceptions import ConfigError
from ..messages import Message, ToolCall
from ..usage import RequestUsage

__all__ = [
    "AsyncModel",
    "FinishReason",
    "InvalidToolCall",
    "Model",
    "ModelResponse",
    "ResponseDone",
    "RetryPolicy",
    "ServerBound",
    "StreamEvent",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallDelta",
    "ToolSchema",
]

OPENAI_BASE_URL = "https://api.openai.com/v1"
ANTHROPIC_BASE_URL = "https://api.anthropic.com"
OLLAMA_BASE_URL = "http://localhost:11434/v1"
"""Default endpoints of the providers a model spec names (``openai:``, ``anthropic:``, ``ollama:``)."""

ToolSchema = Mapping[str, Any]
"""One tool definition as a JSON schema mapping (OpenAI function format preferred)."""

FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "error"]
"""Why the model stopped, normalised over providers."""


@dataclass(frozen=True, kw_only=True)
class InvalidToolCall:
    """A tool call whose arguments were not a valid JSON object (cut off by the reply's length limit, say).

    `Session.complete` and `Session.stream` keep such a reply: the call is appended with ``{}`` as
    its arguments (the raw text stays in the message's ``extra["contextwarden"]``) and answered
    with an error result, so the model can call the tool again.
    """

    call_id: str
    name: str
    arguments: str
    """The arguments exactly as the model wrote them."""
    error: str
    """What is wrong with them (the JSON parser's message)."""


@dataclass(frozen=True, kw_only=True)
class ModelResponse:
    """One reply of a model."""

    message: Message
    """The assistant message: text, thinking parts and tool calls."""
    usage: RequestUsage = field(default_factory=RequestUsage)
    """Tokens the request used, as the provider reported them."""
    finish_reason: FinishReason | None = None
    """Why generation stopped, normalised; ``None`` when the provider gave no known reason."""
    provider_finish_reason: str | None = None
    """The provider's own stop reason (``"end_turn"``, ``"tool_calls"``, ...)."""
    model_name: str | None = None
    """The model that answered, as the provider named it."""
    response_id: str | None = None
    """The provider's id of the response."""
    raw: dict[str, Any] = field(default_factory=dict)
    """The provider's response body (for a stream: assembled into the non-streaming shape)."""
    invalid_tool_calls: tuple[InvalidToolCall, ...] = ()
    """Calls a session answered itself with an error because their arguments were not valid JSON."""

    @property
    def text(self) -> str:
        """The reply's text."""
        return self.message.text

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls the reply asks for (the caller runs them); invalid ones are already answered."""
        calls = self.message.tool_calls
        if not self.invalid_tool_calls:
            return calls
        answered = {c.call_id for c in self.invalid_tool_calls}
        return tuple(c for c in calls if c.call_id not in answered)


@dataclass(frozen=True, kw_only=True, slots=True)
class TextDelta:
    """A piece of the reply's text."""

    text: str
    kind: Literal["text-delta"] = "text-delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class ThinkingDelta:
    """A piece of the model's reasoning."""

    text: str
    kind: Literal["thinking-delta"] = "thinking-delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallDelta:
    """A piece of a tool call; the first piece of a call carries its id and name."""

    index: int
    """Position of the call in the reply; deltas with the same index belong together."""
    call_id: str | None = None
    """The call's id, on the first delta of the call."""
    name: str | None = None
    """The tool's name, on the first delta of the call."""
    arguments_delta: str = ""
    """A piece of the JSON arguments text."""
    kind: Literal["tool-call-delta"] = "tool-call-delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class ResponseDone:
    """The last event of every stream: the assembled reply."""

    response: ModelResponse
    kind: Literal["done"] = "done"


StreamEvent = TextDelta | ThinkingDelta | ToolCallDelta | ResponseDone
"""What ``stream()`` yields; the last event is always `ResponseDone`."""


@runtime_checkable
class ServerBound(Protocol):
    """A model client that talks to one server (the HTTP clients): its window can be probed there."""

    @property
    def base_url(self) -> str:
        """The server's OpenAI-compatible base URL."""
        ...


class Model(Protocol):
    """A synchronous chat model."""

    @property
    def model_name(self) -> str:
        """The model this client asks for."""
        ...

    def request(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelResponse:
        """Send the messages and return the reply.

        Args:
            messages: The conversation (the view), oldest first.
            tools: Tool definitions the model may call.
            max_tokens: Upper bound on the reply's tokens; the client's default when ``None``.
            temperature: Sampling temperature; the provider's default when ``None``.

        Returns:
            The reply with the usage the provider reported.

        Raises:
            ContextOverflowError: The provider says the prompt is longer than the model's window.
            UpstreamError: The server could not be reached or failed after the retries.
            UsageError: The request was refused locally (``ALLOW_MODEL_REQUESTS`` is off).
        """
        ...

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Iterator[StreamEvent]:
        """Send the messages and yield the reply as it is generated.

        The last event is `ResponseDone`. Failures before the first event are retried like
        ``request()``; a failure after it raises `UpstreamError`, since the events already given
        out cannot be taken back.
        """
        ...


class AsyncModel(Protocol):
    """An asynchronous chat model; the same contract as `Model`, awaited."""

    @property
    def model_name(self) -> str:
        """The model this client asks for."""
        ...

    async def request(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelResponse:
        """Send the messages and return the reply (see `Model.request`)."""
        ...

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Send the messages and yield the reply as it is generated (see `Model.stream`)."""
        ...


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """When and how long an HTTP model client waits before sending a failed request again.

    Rate limits (429), server errors (5xx), 408/409, refused connections, timeouts and dropped
    connections are retried; a "prompt too long" error never is (the same prompt fails again).
    The wait grows exponentially with random jitter, so that many clients hitting one rate limit
    do not retry in lockstep; a ``Retry-After`` (or ``retry-after-ms``) header from the server
    replaces the computed wait.
    """

    max_retries: int = 2
    """Retries after the first attempt; 0 disables retrying."""
    initial_delay: float = 0.5
    """Wait before the first retry, in seconds."""
    max_delay: float = 20.0
    """Cap on the computed wait, in seconds."""
    jitter: float = 0.25
    """Share of the wait that is randomised (0 gives exact exponential waits)."""
    max_retry_after: float = 60.0
    """A server asking for a longer wait than this (seconds) is not retried; the error is raised."""

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.initial_delay < 0 or self.max_delay < 0 or not 0 <= self.jitter <= 1:
            raise ConfigError(
                f"RetryPolicy needs max_retries >= 0, delays >= 0 and 0 <= jitter <= 1 (got {self!r}); fix the value."
            )

    @staticmethod
    def is_retryable_status(status_code: int) -> bool:
        """Whether an HTTP status is worth retrying."""
        return status_code in (408, 409, 429) or status_code >= 500

    def backoff(self, attempt: int) -> float:
        """The computed wait before retry number ``attempt`` (1 for the first retry)."""
        delay = min(self.initial_delay * 2.0 ** (attempt - 1), self.max_delay)
        return delay * (1 - self.jitter * random.random())

    def wait_before(self, attempt: int, headers: Mapping[str, str] | None = None) -> float | None:
        """The wait before retry ``attempt``, or ``None`` when the request should not be retried.

        Args:
            attempt: 1 for the first retry.
            headers: The failed response's headers (lower-case names), if there was a response.
        """
        if attempt > self.max_retries:
            return None
        headers = headers or {}
        # OpenAI tells clients outright whether a retry can succeed.
        should_retry = headers.get("x-should-retry")
        if should_retry == "false":
            return None
        retry_after = _parse_retry_after(headers)
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after else None
        return self.backoff(attempt)


def _parse_retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(float(value) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        return max(float(email.utils.mktime_tz(parsed)) - time.time(), 0.0)

"""What a `ScriptedOpenAIServer` answers with: the script items, and the record of a received request.

Script items: text, `ScriptedReply` (text, tool calls, reasoning, usage numbers, delays, a
mid-stream disconnect), `ScriptedError` (a status and an error body), `ScriptedStream` (stream
events sent verbatim), `ScriptedDisconnect` (close without answering), or a function of the
request body returning one of those.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from ..messages import ToolCall

__all__ = [
    "ReceivedRequest",
    "ScriptedDisconnect",
    "ScriptedError",
    "ScriptedReply",
    "ScriptedStream",
    "ServerRoute",
    "ServerScriptItem",
]


@dataclass(frozen=True, kw_only=True)
class ScriptedReply:
    """A successful reply."""

    text: str = ""
    """The reply's text."""
    tool_calls: Sequence[ToolCall] = ()
    """Tool calls the reply makes."""
    reasoning: str | None = None
    """Reasoning text (OpenAI-style ``reasoning_content``; an Anthropic thinking block)."""
    prompt_tokens: int | None = None
    """Reported prompt tokens (cached ones included); ``None`` estimates them from the request size."""
    completion_tokens: int | None = None
    """Reported completion tokens; ``None`` estimates them from the reply size."""
    cached_tokens: int = 0
    """Reported prompt-cache hits (part of ``prompt_tokens``)."""
    finish_reason: str | None = None
    """OpenAI finish reason; default ``"tool_calls"`` when there are calls, else ``"stop"``."""
    delay: float = 0.0
    """Seconds to wait before answering (longer than the client's timeout to test timeouts)."""
    chunk_delay: float = 0.0
    """Seconds between stream events."""
    disconnect_after: int | None = None
    """For a stream: close the connection after this many events, before the end marker."""


@dataclass(frozen=True, kw_only=True)
class ScriptedError:
    """An error reply: an HTTP status and a provider-style error body."""

    status: int = 500
    """The HTTP status."""
    message: str = "The server had an error while processing your request."
    """The error message (OpenAI ``error.message``)."""
    type: str = "server_error"
    """OpenAI ``error.type``."""
    code: str | None = None
    """OpenAI ``error.code``."""
    anthropic_message: str | None = None
    """The message on the Anthropic endpoint, when it words the error differently."""
    body: Mapping[str, Any] | str | None = None
    """A body sent verbatim instead of the generated one (a real provider's error, say)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers (``Retry-After``, ...)."""
    delay: float = 0.0
    """Seconds to wait before answering."""
    in_stream: bool = False
    """For a streaming request: answer 200 and send the error as a stream event."""

    @classmethod
    def context_length_exceeded(cls, *, limit: int = 4096, requested: int = 5000, in_stream: bool = False) -> Self:
        """The 400 a provider sends when the prompt does not fit the window."""
        return cls(
            status=400,
            message=(
                f"This model's maximum context length is {limit} tokens. However, your messages resulted in"
                f" {requested} tokens. Please reduce the length of the messages."
            ),
            type="invalid_request_error",
            code="context_length_exceeded",
            anthropic_message=f"prompt is too long: {requested} tokens > {limit} maximum",
            in_stream=in_stream,
        )

    @classmethod
    def rate_limited(cls, *, retry_after: float | None = None) -> Self:
        """A 429, with a ``Retry-After`` header (seconds) when given."""
        headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else {}
        return cls(
            status=429,
            message="Rate limit reached for requests. Please try again later.",
            type="requests",
            code="rate_limit_exceeded",
            headers=headers,
        )

    @classmethod
    def server_error(cls, status: int = 500) -> Self:
        """A 5xx."""
        return cls(status=status)


@dataclass(frozen=True, kw_only=True)
class ScriptedStream:
    """A streamed reply (HTTP 200, ``text/event-stream``) whose events are sent verbatim.

    For replies no well-behaved server sends: chunks of the wrong shape, an empty event stream,
    a stream without its end marker.
    """

    events: Sequence[str | Mapping[str, Any] | Sequence[Any]] = ()
    """The ``data:`` payload of each event; anything but a string is JSON-encoded."""
    done: bool = True
    """Send ``data: [DONE]`` after the events (OpenAI's end marker)."""


@dataclass(frozen=True, kw_only=True)
class ScriptedDisconnect:
    """Close the connection without sending a response."""

    delay: float = 0.0
    """Seconds to wait before closing."""


ServerScriptItem = (
    str
    | ScriptedReply
    | ScriptedError
    | ScriptedStream
    | ScriptedDisconnect
    | Callable[[dict[str, Any]], "str | ScriptedReply | ScriptedError | ScriptedStream | ScriptedDisconnect"]
)
"""One entry of the server's script; a function gets the request's JSON body."""


ServerRoute = Mapping[str, Any] | Sequence[Any] | ScriptedError | Callable[[Any], "Mapping[str, Any] | ScriptedError"]
"""The answer of an extra route: a JSON payload (HTTP 200), an error, or a function of the request body."""


@dataclass(frozen=True, kw_only=True)
class ReceivedRequest:
    """A request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names in lower case."""
    body: dict[str, Any] | None
    """The decoded JSON body, if any."""

"""Turn a provider's error reply into the library's errors.

Every provider says "the prompt is too long" differently; `classify_error` recognises them all and
raises one `ContextOverflowError` (with the window and the requested size when the provider gave
them), so the reactive layer has a single signal to catch. Everything else becomes an
`UpstreamError` whose message names the URL, the status and what to check.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from .._json import MAX_DEPTH, BadJSON, loads
from ..exceptions import ContextOverflowError, StreamInterrupted, UpstreamError

__all__ = ["blames_request", "classify_error", "is_context_overflow", "transport_error"]

_MAX_DETAIL = 500

# Substrings (lower-cased) that mean "the prompt does not fit the window", one group per provider.
# Matched against the provider's message and the raw body, because gateways such as LiteLLM nest
# the upstream provider's text inside their own message.
_OVERFLOW_MARKERS: tuple[str, ...] = (
    # OpenAI, Azure, Groq, DeepSeek, vLLM (OpenAI wording)
    "context_length_exceeded",
    "maximum context length",
    "reduce the length of the messages",
    "exceeds the context window",
    "input tokens exceed the configured limit",
    # Anthropic (also through Bedrock and Vertex)
    "prompt is too long",
    "exceed context limit",
    # Gemini
    "exceeds the maximum number of tokens",
    # vLLM
    "longer than the maximum model length",
    "is too long and exceeds limit",
    "longer than the model's context length",
    "exceeds max_model_len",
    # Ollama
    "input length exceeds the context length",
    "context length exceeded",
    "exceeds the context length",
    # llama.cpp server
    "exceeds the available context size",
    "exceed_context_size_error",
    # LiteLLM
    "contextwindowexceedederror",
    # Mistral, Bedrock
    "too large for model with",
    "input is too long for requested model",
)

_I = re.IGNORECASE | re.DOTALL
# Patterns that carry numbers; the first that matches gives `limit` and `requested`. Groups named
# `requested` give the total; `input` + `output` are added when the provider splits them.
_NUMBER_PATTERNS: tuple[re.Pattern[str], ...] = (
    # Anthropic: "prompt is too long: 209303 tokens > 200000 maximum"
    re.compile(r"prompt is too long: (?P<requested>\d+) tokens > (?P<limit>\d+)", _I),
    # Anthropic: "input length and `max_tokens` exceed context limit: 179413 + 32768 > 200000"
    re.compile(r"exceed context limit: (?P<input>\d+) \+ (?P<output>\d+) > (?P<limit>\d+)", _I),
    # vLLM: "maximum context length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778)"
    re.compile(
        r"maximum context length is (?P<limit>\d+) tokens and your request has (?P<input>\d+) input tokens"
        r" \((?P<output>\d+) >",
        _I,
    ),
    # OpenAI / vLLM: "maximum context length is 8192 tokens. However, you requested 9000 tokens"
    # or "... However, your messages resulted in 9000 tokens"
    re.compile(
        r"maximum context length is (?P<limit>\d+) tokens.{0,40}?(?:requested|resulted in) (?P<requested>\d+)", _I
    ),
    # OpenAI: "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 509178 tokens"
    re.compile(r"configured limit of (?P<limit>\d+) tokens.{0,40}?resulted in (?P<requested>\d+)", _I),
    # Gemini: "The input token count (2800010) exceeds the maximum number of tokens allowed (1048575)"
    re.compile(
        r"input token count \(?(?P<requested>\d+)?\)? ?exceeds the maximum number of tokens allowed \((?P<limit>\d+)\)",
        _I,
    ),
    # vLLM: "The decoder prompt (length 5000) is longer than the maximum model length of 4096"
    re.compile(r"\(length (?P<requested>\d+)\).{0,80}?longer than the maximum model length of (?P<limit>\d+)", _I),
    # vLLM: "Prompt length of 5000 is longer than the maximum model length of 4096"
    re.compile(r"length of (?P<requested>\d+) is longer than the maximum model length of (?P<limit>\d+)", _I),
    # vLLM: "Input prompt (5000 tokens) is too long and exceeds limit of 4096"
    re.compile(r"\((?P<requested>\d+) tokens\) is too long and exceeds limit of (?P<limit>\d+)", _I),
    # vLLM: "The prompt (40014 tokens) is longer than the model's context length (32768)"
    re.compile(r"\((?P<requested>\d+) tokens\) is longer than the model's context length \((?P<limit>\d+)", _I),
    # vLLM: "Request exceeds max_model_len 32768"
    re.compile(r"exceeds max_model_len (?P<limit>\d+)", _I),
    # llama.cpp: "request (4476 tokens) exceeds the available context size (4096 tokens)"
    re.compile(r"\((?P<requested>\d+) tokens\) exceeds the available context size \((?P<limit>\d+)", _I),
    # Mistral: "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length"
    re.compile(r"contains (?P<requested>\d+) tokens.{0,60}?too large for model with (?P<limit>\d+)", _I),
    # Limit alone (OpenAI/vLLM wording without the request size)
    re.compile(r"maximum context length is (?P<limit>\d+)", _I),
)


def _loads(body: str) -> Any:
    try:
        return loads(body, max_depth=MAX_DEPTH + 16)
    except BadJSON:  # not JSON, or nested too deep to be an error object: read as text
        return None


def _provider_message(data: Any) -> tuple[str, Mapping[str, Any]]:
    """The human message and the error object from a decoded error body."""
    if isinstance(data, Sequence) and not isinstance(data, str) and data:
        # Gemini sometimes wraps the error object in a one-element list.
        data = data[0]
    if not isinstance(data, Mapping):
        return "", {}
    error = data.get("error", data)
    if isinstance(error, str):
        return error, data
    if isinstance(error, Mapping):
        message = error.get("message") or error.get("detail") or data.get("message") or data.get("detail") or ""
        return (message if isinstance(message, str) else json.dumps(message)), error
    return "", data


def _extract_numbers(text: str, error: Mapping[str, Any]) -> tuple[int | None, int | None]:
    # llama.cpp returns the numbers as fields of the error object.
    n_prompt, n_ctx = error.get("n_prompt_tokens"), error.get("n_ctx")
    if isinstance(n_prompt, int) and isinstance(n_ctx, int):
        return n_ctx, n_prompt
    for pattern in _NUMBER_PATTERNS:
        match = pattern.search(text)
        if match is None:
            continue
        groups = match.groupdict()
        limit = int(groups["limit"]) if groups.get("limit") else None
        requested: int | None = None
        if groups.get("requested"):
            requested = int(groups["requested"])
        elif groups.get("input") and groups.get("output"):
            requested = int(groups["input"]) + int(groups["output"])
        return limit, requested
    return None, None


def is_context_overflow(text: str) -> bool:
    """Whether an error text is a provider's "the prompt does not fit the window" signal."""
    lowered = text.lower()
    return any(marker in lowered for marker in _OVERFLOW_MARKERS)


# Lower-cased words of a 5xx body that blame the request, not the server's state: sending the same
# request again fails the same way (llama-cpp-python answers a message it cannot validate with 500).
_REQUEST_FAULTS: tuple[str, ...] = (
    "validation error",
    "field required",
    "input should be",
    "is not a valid",
    "none is not an allowed value",
    "invalid request",
    "unprocessable",
)


def blames_request(status_code: int, body: str | bytes) -> bool:
    """Whether a server error's body says the request itself is at fault (retrying it cannot help)."""
    if status_code < 500:
        return False
    text = (body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body)[:20_000].lower()
    return any(marker in text for marker in _REQUEST_FAULTS)


def _hint(status_code: int | None) -> str:
    if status_code is None:
        return "the server reported an error in the middle of the reply; check the server's logs"
    if status_code in (401, 403):
        return "the server refused the credentials; check `api_key` (and that it belongs to this server)"
    if status_code == 404:
        return "check `base_url` (OpenAI-compatible servers usually end in /v1) and the model name"
    if status_code == 408:
        return "the server timed out the request; retry, or raise the server's timeout"
    if status_code == 413:
        return "the request body is larger than the server accepts; shrink images and long tool outputs"
    if status_code == 429:
        return (
            "the server is rate limiting this client and the retries ran out; lower the request rate or raise"
            " `max_retries`"
        )
    if status_code >= 500:
        return (
            "the server failed on this request; its message above says why (a server that fails the same way again"
            " refuses something in the request itself), else retry later or check the server's logs"
        )
    return "the server rejected the request; check the model name and the request parameters"


def classify_error(
    status_code: int | None,
    body: str | bytes | Mapping[str, Any] | Sequence[Any] | None,
    *,
    url: str | None,
) -> UpstreamError:
    """The error to raise for a provider's error reply.

    Args:
        status_code: The HTTP status, or ``None`` for an error event inside a stream.
        body: The response body: text, bytes, or already decoded JSON.
        url: The URL the request went to (named in the message).

    Returns:
        A `ContextOverflowError` (with ``limit`` and ``requested`` when the provider gave them)
        when the body says the prompt is too long for the window; an `UpstreamError` otherwise.
    """
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str):
        raw_text, data = body, _loads(body)
    elif body is None:
        raw_text, data = "", None
    else:
        raw_text, data = json.dumps(body, ensure_ascii=False), body
    message, error = _provider_message(data)
    if not message:
        message = raw_text.strip()
    detail = message if len(message) <= _MAX_DETAIL else message[:_MAX_DETAIL] + "..."
    where = url or "the model server"
    status = f"HTTP {status_code}" if status_code is not None else "an error"
    haystack = f"{message}\n{error.get('type', '')}\n{error.get('code', '')}\n{raw_text}"
    if is_context_overflow(haystack):
        limit, requested = _extract_numbers(f"{message}\n{raw_text}", error)
        sizes = ", ".join(f"{name}={value}" for name, value in (("requested", requested), ("limit", limit)) if value)
        return ContextOverflowError(
            f"{where} returned {status}: the prompt does not fit the model's context window"
            f"{f' ({sizes})' if sizes else ''}: {detail!r}; compact the conversation (or use a model with a"
            " larger window) and retry.",
            url=url,
            status_code=status_code,
            limit=limit,
            requested=requested,
        )
    return UpstreamError(
        f"{where} returned {status}: {detail!r}; {_hint(status_code)}.", url=url, status_code=status_code
    )


def transport_error(
    url: str,
    kind: Literal["connect", "timeout", "disconnect"],
    detail: str,
    *,
    timeout: float | None = None,
    stream: bool = False,
) -> UpstreamError:
    """The error for a request that got no HTTP reply at all (``status_code`` is ``None``).

    Args:
        url: The URL the request went to.
        kind: ``"connect"`` when the server could not be reached, ``"timeout"`` when it did not
            answer in time, ``"disconnect"`` when it closed the connection mid-reply.
        detail: The transport's own description of the failure.
        timeout: The timeout in seconds, named in the message of a timeout.
        stream: The disconnect ended a streamed reply (the error is then a `StreamInterrupted`).
    """
    if kind == "connect":
        message = (
            f"Cannot reach the model server at {url} ({detail}); check that the server is running and listening"
            " there and that `base_url` is right (Ollama: http://localhost:11434/v1, vLLM: http://localhost:8000/v1,"
            " llama.cpp: http://localhost:8080/v1)."
        )
    elif kind == "timeout":
        within = f" within {timeout:g}s" if timeout is not None else " in time"
        message = (
            f"The model server at {url} did not answer{within} ({detail}); raise `timeout`, lower `max_tokens`,"
            " or check the server's load."
        )
    else:
        message = (
            f"The model server at {url} closed the connection before the reply was complete ({detail}); check the"
            " server's logs (it may have crashed or run out of memory, or rejected the prompt as too long)."
        )
        if stream:
            return StreamInterrupted(message, url=url, status_code=None)
    return UpstreamError(message, url=url, status_code=None)

"""The upstream's reply as the session records it: from a JSON body, or assembled from stream chunks."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..usage import RequestUsage
from .bounds import ReplyLimits, event_too_large
from .jsonio import loads as load_json

__all__ = ["ChunkAssembler", "SSEFramer", "believable", "usage_of"]


MAX_TOKENS_REPORTED = 10**12
"""Largest token count believed; a count past it (or negative) makes the whole usage unreported."""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bad(value: Any) -> bool:
    count = _int(value)
    return count is not None and not 0 <= count <= MAX_TOKENS_REPORTED


def usage_of(data: Any) -> RequestUsage:
    """`RequestUsage` of an OpenAI ``usage`` object (unreported when it has no token counts, or a count
    that cannot be true: negative, or past `MAX_TOKENS_REPORTED`)."""
    if not isinstance(data, Mapping):
        return RequestUsage.unreported()
    prompt, completion = _int(data.get("prompt_tokens")), _int(data.get("completion_tokens"))
    if prompt is None and completion is None:
        return RequestUsage.unreported()
    details = data.get("prompt_tokens_details")
    cached_raw = details.get("cached_tokens") if isinstance(details, Mapping) else None
    if _bad(prompt) or _bad(completion) or _bad(cached_raw):
        return RequestUsage.unreported()
    cached = _int(cached_raw)
    return RequestUsage(input_tokens=prompt or 0, output_tokens=completion or 0, cache_read_tokens=cached or 0)


def believable(usage: RequestUsage) -> RequestUsage:
    """``usage`` as reported, or unreported when a count cannot be true (negative, or past
    `MAX_TOKENS_REPORTED`), whichever dialect read it."""
    counts = (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens)
    if usage.reported and not all(0 <= c <= MAX_TOKENS_REPORTED for c in counts):
        return RequestUsage.unreported()
    return usage


class SSEFramer:
    """Splits a byte stream into SSE events, each with its raw bytes (forwarded as is) and its data.

    Each byte is searched once for the blank line that ends an event (an event arriving in many small
    chunks costs its length, not its length squared), and an unfinished event longer than
    ``max_event`` bytes raises.
    """

    def __init__(self, max_event: int = ReplyLimits.max_event_bytes) -> None:
        self._buffer = bytearray()
        self._searched = 0
        """Bytes of the buffer known to hold no blank line (less one, which may start one)."""
        self.max_event = max_event

    def feed(self, chunk: bytes) -> Iterator[tuple[bytes, str | None]]:
        """Complete events in ``chunk`` (with what came before): (raw bytes, joined data or None for a comment).

        Raises:
            ServiceError: 502 when an unfinished event passes ``max_event`` bytes.
        """
        self._buffer += chunk
        start = 0
        buffer = self._buffer
        while True:
            end, width = _blank_line(buffer, max(start, self._searched))
            if end < 0:
                break
            raw = bytes(buffer[start:end]).replace(b"\r\n", b"\n") + b"\n\n"
            start = end + width
            self._searched = start
            yield raw, _data(raw)
        if start:
            del buffer[:start]
            self._searched = 0
        self._searched = max(self._searched, len(buffer) - 3)
        if len(buffer) > self.max_event:
            raise event_too_large(self.max_event)

    def rest(self) -> tuple[bytes, str | None] | None:
        """An event the stream ended in without its blank line."""
        raw = bytes(self._buffer).replace(b"\r\n", b"\n")
        self._buffer = bytearray()
        self._searched = 0
        if not raw.strip():
            return None
        return raw + b"\n\n", _data(raw)


def _blank_line(buffer: bytearray, start: int) -> tuple[int, int]:
    """Where the first blank line at or after ``start`` begins, and its width (``\n\n``, ``\r\n\r\n``)."""
    lf = buffer.find(b"\n\n", start)
    crlf = buffer.find(b"\r\n\r\n", start)
    if crlf >= 0 and (lf < 0 or crlf < lf):
        return crlf, 4
    return lf, 2


def _data(raw: bytes) -> str | None:
    lines = [line for line in raw.decode("utf-8", "replace").split("\n") if line.startswith("data:")]
    if not lines:
        return None
    return "\n".join(line[5:].removeprefix(" ") for line in lines)


class ChunkAssembler:
    """Folds ``chat.completion.chunk`` objects into one assistant message dict and the usage."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage = RequestUsage.unreported()
        self.finish_reason: str | None = None
        self.done = False
        self.error: Any = None
        """The error object an upstream sent inside the stream, if any."""

    def feed(self, data: str) -> None:
        """Take one event's data (a JSON chunk, ``[DONE]``, or an error object)."""
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            # the bounded reader: an event nested thousands deep is skipped like any unreadable one
            chunk = load_json(data.encode("utf-8", "surrogatepass"))
        except ValueError:
            return
        if not isinstance(chunk, Mapping):
            return
        if "error" in chunk:
            self.error = chunk
            return
        if chunk.get("usage") is not None:
            usage = usage_of(chunk["usage"])
            if usage.reported:
                self.usage = usage
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, Mapping):
                self._delta(delta)
            if isinstance(choice.get("finish_reason"), str):
                self.finish_reason = choice["finish_reason"]

    def _delta(self, delta: Mapping[str, Any]) -> None:
        if isinstance(delta.get("content"), str):
            self.text.append(delta["content"])
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str):
            self.reasoning.append(reasoning)
        calls = delta.get("tool_calls")
        for position, call in enumerate(calls if isinstance(calls, list) else ()):
            if not isinstance(call, Mapping):
                continue
            index = call.get("index", position)
            state = self.calls.setdefault(index if isinstance(index, int) else position, {"arguments": []})
            if call.get("id"):
                state.setdefault("id", call["id"])
            function = call.get("function")
            if isinstance(function, Mapping):
                if function.get("name"):
                    state.setdefault("name", function["name"])
                if isinstance(function.get("arguments"), str):
                    state["arguments"].append(function["arguments"])

    @property
    def complete(self) -> bool:
        """The upstream said the reply is complete (end marker or a finish reason)."""
        return self.done or self.finish_reason is not None

    def message(self) -> dict[str, Any]:
        """The assembled assistant message as an OpenAI chat message dict."""
        out: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.calls:
            out["tool_calls"] = [
                {
                    "id": state.get("id") or f"call_{index}",
                    "type": "function",
                    "function": {"name": state.get("name", ""), "arguments": "".join(state["arguments"])},
                }
                for index, state in sorted(self.calls.items())
            ]
        elif out["content"] is None:
            out["content"] = ""
        return out

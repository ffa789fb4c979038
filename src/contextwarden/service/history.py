"""Which messages of a re-sent history are new: clients send the whole conversation every time.

Each message is reduced to a key of what the model sees (role, text, tool calls, the call a
result answers), so the echo of a stored reply matches it whatever extra fields the client's SDK
adds (``refusal``, ``annotations``...). The new messages are those after the last place where the
client's history ends like the transcript does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MessageKey", "message_key", "new_from"]

MessageKey = tuple[str, str, tuple[tuple[str, str, str], ...], str]
"""(role, text, tool calls as (id, name, arguments), tool_call_id)."""

_OVERLAP = 3
"""Messages compared where the client's history meets the transcript's end (one would match a repeated "ok")."""


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        pieces: list[str] = []
        for part in content:
            if isinstance(part, Mapping):
                if isinstance(part.get("text"), str):
                    pieces.append(part["text"])
                elif isinstance(part.get("image_url"), Mapping):
                    pieces.append(str(part["image_url"].get("url", "")))
                else:
                    pieces.append(json.dumps(part, sort_keys=True, default=str))
            elif isinstance(part, str):
                pieces.append(part)
        return "".join(pieces)
    return json.dumps(content, sort_keys=True, default=str)


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        try:
            return json.dumps(json.loads(value), sort_keys=True)
        except ValueError:
            return value
    return json.dumps(value, sort_keys=True, default=str)


def message_key(message: Mapping[str, Any]) -> MessageKey:
    """The key of one OpenAI chat message dict (what the model sees of it)."""
    role = str(message.get("role", ""))
    if role == "developer":
        role = "system"  # the same instruction, renamed by some converters
    calls: list[tuple[str, str, str]] = []
    raw_calls = message.get("tool_calls")
    if isinstance(raw_calls, Sequence) and not isinstance(raw_calls, str):
        for call in raw_calls:
            if not isinstance(call, Mapping):
                continue
            inner = call.get("function")
            function: Mapping[str, Any] = inner if isinstance(inner, Mapping) else call
            calls.append(
                (str(call.get("id", "")), str(function.get("name", "")), _arguments(function.get("arguments")))
            )
    return role, _text(message.get("content")), tuple(calls), str(message.get("tool_call_id") or "")


def new_from(client: Sequence[Mapping[str, Any]], transcript: Sequence[MessageKey]) -> int:
    """Index of the first new message of ``client`` (a re-sent history) given the keys of the stored ``transcript``.

    The last position where the client's history ends with the transcript's last messages (up to
    three compared) is where the new messages begin. When the client's history never meets the
    transcript's end (it edited or dropped messages), the new messages are its trailing ones that
    the transcript does not have. Keys are computed from the end and only as far as needed, so a
    long history costs only its new messages.
    """
    if not transcript:
        return 0
    keys: dict[int, MessageKey] = {}

    def key(index: int) -> MessageKey:
        found = keys.get(index)
        if found is None:
            found = keys[index] = message_key(client[index])
        return found

    last = transcript[-1]
    for end in range(len(client), 0, -1):
        if key(end - 1) != last:
            continue
        width = min(end, len(transcript), _OVERLAP)
        if all(key(end - width + i) == transcript[len(transcript) - width + i] for i in range(width)):
            return end
    known = set(transcript)
    start = len(client)
    while start > 0 and key(start - 1) not in known:
        start -= 1
    return start

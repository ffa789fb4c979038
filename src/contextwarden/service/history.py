"""Which messages of a re-sent history are new: clients send the whole conversation every time.

Each message is reduced to a key of what the model sees (role, text, tool calls, the call a
result answers), so the echo of a stored reply matches it whatever extra fields the client's SDK
adds (``refusal``, ``annotations``...) or the whitespace it trims, and a reply re-sent as a system
message matches the stored reply (`same_message`). The new messages are those
after the last place where the client's history ends like the transcript does.

A history that does not continue the transcript is never merged into it: `continuation` tells a
continuation (and where its new messages start) from a retry of a request already answered
(the transcript holds its reply), a conversation that starts differently (another system prompt
or first message: a title generator, a summarizer, a sub-agent sharing the session header), and a
history that diverges from the transcript further on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Continuation", "MessageKey", "continuation", "head_digest", "message_key", "new_from", "same_message"]

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
    # a client may re-send a reply with its whitespace trimmed or re-wrapped: the same message to the model
    text = " ".join(_text(message.get("content")).split())
    return role, text, tuple(calls), str(message.get("tool_call_id") or "")


def same_message(sent: MessageKey, stored: MessageKey) -> bool:
    """Whether the client's message ``sent`` is the stored message ``stored``.

    Keys are equal, or the client re-sent a stored assistant reply (without tool calls) as a system
    message: some clients fold the model's earlier answers into system notes when they re-send the
    history, and the model's reply is still the one the transcript holds.
    """
    return sent == stored or (
        sent[0] == "system" and stored[0] == "assistant" and not stored[2] and sent[1:] == stored[1:]
    )


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
        if not same_message(key(end - 1), last):
            continue
        width = min(end, len(transcript), _OVERLAP)
        if all(same_message(key(end - width + i), transcript[len(transcript) - width + i]) for i in range(width)):
            return end
    known = set(transcript)
    replies = {k[1] for k in transcript if k[0] == "assistant" and not k[2]}
    start = len(client)
    while (
        start > 0
        and key(start - 1) not in known
        and not (key(start - 1)[0] == "system" and key(start - 1)[1] in replies)
    ):
        start -= 1
    return start


READ_BACK = "read_context"
"""The read-back tool the proxy answers itself: its calls and results are the proxy's, never the client's."""

_HEAD_LIMIT = 4
"""Leading messages (system prompts, then the first user message) that name a conversation."""


@dataclass(frozen=True, kw_only=True)
class Continuation:
    """How a request's history relates to the session's transcript."""

    kind: Literal["extends", "retry", "other", "diverged"]
    """``extends``: new messages from ``start``; ``retry``: a request whose reply the transcript's last
    ``drop`` messages hold; ``other``: another conversation (its first messages differ);
    ``diverged``: same start, but the history departs from the transcript further on."""
    start: int = 0
    """For ``extends``: the index of the first new message of the request."""
    drop: int = 0
    """For ``retry``: the transcript's trailing messages that are the stored reply."""


def _head(keys: Sequence[MessageKey]) -> list[MessageKey]:
    head: list[MessageKey] = []
    for key in keys[:_HEAD_LIMIT]:
        head.append(key)
        if key[0] == "user":
            break
    return head


def head_digest(client: Sequence[Mapping[str, Any]]) -> str:
    """A short digest of the conversation's first messages (a session id suffix for a side conversation)."""
    head = _head([message_key(m) for m in client[:_HEAD_LIMIT]])
    return hashlib.sha256(json.dumps(head).encode()).hexdigest()[:12]


@dataclass(frozen=True, kw_only=True)
class Rewrite:
    """Where a history that departs from the transcript first differs from it."""

    digest: str
    """A digest of the client's history up to and with its first differing message (a session id suffix)."""
    shorter: bool
    """The history is shorter than the transcript: the client rewrote it (its own compaction, an edit)."""


def rewrite(client: Sequence[Mapping[str, Any]], transcript: Sequence[MessageKey]) -> Rewrite | None:
    """The rewrite a departing history ``client`` makes of ``transcript`` (None: it departs nowhere, a prefix).

    Requests that follow a client's rewrite share the history up to its first differing message
    (the summary a compaction put in place of the steps), so its digest names the rewrite for all
    of them.
    """
    keys = client_side(transcript)
    for index, message in enumerate(client[: len(keys)]):
        if not same_message(message_key(message), keys[index]):
            head = [message_key(m) for m in client[: index + 1]]
            digest = hashlib.sha256(json.dumps(head).encode()).hexdigest()[:12]
            return Rewrite(digest=digest, shorter=len(client) < len(keys))
    return None


def _read_back(key: MessageKey, calls: set[str]) -> bool:
    """The proxy's own read-back message: a turn that called it (with or without the client's tools: the
    proxy never relays such a turn), or a result answering one of that turn's calls."""
    if key[2] and any(name == READ_BACK for _, name, _ in key[2]):
        calls.update(call_id for call_id, _, _ in key[2])
        return True
    return key[0] == "tool" and key[3] in calls


def client_side(transcript: Sequence[MessageKey]) -> Sequence[MessageKey]:
    """The transcript as the client knows it: without the read-back rounds the proxy answered itself."""
    if not any(name == READ_BACK for key in transcript for _, name, _ in key[2]):
        return transcript
    calls: set[str] = set()
    return [key for key in transcript if not _read_back(key, calls)]


def continuation(client: Sequence[Mapping[str, Any]], transcript: Sequence[MessageKey]) -> Continuation:
    """How the re-sent history ``client`` relates to the stored ``transcript`` (keys of each message).

    Only the first messages and the end of the history are keyed, so a long history costs only
    its new messages.
    """
    if not transcript:
        return Continuation(kind="extends", start=0)
    transcript = client_side(transcript)
    head = _head(transcript)
    sent = [message_key(m) for m in client[: len(head)]]
    if len(sent) != len(head) or not all(same_message(a, b) for a, b in zip(sent, head, strict=True)):
        return Continuation(kind="other")
    start = _extension(client, transcript)
    if start is not None:
        return Continuation(kind="extends", start=start)
    # a retry: the history ends where the transcript did before the reply to it was stored
    drop = 0
    while drop < len(transcript) - 1 and transcript[-1 - drop][0] == "assistant":
        drop += 1
        if _extension(client, transcript[:-drop], exact=True) is not None:
            return Continuation(kind="retry", drop=drop)
    return Continuation(kind="diverged")


def _extension(
    client: Sequence[Mapping[str, Any]], transcript: Sequence[MessageKey], *, exact: bool = False
) -> int | None:
    """Where the new messages of ``client`` start, if it continues ``transcript`` (``exact``: ends at it).

    The client re-sends the whole conversation, so the transcript ends where the client's history
    has as many messages: another place that ends the same way is a repeated message (a second
    "ok"), not the transcript's end. The last messages up to there are compared.
    """
    end = len(transcript)
    if end > len(client) or (exact and end != len(client)):
        return None
    width = min(end, _OVERLAP)
    if all(same_message(message_key(client[end - width + i]), transcript[end - width + i]) for i in range(width)):
        return end
    return None

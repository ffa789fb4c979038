"""A paid upstream reply is kept: the assistant message the service stores for it, repaired if need be.

Upstreams send replies that `Session.add` would refuse as they are: tool-call arguments cut off at
``finish_reason=length`` or nested past the library's depth bound, a call id used twice, missing
or sent as a number, arguments sent as an object, a lone surrogate in the text. The service keeps
such a reply the way `Session.complete` does (`contextwarden._replies.repair_reply`): unusable
arguments become ``{}`` with the text the model wrote kept in the message's
``extra["contextwarden"]``, duplicate or missing ids get fresh ones, lone surrogates become U+FFFD.

Unlike `Session.complete`, the service stores no error result for an unusable call: behind the
proxy the client runs the tools and sends the results itself.

The client always gets the reply exactly as the upstream sent it; only the stored copy is repaired.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._json import scrub
from .._replies import repair_reply
from ..adapters import to_messages
from ..exceptions import ContextWardenError, MessageError
from ..llm._openai_format import message_from_openai
from ..llm.base import FinishReason, ModelResponse
from ..messages import Message, TextPart

__all__ = ["chat_reply_messages", "kept_messages", "kept_reply", "normalized_openai_message"]

_FINISH: dict[str, FinishReason] = {
    "length": "length",
    "stop": "stop",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
}


def _call_id(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return ""


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def normalized_openai_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A chat-completions reply message with each field in the type the reader expects.

    Ids become strings (missing ones empty, for the repair to fill), arguments become JSON text,
    names strings; content that is neither text nor a list of parts becomes its JSON text.
    """
    out: dict[str, Any] = {"role": "assistant"}
    content = message.get("content")
    if content is None or isinstance(content, str):
        out["content"] = content
    elif isinstance(content, list) and all(isinstance(p, Mapping) for p in content):
        out["content"] = [
            {**p, "type": "text", "text": p["text"] if isinstance(p.get("text"), str) else ""} for p in content
        ]
    else:
        out["content"] = _arguments(content)
    for field in ("reasoning_content", "reasoning"):
        if isinstance(message.get(field), str):
            out[field] = message[field]
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        kept: list[dict[str, Any]] = []
        for call in calls:
            if not isinstance(call, Mapping):
                continue
            inner = call.get("function")
            function: Mapping[str, Any] = inner if isinstance(inner, Mapping) else {}
            name = function.get("name")
            kept.append(
                {
                    "id": _call_id(call.get("id")),
                    "type": "function",
                    "function": {
                        "name": name if isinstance(name, str) and name else "unnamed_tool",
                        "arguments": _arguments(function.get("arguments")),
                    },
                }
            )
        if kept:
            out["tool_calls"] = kept
    return out


def kept_messages(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with each assistant reply repaired as `Session.complete` repairs it (others unchanged)."""
    out: list[Message] = []
    for message in messages:
        if message.role == "assistant":
            repaired, _results = repair_reply(ModelResponse(message=message))
            message = repaired.message
        out.append(message)
    return out


def chat_reply_messages(message: Mapping[str, Any], finish_reason: str | None = None) -> list[Message]:
    """The messages to store for a chat-completions reply ``message``: as the adapter reads it, or, when
    it refuses the shape (arguments as an object, a numeric id), normalized and repaired."""
    try:
        return to_messages([dict(message)], format="openai")
    except MessageError:
        return [kept_reply(message, finish_reason)]


def kept_reply(message: Mapping[str, Any], finish_reason: str | None) -> Message:
    """The assistant message to store for a chat-completions reply (repaired when `add` would refuse it)."""
    normalized = normalized_openai_message(message)
    try:
        parsed = message_from_openai(normalized)
    except ContextWardenError:  # a shape the reader still refuses: keep the text, as text
        parsed = Message(role="assistant", parts=(TextPart(text=scrub(json.dumps(normalized, default=str))),))
    response = ModelResponse(message=parsed, finish_reason=_FINISH.get(finish_reason or ""))
    repaired, _results = repair_reply(response)
    return repaired.message

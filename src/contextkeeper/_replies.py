"""What a session does with a model's reply and with a model's errors (shared by both session twins).

* `repair_reply`: a reply whose tool-call arguments are not a valid JSON object is kept, not
  dropped: the call gets ``{}`` as its arguments (the raw text stays in the message's
  ``extra["contextkeeper"]``) and an error result the model can react to.
* `replay_events`: a reply fetched without streaming, as the events ``stream()`` yields.
* `overflow_unresolved`: the error raised instead of resending a view emergency compaction could
  not shrink.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from .exceptions import ContextOverflowError, OverflowUnresolved
from .llm.base import (
    InvalidToolCall,
    ModelResponse,
    ResponseDone,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
)
from .messages import Message, TextPart, ThinkingPart, ToolCall

__all__ = ["META_KEY", "overflow_unresolved", "replay_events", "repair_reply"]

META_KEY = "contextkeeper"
"""The key of `Message.extra` where the library marks messages it repaired or wrote."""


def _arguments_problem(arguments: str) -> str | None:
    """Why tool-call arguments cannot be used, or None when they are a JSON object (or empty)."""
    if not arguments:
        return None
    try:
        value = json.loads(arguments)
    except ValueError as exc:
        return f"{exc.msg} at char {exc.pos}" if isinstance(exc, json.JSONDecodeError) else str(exc)
    except RecursionError:
        return "nested too deeply"
    if not isinstance(value, dict):
        return f"a JSON {type(value).__name__}, not an object"
    return None


def _error_text(call: InvalidToolCall, cut_off: bool) -> str:
    hint = " The reply hit its length limit: keep the arguments shorter." if cut_off else ""
    return (
        f"Error: the arguments of this `{call.name}` call were not valid JSON ({call.error}); the tool was not run."
        f" Call the tool again with complete, valid JSON arguments.{hint}"
    )


def repair_reply(response: ModelResponse) -> tuple[ModelResponse, list[Message]]:
    """The reply as a session keeps it, and the messages to append for it.

    A reply whose calls all have usable arguments is returned unchanged, with its message as the
    only message to append. Otherwise each bad call's arguments become ``{}`` (the text as the
    model wrote it goes to ``extra["contextkeeper"]["invalid_tool_calls"]``), an error result
    answers it, and the returned reply lists it in ``invalid_tool_calls`` (its ``tool_calls``
    leave it out: the caller has nothing to run).
    """
    message = response.message
    invalid: list[InvalidToolCall] = []
    parts: list[Any] = []
    for part in message.parts:
        if isinstance(part, ToolCall):
            problem = _arguments_problem(part.arguments)
            if problem is not None:
                invalid.append(
                    InvalidToolCall(call_id=part.call_id, name=part.name, arguments=part.arguments, error=problem)
                )
                part = replace(part, arguments="{}")
        parts.append(part)
    if not invalid:
        return response, [message]
    marks = dict(message.extra.get(META_KEY) or {})
    marks["invalid_tool_calls"] = [
        {"call_id": c.call_id, "name": c.name, "arguments": c.arguments, "error": c.error} for c in invalid
    ]
    kept = replace(message, parts=tuple(parts), extra={**message.extra, META_KEY: marks})
    cut_off = response.finish_reason == "length"
    results = [
        Message.tool_result(
            c.call_id,
            _error_text(c, cut_off),
            name=c.name,
            is_error=True,
            extra={META_KEY: {"answers_invalid_call": c.call_id}},
        )
        for c in invalid
    ]
    return replace(response, message=kept, invalid_tool_calls=(*response.invalid_tool_calls, *invalid)), [
        kept,
        *results,
    ]


def replay_events(response: ModelResponse) -> list[StreamEvent]:
    """The events a stream would have given for ``response`` (one delta per part, then `ResponseDone`)."""
    events: list[StreamEvent] = []
    for part in response.message.parts:
        if isinstance(part, ThinkingPart) and part.text and not part.redacted:
            events.append(ThinkingDelta(text=part.text))
        elif isinstance(part, TextPart) and part.text:
            events.append(TextDelta(text=part.text))
    for index, call in enumerate(response.message.tool_calls):
        events.append(ToolCallDelta(index=index, call_id=call.call_id, name=call.name, arguments_delta=call.arguments))
    events.append(ResponseDone(response=response))
    return events


def overflow_unresolved(session_id: str, cause: ContextOverflowError, view_tokens: int) -> OverflowUnresolved:
    """The error for a view that is still too long for the server and that compaction cannot shrink."""
    sizes = ", ".join(f"{k}={v}" for k, v in (("limit", cause.limit), ("requested", cause.requested)) if v)
    return OverflowUnresolved(
        f"session {session_id!r}: {cause.url or 'the model server'} says the prompt is too long"
        f"{f' ({sizes})' if sizes else ''}, and emergency compaction could not make the view any smaller"
        f" (view_tokens={view_tokens}); the same view is not sent again. What compaction may not touch (system"
        " prompt, pinned messages, the current request and its tool results) is too large for this server:"
        " shorten it, unpin messages, or use a server with a larger window.",
        url=cause.url,
        status_code=cause.status_code,
        limit=cause.limit,
        requested=cause.requested,
        view_tokens=view_tokens,
    )

"""What a session does with a model's reply and with a model's errors (shared by both session twins).

* `repair_reply`: a paid reply `add()` would refuse is kept, not dropped: a call whose arguments
  are not a usable JSON object gets ``{}`` as its arguments (the raw text stays in the message's
  ``extra["contextwarden"]``) and an error result the model can react to; duplicate call ids are
  renamed; lone surrogates become U+FFFD.
* `reply_events`: a reply fetched without streaming, as the events ``stream()`` yields.
* `overflow_unresolved`: the error raised instead of resending a view emergency compaction could
  not shrink.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ._json import BadJSON, has_lone_surrogate, loads, lone_surrogate_path, may_decode_to_surrogate, scrub
from .exceptions import ContextOverflowError, OverflowUnresolved
from .llm._openai_format import new_call_id
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

__all__ = ["META_KEY", "overflow_unresolved", "repair_reply", "reply_events"]

META_KEY = "contextwarden"
"""The key of `Message.extra` where the library marks messages it repaired or wrote."""


def _arguments_problem(arguments: str) -> str | None:
    """Why tool-call arguments cannot be used (what `add()` would refuse), or None.

    Empty arguments mean "no arguments" and are fine; anything else must be a JSON object within
    the library's depth bound, with no lone surrogate (raw or escaped).
    """
    if not arguments:
        return None
    if has_lone_surrogate(arguments):
        return "holds a lone surrogate character"
    try:
        value = loads(arguments)
    except BadJSON as exc:
        return exc.problem
    if not isinstance(value, dict):
        return f"is a JSON {_JSON_TYPES.get(type(value), type(value).__name__)}, not an object"
    if may_decode_to_surrogate(arguments) and lone_surrogate_path(value) is not None:
        return "holds an escaped lone surrogate (an unpaired \\ud800-\\udfff escape)"
    return None


_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _error_text(call: InvalidToolCall, cut_off: bool) -> str:
    hint = " The reply hit its length limit: keep the arguments shorter." if cut_off else ""
    return (
        f"Error: the arguments of this `{call.name}` call were not valid JSON arguments: the text {call.error};"
        f" the tool was not run. Call the tool again with complete, valid JSON arguments.{hint}"
    )


def _usable_id(call_id: str, seen: set[str]) -> bool:
    return bool(call_id) and call_id not in seen and not has_lone_surrogate(call_id)


def repair_reply(response: ModelResponse) -> tuple[ModelResponse, list[Message]]:
    """The reply as a session keeps it, and the messages to append for it.

    A reply `add()` accepts as it is is returned unchanged, with its message as the only message
    to append. Otherwise it is made acceptable without losing what the model wrote:

    * a call whose arguments are not a usable JSON object gets ``{}`` (the text as the model
      wrote it goes to ``extra["contextwarden"]["invalid_tool_calls"]``) and an error result that
      answers it; the returned reply lists it in ``invalid_tool_calls`` (and its ``tool_calls``
      leave it out: the caller has nothing to run);
    * a call id used twice in the reply (or empty) is replaced by a fresh one (the original is
      kept in ``extra["contextwarden"]["renamed_call_ids"]``);
    * lone surrogates (which no store can hold) in text, names and kept arguments become U+FFFD.
    """
    message = response.message
    invalid: list[InvalidToolCall] = []
    renamed: dict[str, str] = {}
    seen: set[str] = set()
    parts: list[Any] = []
    scrubbed = False
    for part in message.parts:
        if isinstance(part, TextPart | ThinkingPart) and has_lone_surrogate(part.text):
            part, scrubbed = replace(part, text=scrub(part.text)), True
        elif isinstance(part, ToolCall):
            if not _usable_id(part.call_id, seen):
                fresh = new_call_id()
                renamed[fresh] = scrub(part.call_id)
                part = replace(part, call_id=fresh)
            seen.add(part.call_id)
            if has_lone_surrogate(part.name):
                part, scrubbed = replace(part, name=scrub(part.name)), True
            problem = _arguments_problem(part.arguments)
            if problem is not None:
                invalid.append(
                    InvalidToolCall(call_id=part.call_id, name=part.name, arguments=part.arguments, error=problem)
                )
                part = replace(part, arguments="{}")
        parts.append(part)
    if not (invalid or renamed or scrubbed):
        return response, [message]
    marks = dict(message.extra.get(META_KEY) or {})
    if invalid:
        marks["invalid_tool_calls"] = [
            {"call_id": c.call_id, "name": c.name, "arguments": scrub(c.arguments), "error": c.error} for c in invalid
        ]
    if renamed:
        marks["renamed_call_ids"] = renamed
    if scrubbed:
        marks["replaced_lone_surrogates"] = True
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
    repaired = replace(response, message=kept, invalid_tool_calls=(*response.invalid_tool_calls, *invalid))
    return repaired, [kept, *results]


def reply_events(response: ModelResponse) -> list[StreamEvent]:
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

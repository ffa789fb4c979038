"""OpenAI Chat Completions message dicts <-> `Message`.

Reads ``{"role", "content", "name", "tool_calls", "tool_call_id"}`` dicts for the roles system,
developer, user, assistant and tool. Content is a string or a list of parts: ``text`` parts
become `TextPart`, ``image_url`` parts `ImagePart` (with their ``detail``); other part types
(``input_audio``, ``file``, ``refusal``) are kept as they are and written back in place.
Assistant ``tool_calls`` (``{"id", "type": "function", "function": {"name", "arguments"}}``, or
the flat ``{"id", "name", "arguments"}`` some frameworks write) become `ToolCall` parts; a tool
message's ``tool_call_id`` links it to its call, and its ``name`` defaults to the call's tool
name. An ``id`` key becomes the message id. Every other key (``refusal``, ``audio``,
``reasoning_content``...) is kept and written back, so a round trip returns equal dicts.

The flat call form and a ``name`` on tool messages are remembered as such, so they are written
back in that form even after compaction rewrote the message.

Written back without hints (a message built in code or read from another format), a message
gets the plain form: string content when it is one text, ``null`` content for an assistant
message that only calls tools, no ``name`` on tool messages, and no thinking (Chat Completions
has no field for it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from ..exceptions import MessageError
from ..messages import ROLES, ImagePart, Message, Part, Role, TextPart, ToolCall, check_message
from . import _common as c

__all__ = ["FORMAT", "from_messages", "to_messages"]

FORMAT = "openai"
_MAPPED = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "id"})
_DETAILS = ("auto", "low", "high")
_EXAMPLE = "{'role': 'user', 'content': 'hi'}"


def to_messages(items: Sequence[Any]) -> list[Message]:
    """Convert Chat Completions message dicts to messages (the input is not modified).

    Raises:
        MessageError: an item that is not a message dict, an unknown or legacy role, content
            that is not text where text is required, arguments that are not JSON, lone surrogates.
    """
    names: dict[str, str] = {}
    out: list[Message] = []
    for i, item in enumerate(items):
        if isinstance(item, Message):
            out.append(check_message(item, index=i))
            names.update((call.call_id, call.name) for call in item.tool_calls)
        else:
            out.append(_parse(item, i, names))
    return out


def from_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Convert messages to Chat Completions dicts (fresh dicts; the messages are not modified)."""
    return [c.render(m, FORMAT, _render) for m in messages]


# --- reading ----------------------------------------------------------------------------------
def _parse(item: Any, i: int, names: dict[str, str]) -> Message:
    src = c.require_mapping(item, i, "an OpenAI chat message", _EXAMPLE)
    role = src.get("role")
    if role is None:
        raise MessageError(
            f"item {i}: a dict without `role` is not an OpenAI chat message (keys: {sorted(map(str, src))[:8]}); "
            f"pass messages like {_EXAMPLE}.",
            index=i,
            field="role",
        )
    if role == "function":
        raise c.bad(
            i,
            "role",
            "is the legacy 'function' role",
            "send tool results as {'role': 'tool', 'tool_call_id': <call id>, 'content': ...} answering an "
            "assistant `tool_calls` entry",
        )
    if not isinstance(role, str) or role not in ROLES:
        raise c.bad(i, "role", f"is unknown ({c.show(role)})", f"use one of {sorted(ROLES)}")
    # Servers that speak both dialects (llama-cpp-python's chatml-function-calling) send the legacy
    # `function_call` beside the `tool_calls` it duplicates: the twin is dropped, a lone one refused.
    if src.get("function_call") is not None and not src.get("tool_calls"):
        raise c.bad(
            i,
            "function_call",
            "is the legacy function-calling field",
            "use `tool_calls` [{'id', 'type': 'function', 'function': {'name', 'arguments'}}]",
        )
    if src.get("function_call") is not None:
        src = {key: value for key, value in src.items() if key != "function_call"}
    hints: c.JSONDict = {}
    parts: list[Part] = []
    content = src.get("content")
    if isinstance(content, str):
        if c.check_text(content, i, "content"):
            parts.append(TextPart(text=content))
    elif isinstance(content, list):
        hints["shape"] = "list"
        raw = _parse_parts(content, i, parts)
        if raw:
            hints["raw"] = raw
    elif content is not None:
        raise c.bad(
            i, "content", f"must be a string, a list of content parts or null, got {c.describe(content)}", "fix it"
        )
    tool_calls = src.get("tool_calls")
    if tool_calls is not None:
        if role != "assistant":
            raise c.bad(i, "tool_calls", f"is set on a {c.show(role)} message", "only assistant messages call tools")
        if not isinstance(tool_calls, list):
            raise c.bad(i, "tool_calls", f"must be a list, got {c.describe(tool_calls)}", "pass a list of calls")
        for j, call in enumerate(tool_calls):
            tc = _parse_call(call, i, j)
            names[tc.call_id] = tc.name
            parts.append(tc)
        if tool_calls and all(isinstance(call, Mapping) and "function" not in call for call in tool_calls):
            hints["flat"] = True
    name = src.get("name")
    if name is not None:
        c.check_text(name, i, "name")
    tool_call_id = None
    if role == "tool":
        tool_call_id = c.check_id(src.get("tool_call_id"), i, "tool_call_id")
        if name is None:
            name = names.get(tool_call_id)
        else:
            hints["name"] = True
    kwargs: dict[str, Any] = {}
    source_id = src.get("id")
    if isinstance(source_id, str) and source_id:
        kwargs["message_id"] = source_id
        hints["id"] = True
    message = Message(role=cast(Role, role), parts=tuple(parts), tool_call_id=tool_call_id, name=name, **kwargs)
    check_message(message, index=i)
    return c.record(message, src, hints, FORMAT, _render, _MAPPED)


def _parse_parts(content: list[Any], i: int, parts: list[Part]) -> list[Any]:
    raw: list[Any] = []
    for j, part in enumerate(content):
        field = f"content[{j}]"
        if not isinstance(part, Mapping):
            raise c.bad(
                i, field, f"must be a content part dict, got {c.describe(part)}", "use {'type': 'text', 'text': ...}"
            )
        kind = part.get("type")
        if kind == "text":
            parts.append(TextPart(text=c.check_text(part.get("text"), i, f"{field}.text")))
        elif kind == "image_url":
            spec = part.get("image_url")
            url = spec.get("url") if isinstance(spec, Mapping) else spec
            detail = spec.get("detail") if isinstance(spec, Mapping) else None
            parts.append(
                ImagePart(
                    url=c.check_text(url, i, f"{field}.image_url.url"),
                    detail=detail if detail in _DETAILS else "auto",
                )
            )
        else:
            raw.append([j, c.copy_json(part)])
    return raw


def _parse_call(call: Any, i: int, j: int) -> ToolCall:
    field = f"tool_calls[{j}]"
    if not isinstance(call, Mapping):
        raise c.bad(i, field, f"must be a dict, got {c.describe(call)}", "use {'id', 'type': 'function', 'function'}")
    kind = call.get("type", "function")
    if kind != "function":
        raise c.bad(
            i, f"{field}.type", f"is {c.show(kind)}", "only function tool calls are supported; convert the call to one"
        )
    fn = call.get("function")
    if isinstance(fn, Mapping):
        name, arguments, sub = fn.get("name"), fn.get("arguments", ""), f"{field}.function"
    elif fn is None and "name" in call:
        name, arguments, sub = call.get("name"), call.get("arguments", ""), field
    else:
        raise c.bad(i, f"{field}.function", "is missing", "give {'name': ..., 'arguments': <JSON text>}")
    if isinstance(arguments, dict | list):
        raise c.bad(i, f"{sub}.arguments", "is structured data", "pass it as a JSON text (json.dumps it)")
    return ToolCall(
        call_id=c.check_id(call.get("id"), i, f"{field}.id"),
        name=c.check_text(name, i, f"{sub}.name"),
        arguments=c.check_arguments(arguments, i, f"{sub}.arguments"),
    )


# --- writing ----------------------------------------------------------------------------------
def _render(m: Message, hints: Mapping[str, Any] | None, exact: bool) -> c.JSONDict:
    out: c.JSONDict = {"role": m.role}
    blocks: list[Any] = []
    calls: list[c.JSONDict] = []
    plain = True
    flat = hints is not None and hints.get("flat")
    for p in m.parts:
        if isinstance(p, TextPart):
            blocks.append({"type": "text", "text": p.text})
        elif isinstance(p, ImagePart):
            image: c.JSONDict = {"url": p.url}
            if p.detail != "auto":
                image["detail"] = p.detail
            blocks.append({"type": "image_url", "image_url": image})
            plain = False
        elif isinstance(p, ToolCall):
            if flat:
                calls.append({"id": p.call_id, "name": p.name, "arguments": p.arguments})
            else:
                calls.append(
                    {"id": p.call_id, "type": "function", "function": {"name": p.name, "arguments": p.arguments}}
                )
        # Thinking has no Chat Completions field: it is left out.
    raw = hints.get("raw") if hints is not None and exact else None
    if raw:
        c.insert_raw(blocks, raw)
    if raw or not plain or len(blocks) > 1 or (hints is not None and hints.get("shape") == "list"):
        out["content"] = blocks
    elif blocks:
        out["content"] = blocks[0]["text"]
    else:
        out["content"] = None if calls else ""
    if m.name is not None and (m.role != "tool" or (hints is not None and hints.get("name"))):
        # Tool results carry `name` only when the source did: the API does not document it there.
        out["name"] = m.name
    if calls:
        out["tool_calls"] = calls
    if m.role == "tool":
        out["tool_call_id"] = m.tool_call_id
    if hints is not None and hints.get("id"):
        out["id"] = m.message_id
    return out

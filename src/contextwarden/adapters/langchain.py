"""LangChain messages <-> `Message` (needs ``pip install contextwarden[langchain]``).

``SystemMessage`` -> system (developer when ``additional_kwargs["__openai_role__"]`` says so),
``HumanMessage`` -> user, ``AIMessage`` / ``AIMessageChunk`` -> assistant (``tool_calls`` ->
`ToolCall`, ``args`` dumped as JSON), ``ToolMessage`` -> tool (``status="error"`` -> ``is_error``),
``ChatMessage`` -> its ``role``. Content is a string or a list of strings and blocks: ``text``,
``image_url`` and ``image`` (url or base64) blocks, ``thinking``/``reasoning`` blocks; any other
block and every other field (``additional_kwargs``, ``response_metadata``, ``usage_metadata``,
``artifact``...) is kept and given back, so ``from_messages(to_messages(x)) == x``. The message id
is LangChain's ``id`` when it has one. ``langchain_core`` is imported only when these functions run.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, cast

from pydantic import ValidationError

from ..exceptions import MessageError
from ..messages import ImagePart, Message, Part, Role, TextPart, ThinkingPart, ToolCall, check_message
from . import _common as c

__all__ = ["FORMAT", "from_messages", "is_langchain_message", "to_messages"]

FORMAT = "langchain"
_MAPPED = frozenset({"content", "tool_calls", "name", "id", "tool_call_id", "status", "type", "role"})
_DETAILS = ("auto", "low", "high")
_CLASS_ROLES = {
    "SystemMessage": "system",
    "SystemMessageChunk": "system",
    "HumanMessage": "user",
    "HumanMessageChunk": "user",
    "AIMessage": "assistant",
    "AIMessageChunk": "assistant",
    "ToolMessage": "tool",
    "ToolMessageChunk": "tool",
}
_DEFAULT_CLASS = {
    "system": "SystemMessage",
    "developer": "SystemMessage",
    "user": "HumanMessage",
    "assistant": "AIMessage",
    "tool": "ToolMessage",
}
_CHAT_ROLES = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant", "system": "system"}
_DEVELOPER = {"__openai_role__": "developer"}


def _lc() -> Any:
    try:
        import langchain_core.messages as lc_messages
    except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
        raise ImportError(
            "LangChain messages need `langchain_core`; install it with `pip install contextwarden[langchain]`."
        ) from exc
    return lc_messages


def is_langchain_message(item: Any) -> bool:
    """True for a LangChain message object (never imports LangChain itself)."""
    module = sys.modules.get("langchain_core.messages")
    return module is not None and isinstance(item, module.BaseMessage)


def to_messages(items: Sequence[Any]) -> list[Message]:
    """Convert LangChain messages to messages (the input is not modified).

    Raises:
        ImportError: ``langchain_core`` is not installed.
        MessageError: an item that is not a LangChain message, a legacy ``FunctionMessage``, a
            tool call without id, content that is not text where text is required.
    """
    lc = _lc()
    out: list[Message] = []
    for i, item in enumerate(items):
        if isinstance(item, Message):
            out.append(check_message(item, index=i))
        elif isinstance(item, lc.BaseMessage):
            out.append(_parse(item, i, lc))
        else:
            raise MessageError(
                f"item {i}: expected a LangChain message (HumanMessage, AIMessage, ToolMessage...), got "
                f"{c.describe(item)}; pass LangChain messages, or choose the right `format=` for dicts.",
                index=i,
                field="(item)",
            )
    return out


def from_messages(messages: Sequence[Message]) -> list[Any]:
    """Convert messages to LangChain message objects (new objects)."""
    lc = _lc()
    dump = _generic_dump(lc)
    out = []
    for m in messages:
        hints = c.hints_of(m, FORMAT)
        if hints is not None and (hints.get("ops") or hints.get("keep")):
            # The patch was taken on the full dump of the object: replay it there.
            data = c.render(m, FORMAT, dump)
        else:
            data = _render_data(m, hints, c.is_exact(m, hints))
        out.append(_construct(lc, data))
    return out


# --- reading ----------------------------------------------------------------------------------
def _role(item: Any, i: int) -> Role:
    cls = type(item).__name__
    if cls in _CLASS_ROLES:
        role = _CLASS_ROLES[cls]
        extra = getattr(item, "additional_kwargs", None)
        if role == "system" and isinstance(extra, Mapping) and extra.get("__openai_role__") == "developer":
            return "developer"
        return cast(Role, role)
    if cls in ("FunctionMessage", "FunctionMessageChunk"):
        raise c.bad(i, "type", "is a legacy FunctionMessage", "send tool results as ToolMessage(tool_call_id=...)")
    if cls in ("ChatMessage", "ChatMessageChunk"):
        given = getattr(item, "role", None)
        chat_role = _CHAT_ROLES.get(given) if isinstance(given, str) else None
        if chat_role is None:
            raise c.bad(i, "role", f"is unknown ({c.describe(given)})", f"use one of {sorted(_CHAT_ROLES)}")
        return cast(Role, chat_role)
    raise c.bad(i, "type", f"is an unsupported message class {cls}", "use System/Human/AI/ToolMessage")


def _parse(item: Any, i: int, lc: Any) -> Message:
    role = _role(item, i)
    cls = type(item).__name__
    try:  # an object made with model_construct may hold anything: no warnings, a typed error
        src = {**item.model_dump(warnings=False), "__class__": cls}
    except Exception as exc:
        raise c.bad(
            i, "(item)", f"cannot be read as a {cls} ({type(exc).__name__})", "build it with its constructor"
        ) from None
    c.check_depth(src, i)
    _check_valid(item, src, i)
    hints: c.JSONDict = {}
    if cls != _DEFAULT_CLASS[role]:
        hints["cls"] = cls
    parts: list[Part] = []
    content = src.get("content")
    if isinstance(content, str):
        if c.check_text(content, i, "content"):
            parts.append(TextPart(text=content))
    elif isinstance(content, list):
        hints["shape"] = "list"
        _parse_blocks(content, i, parts, hints)
    else:
        raise c.bad(i, "content", f"must be a string or a list, got {c.describe(content)}", "fix it")
    for j, call in enumerate(src.get("tool_calls") or ()):
        parts.append(
            ToolCall(
                call_id=c.check_id(call.get("id"), i, f"tool_calls[{j}].id"),
                name=c.check_text(call.get("name"), i, f"tool_calls[{j}].name"),
                arguments=c.dump_arguments(call.get("args", {}), i, f"tool_calls[{j}].args"),
            )
        )
    kwargs: dict[str, Any] = {}
    if isinstance(src.get("id"), str) and src["id"]:
        kwargs["message_id"] = src["id"]
        hints["id"] = True
    name = src.get("name")
    message = Message(
        role=role,
        parts=tuple(parts),
        tool_call_id=c.check_id(src.get("tool_call_id"), i, "tool_call_id") if role == "tool" else None,
        name=c.check_text(name, i, "name") if name is not None else None,
        is_error=role == "tool" and src.get("status") == "error",
        **kwargs,
    )
    check_message(message, index=i)
    return c.record(message, src, hints, FORMAT, _generic_dump(lc), _MAPPED)


def _check_valid(item: Any, src: Mapping[str, Any], i: int) -> None:
    """A `MessageError` for an object built past LangChain's validation (``model_construct``) with
    fields LangChain itself refuses: converting it back would fail later, in the middle of a view."""
    try:
        type(item).model_validate({k: v for k, v in src.items() if k != "__class__"})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "(item)"
        raise c.bad(
            i, where, f"is invalid for a {type(item).__name__} ({error['msg']})", "build it with its constructor"
        ) from None


def _parse_blocks(content: list[Any], i: int, parts: list[Part], hints: c.JSONDict) -> None:
    raw: list[Any] = []
    for j, block in enumerate(content):
        sub = f"content[{j}]"
        if isinstance(block, str):
            parts.append(TextPart(text=c.check_text(block, i, sub)))
            continue
        if not isinstance(block, Mapping):
            raise c.bad(i, sub, f"must be a string or a block dict, got {c.describe(block)}", "fix it")
        kind = block.get("type")
        if kind == "text" and "text" in block:
            parts.append(TextPart(text=c.check_text(block["text"], i, f"{sub}.text")))
        elif kind == "image_url":
            spec = block.get("image_url")
            url = spec.get("url") if isinstance(spec, Mapping) else spec
            detail = spec.get("detail") if isinstance(spec, Mapping) else None
            parts.append(
                ImagePart(url=c.check_text(url, i, f"{sub}.image_url"), detail=detail if detail in _DETAILS else "auto")
            )
        elif kind == "image" and isinstance(block.get("url"), str):
            parts.append(ImagePart(url=c.check_text(block["url"], i, f"{sub}.url")))
        elif kind == "image" and isinstance(block.get("base64") or block.get("data"), str):
            data = c.check_text(block.get("base64") or block.get("data"), i, f"{sub}.base64")
            media_type = block.get("mime_type") if isinstance(block.get("mime_type"), str) else "image/png"
            parts.append(ImagePart(url=f"data:{media_type};base64,{data}", media_type=media_type))
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            signature = block.get("signature")
            parts.append(
                ThinkingPart(
                    text=c.check_text(block["thinking"], i, f"{sub}.thinking"),
                    signature=signature if isinstance(signature, str) else None,
                )
            )
        elif kind == "reasoning" and isinstance(block.get("reasoning"), str):
            parts.append(ThinkingPart(text=c.check_text(block["reasoning"], i, f"{sub}.reasoning")))
        else:
            raw.append([j, c.copy_json(block)])
    if raw:
        hints["raw"] = raw


# --- writing ----------------------------------------------------------------------------------
def _object_arguments(arguments: str) -> dict[str, Any] | None:
    """A call's arguments as the dict LangChain's ``args`` must be, or None when they are not a JSON object."""
    try:
        args = c.load_arguments(arguments)
    except ValueError:
        return None
    return args if isinstance(args, dict) else None


def _render_data(m: Message, hints: Mapping[str, Any] | None, exact: bool) -> c.JSONDict:
    """The constructor arguments of the LangChain message (plus ``__class__``)."""
    blocks: list[Any] = []
    calls: list[c.JSONDict] = []
    invalid: list[c.JSONDict] = []
    plain = True
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
            args = _object_arguments(p.arguments)
            if args is None:  # LangChain keeps a call whose arguments are not a JSON object as invalid
                invalid.append(
                    {
                        "name": p.name,
                        "args": p.arguments,
                        "id": p.call_id,
                        "error": "the arguments are not a JSON object",
                        "type": "invalid_tool_call",
                    }
                )
            else:
                calls.append({"name": p.name, "args": args, "id": p.call_id, "type": "tool_call"})
        elif hints is not None:  # thinking: only what came in through LangChain
            block: c.JSONDict = {"type": "thinking", "thinking": p.text}
            if p.signature is not None:
                block["signature"] = p.signature
            blocks.append(block)
            plain = False
    raw = hints.get("raw") if hints is not None and exact else None
    if raw:
        c.insert_raw(blocks, raw)
    content: Any
    if raw or not plain or len(blocks) > 1 or (hints is not None and hints.get("shape") == "list"):
        content = blocks
    else:
        content = blocks[0]["text"] if blocks else ""
    cls = hints.get("cls") if hints is not None else None
    data: c.JSONDict = {"__class__": cls or _DEFAULT_CLASS[m.role], "content": content}
    if m.name is not None:
        data["name"] = m.name
    if hints is not None and hints.get("id"):
        data["id"] = m.message_id
    if m.role == "developer":
        data["additional_kwargs"] = dict(_DEVELOPER)
    if m.role == "assistant":
        data["tool_calls"] = calls
        if invalid:
            data["invalid_tool_calls"] = invalid
    if m.role == "tool":
        data["tool_call_id"] = m.tool_call_id
        if m.is_error:
            data["status"] = "error"
    if cls in ("ChatMessage", "ChatMessageChunk"):
        data["role"] = m.role
    return data


def _construct(lc: Any, data: c.JSONDict) -> Any:
    data = dict(data)
    cls = getattr(lc, data.pop("__class__"))
    return cls(**data)


def _generic_dump(lc: Any) -> c.Render:
    """A renderer giving what the LangChain object built from `_render_data` dumps to."""

    def render(m: Message, hints: Mapping[str, Any] | None, exact: bool) -> c.JSONDict:
        data = _render_data(m, hints, exact)
        cls = data["__class__"]
        dumped: c.JSONDict = _construct(lc, data).model_dump()
        dumped["__class__"] = cls
        return dumped

    return render

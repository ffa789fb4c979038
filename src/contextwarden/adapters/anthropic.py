"""Anthropic Messages API messages <-> `Message`.

Anthropic keeps the system prompt out of the message list: `to_messages` takes it as
``system=`` (a string or a list of text blocks) and `from_messages` returns ``(system, messages)``.
The format-neutral `contextwarden.adapters.to_messages` / ``from_messages`` instead accept and
write it inline as ``{"role": "system", "content": ...}`` dicts, so one list round-trips.

Blocks read:

* user messages: ``text`` (`TextPart`), ``image`` with a ``base64`` or ``url`` source
  (`ImagePart`; base64 data becomes a ``data:`` URL) and ``tool_result`` blocks. Each tool
  result becomes its own ``role="tool"`` message (``tool_use_id`` -> ``tool_call_id``, ``is_error``
  kept, content a string or blocks, ``name`` taken from the ``tool_use`` it answers), so one user
  message can become several messages: ``[tool_result a, tool_result b, text]`` ->
  ``tool(a), tool(b), user(text)``.
* assistant messages: ``text``, ``tool_use`` (``input`` -> JSON ``arguments``), ``thinking``
  (with its ``signature``) and ``redacted_thinking`` (``data`` -> ``ThinkingPart(redacted=True)``).

Any other block type (documents, search results, server tool blocks) and any unknown key
(``cache_control``, ``citations``...) is kept and written back in place.

Writing back, consecutive tool messages, and user content right after them, merge into one user
message in their original order; messages read from Anthropic remember exactly how they were
grouped. Thinking blocks are written only for thinking that came from Anthropic: another
provider's reasoning cannot carry a valid Anthropic signature.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..exceptions import MessageError
from ..messages import ImagePart, Message, Part, TextPart, ThinkingPart, ToolCall, check_message
from . import _common as c

__all__ = ["FORMAT", "System", "from_messages", "to_messages"]

FORMAT = "anthropic"
System = str | list[dict[str, Any]] | None
"""The ``system`` parameter of the Messages API."""
_MAPPED = frozenset({"role", "content", "id"})
_EXAMPLE = "{'role': 'user', 'content': 'hi'}"


def to_messages(messages: Sequence[Any], *, system: Any = None) -> list[Message]:
    """Convert Anthropic messages (and the ``system`` parameter) to messages.

    The input is not modified. A ``system`` parameter becomes the first message.

    Raises:
        MessageError: an item that is not a message dict, a role other than user/assistant (or
            system, accepted inline), a misplaced block, content that is not text where text is
            required, lone surrogates.
    """
    out: list[Message] = []
    if system is not None:
        out.append(_parse_system({"role": "system", "content": system}, None))
    names: dict[str, str] = {}
    prev_tool = False
    for i, item in enumerate(messages):
        if isinstance(item, Message):
            out.append(check_message(item, index=i))
            names.update((call.call_id, call.name) for call in item.tool_calls)
            prev_tool = item.role == "tool"
            continue
        src = c.require_mapping(item, i, "an Anthropic message", _EXAMPLE)
        role = src.get("role")
        if role == "user":
            pieces = _parse_user(src, i, names, prev_tool)
            out.extend(pieces)
            prev_tool = pieces[-1].role == "tool"
        elif role == "assistant":
            out.append(_parse_assistant(src, i, names))
            prev_tool = False
        elif role in ("system", "developer"):
            out.append(_parse_system(src, i))
            prev_tool = False
        elif role is None:
            raise MessageError(
                f"item {i}: a dict without `role` is not an Anthropic message (keys: {sorted(map(str, src))[:8]}); "
                f"pass messages like {_EXAMPLE}.",
                index=i,
                field="role",
            )
        elif role == "tool":
            raise c.bad(
                i,
                "role",
                "is 'tool', which Anthropic does not have",
                "send tool results as {'type': 'tool_result', 'tool_use_id': ...} blocks in a user message",
            )
        else:
            raise c.bad(
                i,
                "role",
                f"is unknown ({c.show(role)})",
                "use 'user' or 'assistant' (pass the system prompt as `system=`)",
            )
    return out


def from_messages(messages: Sequence[Message]) -> tuple[System, list[dict[str, Any]]]:
    """Convert messages to ``(system, messages)`` for the Messages API.

    System and developer messages, wherever they are, become the ``system`` parameter in order
    (a string for one plain system message, a list of text blocks otherwise; None when there is none).
    """
    systems: list[Any] = []
    out = _render_all(messages, systems)
    if not systems:
        return None, out
    if len(systems) == 1:
        return systems[0], out
    blocks: list[dict[str, Any]] = []
    for content in systems:
        blocks += _as_blocks(content)
    return blocks, out


Rendered = dict[int, tuple[Message, dict[str, Any]]]
"""What each message rendered to, by the message's identity (see `from_messages_inline`)."""


def from_messages_inline(messages: Sequence[Message], *, cache: Rendered | None = None) -> list[dict[str, Any]]:
    """Like `from_messages`, with system messages kept in the list as ``{"role": "system"}`` dicts.

    ``cache`` (a dict the caller keeps between calls) holds what each message of the last call
    rendered to: a message is immutable, so the same object renders the same dict, and the messages
    this call shares with the last are not rendered again. The cache is left holding this call's.
    The dicts returned may be the cache's: the caller must not change them (copy what it changes).
    """
    return _render_all(messages, None, cache)


# --- reading ----------------------------------------------------------------------------------
def _source_id(src: Mapping[str, Any], hints: c.JSONDict) -> dict[str, Any]:
    value = src.get("id")
    if isinstance(value, str) and value:
        hints["id"] = True
        return {"message_id": value}
    return {}


def _parse_system(src: Mapping[str, Any], i: int | None) -> Message:
    field = "system" if i is None else "content"
    hints: c.JSONDict = {}
    parts: list[Part] = []
    content = src.get("content")
    if isinstance(content, list):
        hints["shape"] = "list"
        _parse_blocks(content, i, field, parts, hints, allowed=("text",))
    elif text := c.check_text(content, i, field):
        parts.append(TextPart(text=text))
    message = Message(
        role="developer" if src.get("role") == "developer" else "system", parts=tuple(parts), **_source_id(src, hints)
    )
    check_message(message, index=i)
    return c.record(message, src, hints, FORMAT, _render_plain_message, _MAPPED)


def _parse_blocks(
    blocks: Sequence[Any],
    i: int | None,
    field: str,
    parts: list[Part],
    hints: c.JSONDict,
    *,
    allowed: tuple[str, ...],
    names: dict[str, str] | None = None,
    offset: int = 0,
) -> None:
    """Read content blocks into parts; unknown block types go to ``hints["raw"]``.

    ``offset`` is the position of ``blocks[0]`` in the source list, for error messages.
    """
    raw: list[Any] = []
    for j, block in enumerate(blocks):
        sub = f"{field}[{j + offset}]"
        if not isinstance(block, Mapping):
            raise c.bad(
                i, sub, f"must be a content block dict, got {c.describe(block)}", "use {'type': 'text', 'text': ...}"
            )
        kind = block.get("type")
        if (
            kind in ("text", "image", "tool_use", "thinking", "redacted_thinking", "tool_result")
            and kind not in allowed
        ):
            raise c.bad(i, f"{sub}.type", f"is {c.show(kind)}, which does not belong here", _placement_fix(kind))
        if kind == "text":
            parts.append(TextPart(text=c.check_text(block.get("text"), i, f"{sub}.text")))
        elif kind == "image" and (image := _image(block, i, sub)) is not None:
            parts.append(image)
        elif kind == "tool_use":
            call = ToolCall(
                call_id=c.check_id(block.get("id"), i, f"{sub}.id"),
                name=c.check_text(block.get("name"), i, f"{sub}.name"),
                arguments=c.dump_arguments(block.get("input", {}), i, f"{sub}.input"),
            )
            if names is not None:
                names[call.call_id] = call.name
            parts.append(call)
        elif kind == "thinking":
            signature = block.get("signature")
            parts.append(
                ThinkingPart(
                    text=c.check_text(block.get("thinking"), i, f"{sub}.thinking"),
                    signature=c.check_text(signature, i, f"{sub}.signature") if signature is not None else None,
                )
            )
        elif kind == "redacted_thinking":
            parts.append(ThinkingPart(text=c.check_text(block.get("data"), i, f"{sub}.data"), redacted=True))
        else:
            raw.append([j, c.copy_json(block)])
    if raw:
        hints["raw"] = raw


def _placement_fix(kind: Any) -> str:
    if kind == "tool_result":
        return "tool results go in a user message"
    if kind in ("tool_use", "thinking", "redacted_thinking"):
        return f"{kind} blocks come from the assistant; move it to an assistant message"
    return "system prompts hold text blocks only"


def _image(block: Mapping[str, Any], i: int | None, field: str) -> ImagePart | None:
    """The image of an image block whose source the model can hold, else None."""
    source = block.get("source")
    if not isinstance(source, Mapping):
        return None
    kind = source.get("type")
    if kind == "base64" and isinstance(source.get("media_type"), str) and isinstance(source.get("data"), str):
        media_type = c.check_text(source["media_type"], i, f"{field}.source.media_type")
        data = c.check_text(source["data"], i, f"{field}.source.data")
        return ImagePart(url=f"data:{media_type};base64,{data}", media_type=media_type)
    if kind == "url" and isinstance(source.get("url"), str):
        return ImagePart(url=c.check_text(source["url"], i, f"{field}.source.url"))
    return None


def _parse_user(src: Mapping[str, Any], i: int, names: Mapping[str, str], prev_tool: bool) -> list[Message]:
    content = src.get("content")
    if isinstance(content, str):
        hints: c.JSONDict = {"join": False} if prev_tool else {}
        text = c.check_text(content, i, "content")
        message = Message(role="user", parts=(TextPart(text=text),) if text else (), **_source_id(src, hints))
        check_message(message, index=i)
        return [c.record(message, src, hints, FORMAT, _render_plain_message, _MAPPED)]
    if not isinstance(content, list):
        raise c.bad(i, "content", f"must be a string or a list of blocks, got {c.describe(content)}", "fix it")
    # Split into pieces: each tool_result alone, the blocks between them together.
    pieces: list[tuple[bool, int, list[Any]]] = []  # (is tool result, first block index, blocks)
    for j, block in enumerate(content):
        is_result = isinstance(block, Mapping) and block.get("type") == "tool_result"
        if is_result or not pieces or pieces[-1][0]:
            pieces.append((is_result, j, [block]))
        else:
            pieces[-1][2].append(block)
    if not pieces:
        pieces.append((False, 0, []))
    out: list[Message] = []
    base_id = src.get("id") if isinstance(src.get("id"), str) and src.get("id") else None
    for k, (is_result, first, blocks) in enumerate(pieces):
        piece_src: Mapping[str, Any] = {**src, "content": blocks} if k == 0 else {"role": "user", "content": blocks}
        hints = {}
        kwargs = _source_id(src, hints) if k == 0 else ({"message_id": f"{base_id}#{k}"} if base_id else {})
        joins_by_default = prev_tool if k == 0 else out[-1].role == "tool"
        if joins_by_default != (k > 0):
            hints["join"] = k > 0
        if is_result:
            message = _parse_result(blocks[0], i, f"content[{first}]", names, hints, kwargs)
            render = _render_tool
        else:
            hints["shape"] = "list"
            parts: list[Part] = []
            _parse_blocks(blocks, i, "content", parts, hints, allowed=("text", "image"), offset=first)
            message = Message(role="user", parts=tuple(parts), **kwargs)
            render = _render_plain_message
        check_message(message, index=i)
        out.append(c.record(message, piece_src, hints, FORMAT, render, _MAPPED))
    return out


def _parse_result(
    block: Mapping[str, Any], i: int, field: str, names: Mapping[str, str], hints: c.JSONDict, kwargs: dict[str, Any]
) -> Message:
    call_id = c.check_id(block.get("tool_use_id"), i, f"{field}.tool_use_id")
    parts: list[Part] = []
    inner = block.get("content", None)
    if "content" not in block:
        hints["shape"] = "absent"
    elif isinstance(inner, list):
        hints["shape"] = "list"
        _parse_blocks(inner, i, f"{field}.content", parts, hints, allowed=("text", "image"))
    elif c.check_text(inner, i, f"{field}.content"):
        parts.append(TextPart(text=inner))
    is_error = block.get("is_error")
    return Message(
        role="tool",
        parts=tuple(parts),
        tool_call_id=call_id,
        name=names.get(call_id),
        is_error=is_error is True,
        **kwargs,
    )


def _parse_assistant(src: Mapping[str, Any], i: int, names: dict[str, str]) -> Message:
    hints: c.JSONDict = {}
    parts: list[Part] = []
    content = src.get("content")
    if isinstance(content, list):
        hints["shape"] = "list"
        _parse_blocks(
            content,
            i,
            "content",
            parts,
            hints,
            allowed=("text", "image", "tool_use", "thinking", "redacted_thinking"),
            names=names,
        )
    elif text := c.check_text(content, i, "content"):
        parts.append(TextPart(text=text))
    message = Message(role="assistant", parts=tuple(parts), **_source_id(src, hints))
    check_message(message, index=i)
    return c.record(message, src, hints, FORMAT, _render_plain_message, _MAPPED)


# --- writing ----------------------------------------------------------------------------------
def _blocks(m: Message, hints: Mapping[str, Any] | None, exact: bool) -> list[Any]:
    blocks: list[Any] = []
    for p in m.parts:
        if isinstance(p, TextPart):
            blocks.append({"type": "text", "text": p.text})
        elif isinstance(p, ImagePart):
            blocks.append({"type": "image", "source": _source(p)})
        elif isinstance(p, ToolCall):
            try:
                arguments = c.load_arguments(p.arguments)
            except ValueError:
                raise c.bad(None, "arguments", f"of call {p.call_id!r} is not valid JSON", "pass a JSON text") from None
            blocks.append({"type": "tool_use", "id": p.call_id, "name": p.name, "input": arguments})
        elif hints is not None:  # thinking: only Anthropic's own (see the module docstring)
            if p.redacted:
                blocks.append({"type": "redacted_thinking", "data": p.text})
            else:
                block: dict[str, Any] = {"type": "thinking", "thinking": p.text}
                if p.signature is not None:
                    block["signature"] = p.signature
                blocks.append(block)
    raw = hints.get("raw") if hints is not None and exact else None
    if raw:
        c.insert_raw(blocks, raw)
    return blocks


def _source(p: ImagePart) -> dict[str, Any]:
    head, sep, data = p.url.partition(",")
    if p.url.startswith("data:") and sep and head.endswith(";base64"):
        return {"type": "base64", "media_type": p.media_type or head[5:-7], "data": data}
    return {"type": "url", "url": p.url}


def _render_plain_message(m: Message, hints: Mapping[str, Any] | None, exact: bool) -> c.JSONDict:
    role = "system" if m.role in ("system", "developer") else m.role
    blocks = _blocks(m, hints, exact)
    listed = hints is not None and hints.get("shape") == "list"
    if not listed and not blocks:
        content: Any = ""
    elif not listed and len(blocks) == 1 and blocks[0]["type"] == "text":
        content = blocks[0]["text"]
    else:
        content = blocks
    out: c.JSONDict = {"role": role, "content": content}
    if hints is not None and hints.get("id"):
        out["id"] = m.message_id
    return out


def _render_tool(m: Message, hints: Mapping[str, Any] | None, exact: bool) -> c.JSONDict:
    block: c.JSONDict = {"type": "tool_result", "tool_use_id": m.tool_call_id}
    shape = hints.get("shape") if hints is not None else None
    if shape != "absent":
        inner = _blocks(m, hints, exact)
        if shape != "list" and not inner:
            block["content"] = ""
        elif shape != "list" and len(inner) == 1 and inner[0]["type"] == "text":
            block["content"] = inner[0]["text"]
        else:
            block["content"] = inner
    if m.is_error:
        block["is_error"] = True
    out: c.JSONDict = {"role": "user", "content": [block]}
    if hints is not None and hints.get("id"):
        out["id"] = m.message_id
    return out


def _as_blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content)


def _render_all(
    messages: Sequence[Message], systems: list[Any] | None, cache: Rendered | None = None
) -> list[dict[str, Any]]:
    """Render in order; ``systems`` collects system contents (None: keep them inline); ``cache``: see
    `from_messages_inline` (a message joined to the one before gives a new dict, never changes a cached one)."""
    out: list[dict[str, Any]] = []
    prev_tool = False
    fresh: Rendered = {}
    for m in messages:
        hit = cache.get(id(m)) if cache is not None else None
        if hit is not None and hit[0] is m:
            frag = hit[1]
        elif m.role == "tool":
            frag = c.render(m, FORMAT, _render_tool)
        else:
            frag = c.render(m, FORMAT, _render_plain_message)
        if cache is not None:
            fresh[id(m)] = (m, frag)
        if m.role in ("system", "developer"):
            if systems is None:
                out.append(frag)
            else:
                systems.append(frag["content"])
            prev_tool = False
            continue
        if m.role in ("user", "tool"):
            hints = c.hints_of(m, FORMAT)
            join = hints["join"] if hints is not None and "join" in hints else prev_tool
            if join and out and out[-1].get("role") == "user":
                out[-1] = {**out[-1], "content": _as_blocks(out[-1]["content"]) + _as_blocks(frag["content"])}
            else:
                out.append(frag)
        else:
            out.append(frag)
        prev_tool = m.role == "tool"
    if cache is not None:
        cache.clear()
        cache.update(fresh)
    return out

"""OpenAI Responses API input items <-> `Message`.

Item types read:

* ``message`` (also the short form without ``type``): role user, system, developer or
  assistant; content a string or a list of ``input_text`` / ``output_text`` parts (`TextPart`)
  and ``input_image`` parts with an ``image_url`` (`ImagePart`); other parts (``input_file``,
  ``refusal``, images given by ``file_id``) are kept as they are.
* ``function_call`` (``call_id``, ``name``, ``arguments``): a `ToolCall`.
* ``function_call_output`` (``call_id``, ``output`` as a string or a list of parts): a
  ``role="tool"`` message; its ``name`` is the name of the call it answers, when that is known.
* ``reasoning``: a `ThinkingPart` whose text is the summary texts joined by blank lines and
  whose signature is the ``encrypted_content``; the rest of the item (its id, the summary's
  exact parts) is kept in ``extra``.

A run of consecutive model-side items (reasoning, assistant messages, function calls) becomes ONE
assistant message: a model turn and its tool calls stay one unit, so compaction can never send a
function call without the reasoning item that produced it. Writing it back rebuilds the original
items (with their ids and ``status``) while the message content is unchanged; after compaction
rewrote it, it is written as reasoning items, one assistant message item and function calls.
The message id is the id of the first item that has one. Other item types (``item_reference``,
hosted tool calls) are refused with a `MessageError`: resolve them before handing the list over.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from ..exceptions import MessageError
from ..messages import ImagePart, Message, Part, Role, TextPart, ThinkingPart, ToolCall, check_message
from . import _common as c

__all__ = ["FORMAT", "from_messages", "to_messages"]

FORMAT = "responses"
_DETAILS = ("auto", "low", "high")
# `type` is always rendered, so dropping it (the short message form) is safe on rewritten content too.
_MESSAGE_KEYS = frozenset({"role", "content", "id"})
_OUTPUT_KEYS = frozenset({"call_id", "output", "id"})
_ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")
_INPUT_ROLES = ("user", "system", "developer")
_SUMMARY_JOIN = "\n\n"
ItemType = Literal["message", "function_call", "reasoning"]


def to_messages(items: Sequence[Any]) -> list[Message]:
    """Convert Responses input items to messages (the input is not modified).

    Raises:
        MessageError: an item that is not an input item dict, an unsupported item type or role,
            content that is not text where text is required, arguments that are not JSON.
    """
    out: list[Message] = []
    run: list[tuple[int, Mapping[str, Any], ItemType]] = []
    names: dict[str, str] = {}

    def flush() -> None:
        if run:
            out.append(_parse_run(run, names))
            run.clear()

    for i, item in enumerate(items):
        if isinstance(item, Message):
            flush()
            out.append(check_message(item, index=i))
            names.update((call.call_id, call.name) for call in item.tool_calls)
            continue
        src = c.require_mapping(item, i, "a Responses input item", "{'type': 'message', 'role': 'user', ...}")
        kind = _item_type(src, i)
        if kind in ("function_call", "reasoning") or (kind == "message" and src.get("role") == "assistant"):
            run.append((i, src, cast(ItemType, kind)))
            continue
        flush()
        if kind == "message":
            out.append(_parse_message(src, i))
        else:
            out.append(_parse_output(src, i, names))
    flush()
    return out


def from_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Convert messages to Responses input items (fresh dicts; the messages are not modified)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant":
            out.extend(_render_assistant(m))
        elif m.role == "tool":
            out.append(c.render(m, FORMAT, _render_output))
        else:
            out.append(c.render(m, FORMAT, _render_message))
    return out


# --- reading ----------------------------------------------------------------------------------
def _item_type(src: Mapping[str, Any], i: int) -> str:
    kind = src.get("type")
    if kind is None and "role" in src:
        return "message"
    if kind in _ITEM_TYPES:
        return cast(str, kind)
    if kind is None:
        raise MessageError(
            f"item {i}: a dict without `type` or `role` is not a Responses input item "
            f"(keys: {sorted(map(str, src))[:8]}); pass items like {{'type': 'message', 'role': 'user', ...}}.",
            index=i,
            field="type",
        )
    raise c.bad(
        i,
        "type",
        f"is {c.show(kind)}, which contextwarden does not read",
        f"pass only {', '.join(_ITEM_TYPES)} items (resolve item references and hosted tool calls first)",
    )


def _parse_content(content: Any, i: int, field: str, parts: list[Part], hints: c.JSONDict) -> None:
    if isinstance(content, str):
        if c.check_text(content, i, field):
            parts.append(TextPart(text=content))
        return
    if not isinstance(content, list):
        raise c.bad(i, field, f"must be a string or a list of parts, got {c.describe(content)}", "fix it")
    hints["shape"] = "list"
    raw: list[Any] = []
    for j, part in enumerate(content):
        sub = f"{field}[{j}]"
        if not isinstance(part, Mapping):
            raise c.bad(
                i, sub, f"must be a part dict, got {c.describe(part)}", "use {'type': 'input_text', 'text': ...}"
            )
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append(TextPart(text=c.check_text(part.get("text"), i, f"{sub}.text")))
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            detail = part.get("detail")
            parts.append(
                ImagePart(
                    url=c.check_text(part["image_url"], i, f"{sub}.image_url"),
                    detail=detail if detail in _DETAILS else "auto",
                )
            )
        else:
            raw.append([j, c.copy_json(part)])
    if raw:
        hints["raw"] = raw


def _source_id(src: Mapping[str, Any]) -> str | None:
    value = src.get("id")
    return value if isinstance(value, str) and value else None


def _parse_message(src: Mapping[str, Any], i: int) -> Message:
    role = src.get("role")
    if role not in _INPUT_ROLES:
        raise c.bad(i, "role", f"is {c.show(role)}", "use 'user', 'system', 'developer' or 'assistant'")
    hints: c.JSONDict = {}
    parts: list[Part] = []
    _parse_content(src.get("content"), i, "content", parts, hints)
    kwargs: dict[str, Any] = {}
    if source_id := _source_id(src):
        kwargs["message_id"] = source_id
        hints["id"] = True
    message = Message(role=cast(Role, role), parts=tuple(parts), **kwargs)
    check_message(message, index=i)
    return c.record(message, src, hints, FORMAT, _render_message, _MESSAGE_KEYS)


def _parse_output(src: Mapping[str, Any], i: int, names: Mapping[str, str]) -> Message:
    call_id = c.check_id(src.get("call_id"), i, "call_id")
    hints: c.JSONDict = {}
    parts: list[Part] = []
    _parse_content(src.get("output"), i, "output", parts, hints)
    kwargs: dict[str, Any] = {}
    if source_id := _source_id(src):
        kwargs["message_id"] = source_id
        hints["id"] = True
    message = Message(role="tool", parts=tuple(parts), tool_call_id=call_id, name=names.get(call_id), **kwargs)
    check_message(message, index=i)
    return c.record(message, src, hints, FORMAT, _render_output, _OUTPUT_KEYS)


def _parse_run(run: Sequence[tuple[int, Mapping[str, Any], ItemType]], names: dict[str, str]) -> Message:
    parts: list[Part] = []
    layout: list[c.JSONDict] = []
    for i, src, kind in run:
        start = len(parts)
        entry: c.JSONDict = {"t": kind}
        if kind == "message":
            _parse_content(src.get("content"), i, "content", parts, entry)
            entry["h"] = _key(parts[start:])
        elif kind == "function_call":
            call = ToolCall(
                call_id=c.check_id(src.get("call_id"), i, "call_id"),
                name=c.check_text(src.get("name"), i, "name"),
                arguments=c.check_arguments(src.get("arguments", ""), i, "arguments"),
            )
            names[call.call_id] = call.name
            parts.append(call)
            entry["call"] = call.call_id
        else:
            thought = _parse_reasoning(src, i)
            parts.append(thought)
            entry["h"] = _key((thought,))
        if source_id := _source_id(src):
            entry["id"] = source_id
        entry["n"] = len(parts) - start
        layout.append(entry)
    first = next((e["id"] for e in layout if "id" in e), None)
    message = Message(role="assistant", parts=tuple(parts), **({"message_id": first} if first else {}))
    check_message(message, index=run[0][0])
    hints: c.JSONDict = {"id": True} if first else {}
    plain = _render_plain(message, hints)
    if first or len(plain) != len(run) or any(c.diff(src, item) for (_, src, _), item in zip(run, plain, strict=False)):
        # Not the plain form (ids, another order, extra keys): keep the item layout.
        for entry, (_, src, _), item in zip(layout, run, _render_layout(message, layout), strict=True):
            ops = c.diff(src, item)
            if ops:
                entry["ops"] = ops
        hints["items"] = layout
        hints["fp"] = c.fingerprint(message)
    return c.attach_fresh(message, FORMAT, hints)


def _parse_reasoning(src: Mapping[str, Any], i: int) -> ThinkingPart:
    summary = src.get("summary", [])
    if not isinstance(summary, list):
        raise c.bad(i, "summary", f"must be a list, got {c.describe(summary)}", "pass [{'type': 'summary_text', ...}]")
    texts = []
    for j, part in enumerate(summary):
        if not isinstance(part, Mapping):
            raise c.bad(i, f"summary[{j}]", f"must be a dict, got {c.describe(part)}", "use {'type': 'summary_text'}")
        texts.append(c.check_text(part.get("text"), i, f"summary[{j}].text"))
    signature = src.get("encrypted_content")
    return ThinkingPart(
        text=_SUMMARY_JOIN.join(texts),
        signature=c.check_text(signature, i, "encrypted_content") if signature is not None else None,
    )


# --- writing ----------------------------------------------------------------------------------
def _content(parts: Sequence[Part], hints: Mapping[str, Any] | None, exact: bool, *, assistant: bool) -> Any:
    blocks: list[Any] = []
    plain = True
    for p in parts:
        if isinstance(p, TextPart):
            if assistant:
                blocks.append({"type": "output_text", "text": p.text, "annotations": []})
            else:
                blocks.append({"type": "input_text", "text": p.text})
        elif isinstance(p, ImagePart):
            blocks.append({"type": "input_image", "image_url": p.url, "detail": p.detail})
            plain = False
    raw = hints.get("raw") if hints is not None and exact else None
    if raw:
        c.insert_raw(blocks, raw)
    if raw or not plain or len(blocks) > 1 or (hints is not None and hints.get("shape") == "list"):
        return blocks
    return blocks[0]["text"] if blocks else ""


def _render_message(m: Message, hints: Mapping[str, Any] | None, exact: bool) -> c.JSONDict:
    out: c.JSONDict = {"type": "message", "role": m.role, "content": _content(m.parts, hints, exact, assistant=False)}
    if hints is not None and hints.get("id"):
        out["id"] = m.message_id
    return out


def _render_output(m: Message, hints: Mapping[str, Any] | None, exact: bool) -> c.JSONDict:
    out: c.JSONDict = {
        "type": "function_call_output",
        "call_id": m.tool_call_id,
        "output": _content(m.parts, hints, exact, assistant=False),
    }
    if hints is not None and hints.get("id"):
        out["id"] = m.message_id
    return out


def _render_item(kind: str, parts: Sequence[Part], entry: Mapping[str, Any], exact: bool) -> c.JSONDict:
    item: c.JSONDict
    if kind == "message":
        item = {"type": "message", "role": "assistant", "content": _content(parts, entry, exact, assistant=True)}
    elif kind == "function_call":
        call = parts[0]
        assert isinstance(call, ToolCall)
        item = {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments}
    else:
        thought = parts[0]
        assert isinstance(thought, ThinkingPart)
        item = {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": thought.text}] if thought.text else [],
        }
        if thought.signature is not None:
            item["encrypted_content"] = thought.signature
    if "id" in entry:
        item["id"] = entry["id"]
    return item


def _render_plain(m: Message, hints: Mapping[str, Any] | None) -> list[c.JSONDict]:
    """Reasoning items (only for this provider's own thinking), one message item, function calls."""
    items: list[c.JSONDict] = []
    if hints is not None:
        items += [_render_item("reasoning", (p,), {}, False) for p in m.parts if isinstance(p, ThinkingPart)]
    content = [p for p in m.parts if isinstance(p, TextPart | ImagePart)]
    if content or not m.parts:
        items.append(_render_item("message", content, {}, False))
    items += [_render_item("function_call", (p,), {}, False) for p in m.parts if isinstance(p, ToolCall)]
    return items


def _render_rewritten(m: Message, layout: Sequence[Mapping[str, Any]]) -> list[c.JSONDict]:
    """A turn whose parts changed since it was read (a call dropped, text replaced).

    Reasoning items and function calls that are still there keep their ids and extra keys (the
    API pairs a function call with the reasoning item before it by id); text and images are
    written as plain message items, since their recorded form no longer applies.
    """
    calls = {e["call"]: e for e in layout if e["t"] == "function_call" and "call" in e}
    unchanged = {e["h"]: e for e in layout if "h" in e}
    items: list[c.JSONDict] = []
    content: list[Part] = []

    def add(kind: str, parts: Sequence[Part]) -> None:
        entry = (
            calls.pop(parts[0].call_id, None) if isinstance(parts[0], ToolCall) else unchanged.pop(_key(parts), None)
        )
        item = _render_item(kind, parts, entry or {}, entry is not None)
        if entry is not None and entry.get("ops"):
            c.apply(item, entry["ops"])
        items.append(item)

    for p in m.parts:
        if isinstance(p, TextPart | ImagePart):
            content.append(p)
            continue
        if content:
            add("message", content)
            content = []
        add("function_call" if isinstance(p, ToolCall) else "reasoning", (p,))
    if content:
        add("message", content)
    if not items:
        items.append(_render_item("message", (), {}, False))
    return items


def _key(parts: Sequence[Part]) -> str:
    """A digest of reasoning or message content, to recognise it after the turn changed."""
    digest = hashlib.blake2b(digest_size=8)
    for p in parts:
        if isinstance(p, TextPart | ThinkingPart):
            digest.update(
                f"{p.kind}\x00{p.text}\x00{getattr(p, 'signature', None)}\x01".encode("utf-8", "surrogatepass")
            )
        elif isinstance(p, ImagePart):
            digest.update(f"image\x00{p.url}\x00{p.detail}\x01".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _render_layout(m: Message, layout: Sequence[Mapping[str, Any]]) -> list[c.JSONDict]:
    items = []
    k = 0
    for entry in layout:
        n = entry["n"]
        items.append(_render_item(entry["t"], m.parts[k : k + n], entry, True))
        k += n
    return items


def _render_assistant(m: Message) -> list[c.JSONDict]:
    hints = c.hints_of(m, FORMAT)
    layout = hints.get("items") if hints is not None else None
    if layout and c.is_exact(m, hints):
        try:
            items = _render_layout(m, layout)
            for entry, item in zip(layout, items, strict=True):
                if entry.get("ops"):
                    c.apply(item, entry["ops"])
            return items
        except (LookupError, TypeError, AssertionError, ValueError):
            pass  # hints from another adapter version: rebuild below
    if layout:
        try:
            return _render_rewritten(m, layout)
        except (LookupError, TypeError, AssertionError, ValueError):
            pass
    return _render_plain(m, hints)

"""Responses items the adapter does not read: custom and hosted tool calls, and the outputs answering them.

A model turn is every item the model produced in a row: reasoning, messages, function calls, and
the calls of custom tools (``custom_tool_call``) and of hosted tools (``web_search_call``,
``file_search_call``, ``computer_call``, ``local_shell_call``, ``shell_call``, ``apply_patch_call``,
``mcp_call``, ``mcp_approval_request``, ``image_generation_call``, ``code_interpreter_call``...). A
turn with such an item is ONE assistant message: compaction keeps or drops it whole, so a reasoning
item is never sent without the item it produced. A call the client answers with an item of its own
(`OUTPUT_OF`: ``custom_tool_call`` with ``custom_tool_call_output``, ``computer_call`` with
``computer_call_output``...) is a tool call of that message, and its output a tool result: the pair
is one round, kept, cleared or dropped together. A hosted call that carries its own result
(``web_search_call``, ``mcp_call``) is text of the turn.

The items go back upstream exactly as the client sent them while the message is unchanged. An
output compaction shortened keeps its item's shape (taken from the request's own item, since a
stand-in carries only the call id): the stand-in text in place of its ``output`` string, or of a
shell call's ``stdout``. A screenshot has no text form: its item goes with a blank one-pixel
screenshot in place of the image (the item stays valid and paired with its call), followed by a
user message that holds the stand-in text (what the screenshot was and how to read it back).
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...messages import Message, Part, TextPart, ThinkingPart, ToolCall

__all__ = [
    "BLANK_SCREENSHOT",
    "OUTPUT_OF",
    "calls_of",
    "is_note",
    "model_side",
    "output_message",
    "outputs_by_call",
    "render_output",
    "render_turn",
    "turn_message",
]

OUTPUT_OF: Mapping[str, str] = {
    "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "local_shell_call": "local_shell_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "mcp_approval_request": "mcp_approval_response",
}
"""Call items the client answers, and the item type of the answer."""
_OUTPUTS = frozenset(OUTPUT_OF.values())
_TURN = "responses_turn"
"""``Message.extra`` key: the turn's items as the client sent them."""
_DIGEST = "responses_turn_digest"
"""``Message.extra`` key: a digest of the parts made from them (a rewritten turn no longer has it)."""
OUTPUT = "responses_output"
"""``Message.extra`` key of an output item kept whole."""
_IGNORED = frozenset({"type", "id", "status"})

"""Keys that do not change what the model sees of an item."""


def model_side(item: Mapping[str, Any]) -> bool:
    """An item the model produced (a run of them is one turn)."""
    kind = item.get("type")
    if kind is None or kind == "message":
        return item.get("role") == "assistant"
    return not (str(kind).endswith("_output") or kind in _OUTPUTS)


def _call_id(item: Mapping[str, Any]) -> str | None:
    """The id an answering output names, for a call item the client answers."""
    kind = item.get("type")
    if kind not in OUTPUT_OF:
        return None
    value = item.get("id") if kind == "mcp_approval_request" else item.get("call_id")
    return value if isinstance(value, str) and value else None


def _answered(item: Mapping[str, Any]) -> str | None:
    """The call an output item answers."""
    kind = item.get("type")
    if kind == "mcp_approval_response":
        value = item.get("approval_request_id")
    elif kind == "local_shell_call_output":  # its `id` is the call's id
        value = item.get("call_id") or item.get("id")
    else:
        value = item.get("call_id")
    return value if isinstance(value, str) and value else None


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _seen(item: Mapping[str, Any]) -> str:
    """What the model sees of an item: its JSON without ids and status."""
    return _canonical({k: v for k, v in item.items() if k not in _IGNORED})


def _digest(parts: Sequence[Part]) -> str:
    return hashlib.blake2b(repr(parts).encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def turn_message(items: Sequence[Mapping[str, Any]], adapt: Callable[[Sequence[Any]], list[Message]]) -> Message:
    """One model turn that holds items the adapter does not read, as one assistant message.

    ``adapt`` converts the items the adapter reads (reasoning, messages, function calls).
    """
    parts: list[Part] = []
    for item in items:
        call_id = _call_id(item)
        if call_id is not None:
            name = item.get("name")
            shown = {k: v for k, v in item.items() if k not in _IGNORED | {"call_id", "name"}}
            parts.append(
                ToolCall(
                    call_id=call_id,
                    name=name if isinstance(name, str) and name else str(item["type"]),
                    arguments=_canonical(shown),
                )
            )
        elif item.get("type") in (None, "message", "reasoning", "function_call"):
            for message in adapt([item]):
                parts.extend(message.parts)
        else:
            parts.append(TextPart(text=_seen(item)))
    extra = {_TURN: [dict(i) for i in items], _DIGEST: _digest(parts)}
    message = Message(role="assistant", parts=tuple(parts), extra=extra)
    first = next((i["id"] for i in items if isinstance(i.get("id"), str) and i["id"]), None)
    return replace(message, message_id=first) if first else message


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list) and all(isinstance(p, Mapping) and isinstance(p.get("text"), str) for p in output):
        return "".join(p["text"] for p in output)
    return _canonical(output)


def _output_of(item: Mapping[str, Any]) -> str:
    """The text of an output item (the item's fields when it has no ``output``, as an approval)."""
    return _output_text(item.get("output", {k: v for k, v in item.items() if k not in _IGNORED}))


def output_message(item: Mapping[str, Any], names: Mapping[str, str]) -> Message | None:
    """An output item answering a call (None: not an output the proxy pairs), as a tool result named
    after the call (``names``: the tool name of each call id met so far)."""
    if item.get("type") not in _OUTPUTS:
        return None
    answered = _answered(item)
    if answered is None:
        return None
    message = Message(
        role="tool",
        tool_call_id=answered,
        name=names.get(answered, str(item["type"])),
        parts=(TextPart(text=_output_of(item)),),
        extra={OUTPUT: dict(item)},
    )
    source = item.get("id")
    if isinstance(source, str) and source and item["type"] != "local_shell_call_output":  # that id is the call's
        message = replace(message, message_id=source)
    return message


_SHORT_FORMS: Mapping[str, Callable[[str, str], dict[str, Any]]] = {
    "custom_tool_call": lambda call_id, text: {"type": "custom_tool_call_output", "call_id": call_id, "output": text},
    "local_shell_call": lambda call_id, text: {"type": "local_shell_call_output", "id": call_id, "output": text},
    "apply_patch_call": lambda call_id, text: {
        "type": "apply_patch_call_output",
        "call_id": call_id,
        "status": "completed",
        "output": text,
    },
}
"""The output item of a call whose output compaction replaced by a stand-in (a text: these outputs are text)."""


def calls_of(message: Message) -> dict[str, str]:
    """The calls of a turn made by `turn_message` that the client answers: call id -> call item type."""
    items = message.extra.get(_TURN)
    if not isinstance(items, list):
        return {}
    return {call_id: str(i["type"]) for i in items if (call_id := _call_id(i)) is not None}


def outputs_by_call(items: Sequence[Any]) -> dict[str, Mapping[str, Any]]:
    """The output items of a request's input that the proxy pairs, by the call they answer."""
    found: dict[str, Mapping[str, Any]] = {}
    for item in items:
        if isinstance(item, Mapping) and item.get("type") in _OUTPUTS and (answered := _answered(item)) is not None:
            found[answered] = item
    return found


def _png(width: int, height: int) -> bytes:
    """A blank (transparent) PNG image."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8-bit RGBA
    rows = b"".join(b"\x00" + b"\x00\x00\x00\x00" * width for _ in range(height))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


BLANK_SCREENSHOT = "data:image/png;base64," + base64.b64encode(_png(1, 1)).decode()
"""The image a shortened screenshot output carries in place of the screenshot."""


def _screenshot_note(item: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The user message that says what a screenshot left out of the view was, after its output item."""
    call = item.get("call_id")
    said = f"[The screenshot answering computer call {call!r} was left out of this request: {text}]"
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": said}]}


def _shortened(item: Mapping[str, Any], text: str) -> list[dict[str, Any]]:
    """``item`` with the stand-in ``text`` in place of its output (a screenshot: a blank one, and the text after)."""
    output = item.get("output")
    if isinstance(output, str):
        return [{**item, "output": text}]
    if (
        item.get("type") == "shell_call_output"
        and isinstance(output, list)
        and output
        and isinstance(output[0], Mapping)
    ):
        return [{**item, "output": [{**output[0], "stdout": text, "stderr": ""}]}]  # its outcome stays the real one
    if item.get("type") == "computer_call_output" and isinstance(output, Mapping):
        blank = {"type": "computer_screenshot", "image_url": BLANK_SCREENSHOT}
        return [{**item, "output": blank}, _screenshot_note(item, text)]
    return [dict(item)]


def render_output(
    message: Message, calls: Mapping[str, str], sent: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]] | None:
    """The output item of a tool result made by `output_message`, or of the stand-in compaction put in its
    place (``calls``: the call item type of each call id in the view; ``sent``: the request's own output
    items by call id, `outputs_by_call`); None: neither. A shortened screenshot is its item with a blank
    screenshot and a user message with the stand-in text (`is_note`), which goes after the run of outputs."""
    item = message.extra.get(OUTPUT)
    call_id = message.tool_call_id
    if not isinstance(item, Mapping):
        if call_id is None or call_id not in calls:
            return None
        original = sent.get(call_id)
        if original is not None:
            return _shortened(original, message.text)
        short = _SHORT_FORMS.get(calls[call_id])
        if short is not None:
            return [short(call_id, message.text)]
        if calls[call_id] == "computer_call":
            return _shortened({"type": "computer_call_output", "call_id": call_id, "output": {}}, message.text)
        return None
    if message.text != _output_of(item):
        return _shortened(item, message.text)  # shortened by compaction: the model sees the shortened text
    return [dict(item)]


def is_note(item: Mapping[str, Any]) -> bool:
    """An item `render_output` adds after a shortened screenshot (not an output item)."""
    return item.get("type") == "message"


def render_turn(message: Message, render: Callable[[Message], list[dict[str, Any]]]) -> list[dict[str, Any]] | None:
    """The items of a turn made by `turn_message` (None: not one).

    Unchanged, the turn is its items as the client sent them. Rewritten (a call dropped by a repair,
    a text shortened), it is the items whose parts are still there, and ``render`` writes the parts
    no item stands for.
    """
    items = message.extra.get(_TURN)
    if not isinstance(items, list):
        return None
    if message.extra.get(_DIGEST) == _digest(message.parts):
        return [dict(i) for i in items]
    calls = {p.call_id for p in message.parts if isinstance(p, ToolCall)}
    texts = {p.text for p in message.parts if isinstance(p, TextPart)}
    signed = {p.signature for p in message.parts if isinstance(p, ThinkingPart)}
    out: list[dict[str, Any]] = []
    covered: set[str] = set()
    for item in items:
        kind = item.get("type")
        if kind == "function_call" or _call_id(item) is not None:
            keep = (item.get("call_id") if kind == "function_call" else _call_id(item)) in calls
        elif kind == "reasoning":
            keep = item.get("encrypted_content") in signed if "encrypted_content" in item else bool(signed)
        elif kind in (None, "message"):
            said = _said(item)
            keep = bool(said) and all(text in texts for text in said)
            covered.update(said if keep else ())
        else:
            keep = _seen(item) in texts
            covered.update((_seen(item),) if keep else ())
        if keep:
            out.append(dict(item))
    rest = tuple(p for p in message.parts if isinstance(p, TextPart) and p.text not in covered)
    return [*out, *render(Message(role="assistant", parts=rest))] if rest else out


def _said(item: Mapping[str, Any]) -> list[str]:
    """The texts of an assistant message item."""
    content = item.get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
    return []

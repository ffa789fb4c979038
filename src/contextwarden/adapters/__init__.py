"""Lossless conversion between provider message formats and the internal `Message`.

Four formats are read and written:

=============  ===============================================================================
``openai``     OpenAI Chat Completions message dicts (`contextwarden.adapters.openai_chat`)
``responses``  OpenAI Responses input items (`contextwarden.adapters.openai_responses`)
``anthropic``  Anthropic Messages API messages (`contextwarden.adapters.anthropic`); here the
               system prompt travels inline as ``{"role": "system"}`` dicts, the module's own
               functions take and return it separately
``langchain``  LangChain message objects (`contextwarden.adapters.langchain`, extra ``langchain``)
=============  ===============================================================================

``from_messages(to_messages(items, format=f), format=f) == items`` for every supported input:
keys and blocks contextwarden has no field for ride along in ``Message.extra`` and are written
back in place (see `contextwarden.adapters._common` for how). Inputs are never modified and
outputs never share containers with them. Ids: a message keeps the source's id when the format
has one (a Responses item ``id``, a LangChain ``id``, an ``id`` key); otherwise it gets a fresh one.

Converting to another format is best effort by design: fields with no equivalent are dropped
(a Chat Completions ``refusal`` key means nothing to Anthropic), and thinking is only written to
the provider it came from, because only that provider can verify its signature.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

from ..exceptions import MessageError, UsageError
from ..messages import Message
from . import anthropic, langchain, openai_chat, openai_responses

__all__ = ["FORMATS", "Format", "detect_format", "from_messages", "to_messages"]

Format = Literal["openai", "responses", "anthropic", "langchain"]
FORMATS: tuple[Format, ...] = get_args(Format)

_RESPONSES_TYPES = frozenset(
    {"message", "function_call", "function_call_output", "reasoning", "item_reference", "custom_tool_call"}
)
_RESPONSES_PARTS = frozenset({"input_text", "output_text", "input_image", "input_file", "input_audio"})
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking", "document"})
_OPENAI_PARTS = frozenset({"image_url", "refusal"})


def detect_format(items: Sequence[Any]) -> Format:
    """Guess the format of a message list, scanning it once.

    Rules, first decisive item wins:

    1. a LangChain message object -> ``langchain``;
    2. a dict with a top-level ``type`` (``message``, ``function_call``...) or content parts of
       type ``input_text`` / ``output_text`` / ``input_image`` -> ``responses``;
    3. ``role: "tool"``, a ``tool_calls`` or ``tool_call_id`` key, or ``image_url`` parts -> ``openai``;
    4. content blocks of type ``tool_use``, ``tool_result``, ``thinking``, ``redacted_thinking``,
       or an ``image`` block with a ``source`` -> ``anthropic``;
    5. nothing decisive (plain user/assistant/system text, or an empty list) -> ``openai``:
       such lists read the same in every dict format.

    `Message` objects in the list are skipped.
    """
    _require_sequence(items, "items")
    for item in items:
        if isinstance(item, Message):
            continue
        if langchain.is_langchain_message(item):
            return "langchain"
        if not isinstance(item, Mapping):
            continue
        found = _markers(item)
        if found is not None:
            return found
    return "openai"


def _markers(item: Mapping[str, Any]) -> Format | None:
    kind = item.get("type")
    if isinstance(kind, str) and kind in _RESPONSES_TYPES:  # a list or dict there is no marker (and unhashable)
        return "responses"
    if item.get("role") == "tool" or "tool_calls" in item or "tool_call_id" in item:
        return "openai"
    content = item.get("content")
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if not isinstance(kind, str):
                continue
            if kind in _RESPONSES_PARTS:
                return "responses"
            if kind in _OPENAI_PARTS:
                return "openai"
            if kind in _ANTHROPIC_BLOCKS or (kind == "image" and "source" in block):
                return "anthropic"
    return None


def _require_sequence(items: Any, name: str) -> None:
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Sequence):
        raise MessageError(
            f"`{name}` must be a list of messages, got {type(items).__name__}; wrap a single message in a list.",
            field=name,
        )


def _check_format(format: Any) -> Format:
    if format not in FORMATS:
        raise UsageError(f"`format` is {format!r}, which is not a message format; use one of {list(FORMATS)}.")
    return format  # type: ignore[no-any-return]


def to_messages(items: Sequence[Any], *, format: Format | None = None) -> list[Message]:
    """Convert provider messages to `Message` objects.

    Args:
        items: the messages, in one format; `Message` objects among them are checked and kept.
        format: the format of ``items``; None detects it (see `detect_format`).

    Returns:
        New messages; ``items`` is not modified.

    Raises:
        MessageError: an item that is not a message of the format, an unknown role, text
            content that is not a string, tool-call arguments that are not JSON, lone
            surrogates. The error names the item index, the field and the fix.
        UsageError: an unknown ``format``.
        ImportError: ``format="langchain"`` without ``langchain_core`` installed.
    """
    _require_sequence(items, "items")
    fmt = detect_format(items) if format is None else _check_format(format)
    if fmt == "openai":
        return openai_chat.to_messages(items)
    if fmt == "responses":
        return openai_responses.to_messages(items)
    if fmt == "anthropic":
        return anthropic.to_messages(items)
    return langchain.to_messages(items)


def from_messages(messages: Sequence[Message], *, format: Format) -> list[Any]:
    """Convert `Message` objects to provider messages of ``format`` (new objects).

    For ``anthropic``, system messages stay in the list as ``{"role": "system"}`` dicts; use
    `contextwarden.adapters.anthropic.from_messages` to get the ``system`` parameter apart.

    Raises:
        MessageError: an item that is not a `Message`.
        UsageError: an unknown ``format``.
    """
    _require_sequence(messages, "messages")
    fmt = _check_format(format)
    for i, m in enumerate(messages):
        if not isinstance(m, Message):
            raise MessageError(
                f"item {i}: expected a contextwarden Message, got {type(m).__name__}; convert provider "
                "messages with `to_messages` first.",
                index=i,
                field="(item)",
            )
    if fmt == "openai":
        return openai_chat.from_messages(messages)
    if fmt == "responses":
        return openai_responses.from_messages(messages)
    if fmt == "anthropic":
        return anthropic.from_messages_inline(messages)
    return langchain.from_messages(messages)

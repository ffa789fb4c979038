"""Message <-> OpenAI chat-completions dicts, for the OpenAI-compatible client only.

A small private converter so the client does not wait for the general adapters package
(``contextwarden.adapters.openai_chat``); once that lands, the client can use it instead.
It also normalises tool definitions, which the Anthropic client shares.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..exceptions import MessageError
from ..messages import ImagePart, Message, Part, TextPart, ThinkingPart, ToolCall
from ._shapes import ReplyReader

__all__ = ["message_from_openai", "messages_to_openai", "tool_parts", "tools_to_openai"]


def new_call_id() -> str:
    """An id for a tool call whose server gave none (some local servers omit it)."""
    return "call_" + uuid.uuid4().hex[:24]


def _content(message: Message) -> str | list[dict[str, Any]]:
    images = [p for p in message.parts if isinstance(p, ImagePart)]
    if not images:
        return message.text
    content: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            content.append({"type": "image_url", "image_url": {"url": part.url, "detail": part.detail}})
    return content


def message_to_openai(message: Message) -> dict[str, Any]:
    """One message as an OpenAI chat message dict."""
    if message.role in ("system", "developer"):
        # "developer" is OpenAI-only; "system" is understood by every compatible server, and
        # OpenAI itself treats it as developer for the models that use that role.
        return {"role": "system", "content": message.text}
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
    out: dict[str, Any] = {"role": message.role}
    if message.name:
        out["name"] = message.name
    if message.role == "user":
        out["content"] = _content(message)
        return out
    # Assistant: thinking is not sent back (chat completions has no field for it).
    calls = message.tool_calls
    text = message.text
    # "" rather than null: OpenAI accepts both, but some servers (llama-cpp-python's) answer a null
    # content with HTTP 500 and every later turn fails while that round is in the view.
    out["content"] = text
    if calls:
        out["tool_calls"] = [
            {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments or "{}"}}
            for c in calls
        ]
    return out


def messages_to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The messages as the ``messages`` list of a chat-completions request."""
    return [message_to_openai(m) for m in messages]


def _text_of(content: Any, reader: ReplyReader, field: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # Some servers answer with a list of content parts.
        texts: list[str] = []
        for i, p in enumerate(content):
            if isinstance(p, Mapping) and p.get("type") in ("text", None):
                texts.append(reader.text(p.get("text"), f"{field}[{i}].text") or "")
        return "".join(texts)
    raise reader.error(field, content, "a string or a list of content parts")


def message_from_openai(
    data: Mapping[str, Any], *, reader: ReplyReader | None = None, field: str = "choices[0].message"
) -> Message:
    """The assistant `Message` of a chat-completions ``choices[i].message`` dict.

    Raises:
        UpstreamError: A field has the wrong shape (``tool_calls`` not a list, a call without a
            name, arguments that are neither text nor an object, ...); the message names it.
    """
    reader = reader or ReplyReader(None, api="OpenAI chat-completions")
    parts: list[Part] = []
    # vLLM and DeepSeek name it reasoning_content, Ollama and OpenRouter reasoning.
    reasoning = data.get("reasoning_content") or data.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        parts.append(ThinkingPart(text=reasoning))
    text = _text_of(data.get("content"), reader, f"{field}.content")
    if text:
        parts.append(TextPart(text=text))
    for i, call in enumerate(reader.items(data.get("tool_calls"), f"{field}.tool_calls")):
        where = f"{field}.tool_calls[{i}]"
        call = reader.mapping(call, where)
        function = reader.mapping(call.get("function"), f"{where}.function")
        name = reader.name(function.get("name"), f"{where}.function.name")
        arguments = reader.arguments(function.get("arguments"), f"{where}.function.arguments")
        # Some local servers omit the id; the reply still needs one to pair the result with.
        call_id = reader.text(call.get("id"), f"{where}.id") or new_call_id()
        parts.append(ToolCall(call_id=call_id, name=name, arguments=arguments))
    return Message(role="assistant", parts=tuple(parts))


def tool_parts(tool: Mapping[str, Any], index: int) -> tuple[str, str | None, Mapping[str, Any]]:
    """Name, description and JSON schema of a tool given in any of the accepted forms.

    Raises:
        MessageError: The tool has no name.
    """
    if isinstance(tool.get("function"), Mapping):
        tool = tool["function"]
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise MessageError(
            f"tool {index} has no `name` ({dict(tool)!r:.120}); give tools as "
            '{"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}.',
            index=index,
            field="name",
        )
    schema = tool.get("parameters") or tool.get("input_schema") or {"type": "object", "properties": {}}
    description = tool.get("description")
    return name, description if isinstance(description, str) else None, schema


def tools_to_openai(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tool definitions in OpenAI's function format."""
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        if tool.get("type") == "function" and isinstance(tool.get("function"), Mapping):
            out.append(dict(tool))
            continue
        name, description, schema = tool_parts(tool, i)
        function: dict[str, Any] = {"name": name, "parameters": dict(schema)}
        if description:
            function["description"] = description
        out.append({"type": "function", "function": function})
    return out

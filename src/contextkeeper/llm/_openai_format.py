"""Message <-> OpenAI chat-completions dicts, for the OpenAI-compatible client only.

A small private converter so the client does not wait for the general adapters package
(``contextkeeper.adapters.openai_chat``); once that lands, the client can use it instead.
It also normalises tool definitions, which the Anthropic client shares.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..exceptions import MessageError
from ..messages import ImagePart, Message, Part, TextPart, ThinkingPart, ToolCall

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
    out["content"] = text if text or not calls else None
    if calls:
        out["tool_calls"] = [
            {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments or "{}"}}
            for c in calls
        ]
    return out


def messages_to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The messages as the ``messages`` list of a chat-completions request."""
    return [message_to_openai(m) for m in messages]


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # Some servers answer with a list of content parts.
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") in ("text", None)
        )
    return str(content)


def message_from_openai(data: Mapping[str, Any]) -> Message:
    """The assistant `Message` of a chat-completions ``choices[i].message`` dict."""
    parts: list[Part] = []
    # vLLM and DeepSeek name it reasoning_content, Ollama and OpenRouter reasoning.
    reasoning = data.get("reasoning_content") or data.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        parts.append(ThinkingPart(text=reasoning))
    text = _text_of(data.get("content"))
    if text:
        parts.append(TextPart(text=text))
    for call in data.get("tool_calls") or ():
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            # A few servers send decoded objects; the model keeps JSON text.
            arguments = json.dumps(arguments if arguments is not None else {})
        call_id = call.get("id") or new_call_id()
        parts.append(ToolCall(call_id=call_id, name=function.get("name", ""), arguments=arguments))
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

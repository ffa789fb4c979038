"""The three wire dialects the scripted agent speaks: requests read into one shape, replies written back.

OpenAI Chat Completions, OpenAI Responses and Anthropic Messages, each streamed (server-sent events
in the provider's own event format) and not. Only what coding-agent clients send and parse is
covered; the point is that a real client accepts every reply.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Dialect = Literal["chat", "responses", "messages"]

ROUTES: Mapping[str, Dialect] = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
}


@dataclass(frozen=True)
class ToolResult:
    """A tool result at the end of a request's history."""

    call_id: str
    text: str


@dataclass(frozen=True)
class Call:
    """A tool call the agent makes."""

    call_id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class Reply:
    """What the agent answers: optional thinking, text, at most one tool call."""

    text: str = ""
    thinking: str | None = None
    signature: str | None = None
    encrypted: str | None = None
    call: Call | None = None


@dataclass(frozen=True, kw_only=True)
class Request:
    """One request, read into the parts the agent and the assertions look at."""

    dialect: Dialect
    body: Mapping[str, Any]
    tools: Mapping[str, Mapping[str, Any]]
    """Function tools offered, by name: their JSON schema."""
    results: Sequence[ToolResult]
    """The tool results the history ends with (empty when it ends on a user message)."""
    system: Any
    """The request's system prompt as sent (string, blocks, or the developer/system messages)."""
    thinking: Sequence[tuple[str, str]] = field(default_factory=tuple)
    """(thinking text, signature) of every signed thinking block in the history."""
    encrypted: Sequence[str] = field(default_factory=tuple)
    """``encrypted_content`` of every reasoning item in the history."""
    text: str = ""
    """All text of the request (to find references the view makes)."""

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


def text_of(content: Any) -> str:
    """The text of a message content, a list of parts or blocks, or a system field (joined by newlines)."""
    return _text_of(content)


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, list):
                parts.append(_text_of(part))
            elif isinstance(part, Mapping):
                if isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif "content" in part:
                    parts.append(_text_of(part["content"]))
                elif isinstance(part.get("output"), str | list):
                    parts.append(_text_of(part["output"]))
        return "\n".join(parts)
    if isinstance(content, Mapping):
        return _text_of([content])
    return str(content)


def parse(dialect: Dialect, body: Mapping[str, Any]) -> Request:
    """Read ``body`` of a request in ``dialect``."""
    if dialect == "chat":
        return _parse_chat(body)
    if dialect == "responses":
        return _parse_responses(body)
    return _parse_messages(body)


def _parse_chat(body: Mapping[str, Any]) -> Request:
    messages = list(body.get("messages") or [])
    tools = {
        t["function"]["name"]: t["function"].get("parameters") or {}
        for t in body.get("tools") or []
        if t.get("type") == "function"
    }
    results: list[ToolResult] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.insert(0, ToolResult(str(message.get("tool_call_id")), _text_of(message.get("content"))))
    system = [m for m in messages if m.get("role") in ("system", "developer")]
    text = "\n".join(_text_of(m.get("content")) for m in messages)
    return Request(dialect="chat", body=body, tools=tools, results=results, system=system, text=text)


def _parse_responses(body: Mapping[str, Any]) -> Request:
    items = body.get("input")
    items = [{"type": "message", "role": "user", "content": items}] if isinstance(items, str) else list(items or [])
    tools: dict[str, Mapping[str, Any]] = {}
    for tool in body.get("tools") or []:
        if tool.get("type") == "function":
            tools[tool["name"]] = tool.get("parameters") or {}
    results: list[ToolResult] = []
    for item in reversed(items):
        if item.get("type") not in ("function_call_output", "custom_tool_call_output"):
            break
        results.insert(0, ToolResult(str(item.get("call_id")), _text_of(item.get("output"))))
    system = [body.get("instructions"), *(i for i in items if i.get("role") in ("system", "developer"))]
    encrypted = [i["encrypted_content"] for i in items if i.get("type") == "reasoning" and i.get("encrypted_content")]
    text = "\n".join(_text_of(i.get("content") or i.get("output") or i.get("arguments")) for i in items)
    return Request(
        dialect="responses", body=body, tools=tools, results=results, system=system, encrypted=encrypted, text=text
    )


def _parse_messages(body: Mapping[str, Any]) -> Request:
    messages = list(body.get("messages") or [])
    tools = {t["name"]: t.get("input_schema") or {} for t in body.get("tools") or [] if "name" in t}
    results: list[ToolResult] = []
    if messages and messages[-1].get("role") == "user" and isinstance(messages[-1].get("content"), list):
        for block in messages[-1]["content"]:
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                results.append(ToolResult(str(block.get("tool_use_id")), _text_of(block.get("content"))))
    thinking: list[tuple[str, str]] = []
    for message in messages:
        if message.get("role") == "assistant" and isinstance(message.get("content"), list):
            for block in message["content"]:
                if isinstance(block, Mapping) and block.get("type") == "thinking":
                    thinking.append((str(block.get("thinking")), str(block.get("signature"))))
    system = [body.get("system"), *(m for m in messages if m.get("role") == "system")]
    text = "\n".join(_text_of(m.get("content")) for m in messages) + "\n" + _text_of(body.get("system"))
    return Request(
        dialect="messages", body=body, tools=tools, results=results, system=system, thinking=thinking, text=text
    )


# --- replies -------------------------------------------------------------------------------------


def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {payload}\n\n".encode()


def _pieces(text: str, size: int = 24) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def answer(request: Request, reply: Reply, *, prompt_tokens: int) -> tuple[bytes | Iterator[bytes], str]:
    """The body (whole, or an iterator of SSE frames) and its content type."""
    model = str(request.body.get("model", "scripted"))
    streamed = {"chat": _chat_stream, "responses": _responses_stream, "messages": _messages_stream}
    whole = {"chat": _chat, "responses": _responses, "messages": _messages}
    body: Any = (streamed if request.stream else whole)[request.dialect](model, reply, prompt_tokens)
    if isinstance(body, Iterator):
        return body, "text/event-stream"
    return json.dumps(body).encode(), "application/json"


def _chat(model: str, reply: Reply, prompt_tokens: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.call is not None:
        message["tool_calls"] = [
            {
                "id": reply.call.call_id,
                "type": "function",
                "function": {"name": reply.call.name, "arguments": json.dumps(reply.call.arguments)},
            }
        ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if reply.call else "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 20, "total_tokens": prompt_tokens + 20},
    }


def _chat_stream(model: str, reply: Reply, prompt_tokens: int) -> Iterator[bytes]:
    base = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion.chunk", "created": int(time.time())}
    base["model"] = model

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse(None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    yield chunk({"role": "assistant", "content": ""})
    if reply.text:
        for piece in _pieces(reply.text):
            yield chunk({"content": piece})
    if reply.call is not None:
        head = {"index": 0, "id": reply.call.call_id, "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": reply.call.name, "arguments": ""}}]})
        for piece in _pieces(json.dumps(reply.call.arguments)):
            yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if reply.call else "stop")
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 20, "total_tokens": prompt_tokens + 20}
    yield _sse(None, {**base, "choices": [], "usage": usage})
    yield _sse(None, "[DONE]")


def _responses_output(reply: Reply) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = []
    if reply.encrypted is not None:
        output.append(issued_reasoning(reply.encrypted))
    if reply.text:
        output.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:16]}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    if reply.call is not None:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:16]}",
                "call_id": reply.call.call_id,
                "name": reply.call.name,
                "arguments": json.dumps(reply.call.arguments),
                "status": "completed",
            }
        )
    return output


def issued_reasoning(encrypted: str) -> dict[str, Any]:
    """The reasoning item the agent emits for ``encrypted`` (its id derived from it)."""
    digest = hashlib.sha256(encrypted.encode()).hexdigest()[:16]
    return {"type": "reasoning", "id": f"rs_{digest}", "summary": [], "encrypted_content": encrypted}


def _responses(model: str, reply: Reply, prompt_tokens: int, *, status: str = "completed") -> dict[str, Any]:
    return {
        "id": f"resp_{uuid.uuid4().hex[:16]}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": _responses_output(reply) if status == "completed" else [],
        "usage": {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 20,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + 20,
        },
    }


def _responses_stream(model: str, reply: Reply, prompt_tokens: int) -> Iterator[bytes]:
    sequence = 0

    def event(kind: str, data: dict[str, Any]) -> bytes:
        nonlocal sequence
        sequence += 1
        return _sse(kind, {"type": kind, "sequence_number": sequence, **data})

    done = _responses(model, reply, prompt_tokens)
    started = {**done, "status": "in_progress", "output": []}
    yield event("response.created", {"response": started})
    yield event("response.in_progress", {"response": started})
    for index, item in enumerate(done["output"]):
        if item["type"] == "message":
            yield event("response.output_item.added", {"output_index": index, "item": {**item, "content": []}})
            part = {"type": "output_text", "text": "", "annotations": []}
            yield event(
                "response.content_part.added",
                {"item_id": item["id"], "output_index": index, "content_index": 0, "part": part},
            )
            for piece in _pieces(reply.text):
                yield event(
                    "response.output_text.delta",
                    {"item_id": item["id"], "output_index": index, "content_index": 0, "delta": piece},
                )
            yield event(
                "response.output_text.done",
                {"item_id": item["id"], "output_index": index, "content_index": 0, "text": reply.text},
            )
            yield event(
                "response.content_part.done",
                {"item_id": item["id"], "output_index": index, "content_index": 0, "part": item["content"][0]},
            )
        elif item["type"] == "function_call":
            yield event("response.output_item.added", {"output_index": index, "item": {**item, "arguments": ""}})
            for piece in _pieces(item["arguments"]):
                yield event(
                    "response.function_call_arguments.delta",
                    {"item_id": item["id"], "output_index": index, "delta": piece},
                )
            yield event(
                "response.function_call_arguments.done",
                {"item_id": item["id"], "output_index": index, "arguments": item["arguments"]},
            )
        else:
            yield event("response.output_item.added", {"output_index": index, "item": item})
        yield event("response.output_item.done", {"output_index": index, "item": item})
    yield event("response.completed", {"response": done})


def _messages_content(reply: Reply) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    if reply.thinking is not None:
        content.append({"type": "thinking", "thinking": reply.thinking, "signature": reply.signature or ""})
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    if reply.call is not None:
        content.append(
            {"type": "tool_use", "id": reply.call.call_id, "name": reply.call.name, "input": dict(reply.call.arguments)}
        )
    return content


def _messages(model: str, reply: Reply, prompt_tokens: int) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex[:20]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _messages_content(reply),
        "stop_reason": "tool_use" if reply.call else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": prompt_tokens,
            "output_tokens": 20,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def _messages_stream(model: str, reply: Reply, prompt_tokens: int) -> Iterator[bytes]:
    whole = _messages(model, reply, prompt_tokens)
    start = {**whole, "content": [], "stop_reason": None, "usage": {**whole["usage"], "output_tokens": 1}}
    yield _sse("message_start", {"type": "message_start", "message": start})
    for index, block in enumerate(whole["content"]):
        kind = block["type"]
        if kind == "thinking":
            opened: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            opened = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
        else:
            opened = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(json.dumps(block["input"]))]
        yield _sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": opened})
        for delta in deltas:
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": 20},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})

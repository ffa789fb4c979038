"""A LlamaIndex function-calling LLM for a local OpenAI-compatible server (extra ``llamaindex``).

`openai_mock_llm` is LlamaIndex's own ``MockFunctionCallingLLM`` whose responses come from
``POST {base_url}/chat/completions``: the request's chat messages and tools are sent as OpenAI
chat JSON, and the reply's tool calls come back as ``ToolCallBlock`` blocks. It exists for tests,
examples and benchmarks against `ScriptedOpenAIServer` without an LLM integration package (the
``llama-index-llms-openai`` releases for LlamaIndex 0.14 want an older ``openai``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx
from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM

from ..llm.errors import classify_error

__all__ = ["openai_mock_llm"]


def openai_mock_llm(base_url: str, *, model: str = "scripted-model") -> MockFunctionCallingLLM:
    """A ``MockFunctionCallingLLM`` answering from ``{base_url}/chat/completions``."""
    # a fresh connection per request: the scripted server's keep-alive replies meet Nagle's delayed ACK
    client = httpx.Client(timeout=60, limits=httpx.Limits(max_keepalive_connections=0))

    def respond(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        body: dict[str, Any] = {"model": model, "messages": [_openai(m) for m in messages]}
        tools = kwargs.get("tools") or []
        if tools:
            body["tools"] = [t.metadata.to_openai_tool() for t in tools]
        response = client.post(f"{base_url}/chat/completions", json=body)
        if response.status_code >= 400:  # the library's errors, so integrations see a refusal for what it is
            raise classify_error(response.status_code, response.content, url=str(response.url))
        reply = response.json()["choices"][0]["message"]
        blocks: list[Any] = [TextBlock(text=reply["content"])] if reply.get("content") else []
        for call in reply.get("tool_calls") or []:
            arguments = json.loads(call["function"]["arguments"] or "{}")
            blocks.append(
                ToolCallBlock(tool_call_id=call["id"], tool_name=call["function"]["name"], tool_kwargs=arguments)
            )
        return ChatMessage(role="assistant", blocks=blocks)

    return MockFunctionCallingLLM(response_generator=respond, is_chat_model=True)


def _openai(m: ChatMessage) -> dict[str, Any]:
    role = str(getattr(m.role, "value", m.role))
    out: dict[str, Any] = {"role": role, "content": m.content}
    calls = [b for b in m.blocks if isinstance(b, ToolCallBlock)]
    if calls:
        out["tool_calls"] = [
            {
                "id": c.tool_call_id,
                "type": "function",
                "function": {
                    "name": c.tool_name,
                    "arguments": c.tool_kwargs if isinstance(c.tool_kwargs, str) else json.dumps(c.tool_kwargs),
                },
            }
            for c in calls
        ]
    if role == "tool":
        out["tool_call_id"] = m.additional_kwargs.get("tool_call_id")
    return out

"""A pydantic-ai model for a local OpenAI-compatible server, built on pydantic-ai's ``FunctionModel``.

`openai_function_model` converts the request's messages to OpenAI chat messages (text, tool
calls and tool returns) and posts them with httpx. It exists for tests and benchmarks against `ScriptedOpenAIServer`:
pydantic-ai's ``OpenAIChatModel`` works there too, but the OpenAI client's request validation
costs tens of milliseconds per request of a hundred messages, which would dominate a 200-turn
test on a small machine. Use pydantic-ai's models in applications.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from ..llm.errors import classify_error

__all__ = ["openai_function_model"]


def openai_function_model(base_url: str, *, model: str = "scripted-model") -> FunctionModel:
    """A ``FunctionModel`` whose requests go to ``{base_url}/chat/completions``."""
    # a fresh connection per request: the scripted server's keep-alive replies meet Nagle's delayed ACK
    client = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_keepalive_connections=0))

    async def call(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        body: dict[str, Any] = {"model": model, "messages": _openai(messages)}
        if info.instructions:
            body["messages"].insert(0, {"role": "system", "content": info.instructions})
        if info.function_tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters_json_schema},
                }
                for t in info.function_tools
            ]
        response = await client.post(f"{base_url}/chat/completions", json=body)
        if response.status_code >= 400:  # the library's errors, so integrations see a refusal for what it is
            raise classify_error(response.status_code, response.content, url=str(response.url))
        reply = response.json()
        message = reply["choices"][0]["message"]
        parts: list[Any] = [
            ToolCallPart(c["function"]["name"], json.loads(c["function"]["arguments"] or "{}"), tool_call_id=c["id"])
            for c in message.get("tool_calls") or []
        ]
        if message.get("content"):
            parts.insert(0, TextPart(message["content"]))
        usage = reply.get("usage") or {}
        return ModelResponse(
            parts=parts,
            usage=RequestUsage(
                input_tokens=usage.get("prompt_tokens", 0), output_tokens=usage.get("completion_tokens", 0)
            ),
        )

    return FunctionModel(call, model_name=model)


def _openai(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, ModelResponse):
            reply: dict[str, Any] = {"role": "assistant", "content": m.text or None}
            calls = [
                {
                    "id": p.tool_call_id,
                    "type": "function",
                    "function": {"name": p.tool_name, "arguments": p.args_as_json_str()},
                }
                for p in m.parts
                if isinstance(p, ToolCallPart)
            ]
            if calls:
                reply["tool_calls"] = calls
            out.append(reply)
            continue
        for p in m.parts:
            if isinstance(p, SystemPromptPart):
                out.append({"role": "system", "content": p.content})
            elif isinstance(p, UserPromptPart):
                out.append({"role": "user", "content": p.content if isinstance(p.content, str) else str(p.content)})
            elif isinstance(p, ToolReturnPart):
                out.append({"role": "tool", "tool_call_id": p.tool_call_id, "content": p.model_response_str()})
            elif isinstance(p, RetryPromptPart):
                if p.tool_name is None:
                    out.append({"role": "user", "content": p.model_response()})
                else:
                    out.append({"role": "tool", "tool_call_id": p.tool_call_id, "content": p.model_response()})
    return out

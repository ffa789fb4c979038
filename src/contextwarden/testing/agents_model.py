"""A light OpenAI Agents SDK model for a local OpenAI-compatible server (extra ``agents``).

`ChatCompletionsTestModel` converts the run's items with the SDK's own Chat Completions
converter and posts them with httpx. It exists for tests and benchmarks against
`ScriptedOpenAIServer`: the SDK's ``OpenAIChatCompletionsModel`` works there too, but the OpenAI
client's request validation costs tens of milliseconds per request of a hundred messages, which
would dominate a 200-turn test on a small machine. Use the SDK's models in applications.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
from agents import Handoff, Model, ModelResponse, ModelSettings, ModelTracing, Tool, TResponseInputItem, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.models.chatcmpl_converter import Converter
from openai.types.chat import ChatCompletionMessage
from openai.types.responses import ResponseStreamEvent

from ..llm.errors import classify_error

__all__ = ["ChatCompletionsTestModel"]


class ChatCompletionsTestModel(Model):
    """An Agents SDK model posting to ``{base_url}/chat/completions`` (no streaming)."""

    def __init__(self, base_url: str, *, model: str = "scripted-model") -> None:
        self.base_url = base_url
        self.model = model
        # a fresh connection per request: the scripted server's keep-alive replies meet Nagle's delayed ACK
        self._client = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_keepalive_connections=0))

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        """One chat-completions request for the run's input."""
        messages: list[Any] = list(Converter.items_to_messages(input, model=self.model))
        if system_instructions:
            messages.insert(0, {"role": "system", "content": system_instructions})
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            body["tools"] = [Converter.tool_to_openai(t) for t in tools]
        response = await self._client.post(f"{self.base_url}/chat/completions", json=body)
        if response.status_code >= 400:  # the library's errors, so integrations see a refusal for what it is
            raise classify_error(response.status_code, response.content, url=str(response.url))
        reply = response.json()
        message = ChatCompletionMessage.model_validate(reply["choices"][0]["message"])
        usage = reply.get("usage") or {}
        return ModelResponse(
            output=Converter.message_to_output_items(message),
            usage=Usage(
                requests=1,
                input_tokens=usage.get("prompt_tokens", 0),
                output_tokens=usage.get("completion_tokens", 0),
                total_tokens=usage.get("total_tokens", 0),
            ),
            response_id=None,
        )

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[ResponseStreamEvent]:
        """Not supported: the benchmarks and tests run without streaming."""
        raise NotImplementedError("ChatCompletionsTestModel does not stream; use Runner.run, not run_streamed.")

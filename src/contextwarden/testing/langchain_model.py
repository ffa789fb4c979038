"""A light LangChain chat model for a local OpenAI-compatible server (extras ``langchain`` and ``llm``).

`OpenAICompatibleChatModel` sends LangChain messages to ``POST {base_url}/chat/completions``
with httpx and LangChain's own converter. It exists for tests and benchmarks against
`ScriptedOpenAIServer`: ``langchain_openai.ChatOpenAI`` works there too, but the OpenAI SDK's
request validation costs tens of milliseconds per request of a hundred messages, which would
dominate a 200-turn test on a small machine. Use ``ChatOpenAI`` in applications.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import PrivateAttr

from ..llm.errors import classify_error

__all__ = ["OpenAICompatibleChatModel"]


class OpenAICompatibleChatModel(BaseChatModel):
    """A LangChain chat model speaking the OpenAI chat API through contextwarden's client."""

    base_url: str
    """The server's ``/v1`` address."""
    model: str = "scripted-model"
    """The model name sent."""
    # a fresh connection per request: the scripted server's keep-alive replies meet Nagle's delayed ACK (40 ms each)
    _client: httpx.Client = PrivateAttr(
        default_factory=lambda: httpx.Client(timeout=60, limits=httpx.Limits(max_keepalive_connections=0))
    )

    @property
    def _llm_type(self) -> str:
        return "contextwarden-openai-compatible"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Send ``tools`` (LangChain tools, functions or OpenAI schemas) with every request."""
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        body: dict[str, Any] = {"model": self.model, "messages": convert_to_openai_messages(messages)}
        if kwargs.get("tools"):
            body["tools"] = kwargs["tools"]
        response = self._client.post(f"{self.base_url}/chat/completions", json=body)
        if response.status_code >= 400:  # the library's errors, so integrations see a refusal for what it is
            raise classify_error(response.status_code, response.content, url=str(response.url))
        reply = response.json()
        choice = reply["choices"][0]["message"]
        calls = [
            {"id": c["id"], "name": c["function"]["name"], "args": json.loads(c["function"]["arguments"] or "{}")}
            for c in choice.get("tool_calls") or []
        ]
        usage = reply.get("usage") or {}
        message = AIMessage(content=choice.get("content") or "", tool_calls=calls, id=reply.get("id"))
        if usage:
            message.usage_metadata = {
                "input_tokens": usage.get("prompt_tokens", 0),
                "output_tokens": usage.get("completion_tokens", 0),
                "total_tokens": usage.get("total_tokens", 0),
            }
        return ChatResult(generations=[ChatGeneration(message=message)])

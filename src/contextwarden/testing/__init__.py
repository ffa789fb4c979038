"""Helpers for testing agents built on contextwarden without a real model.

`ScriptedOpenAIServer` is a real local HTTP server speaking the OpenAI chat API (and Anthropic's
Messages API) from a script; the in-process doubles `TestModel` and `FunctionModel` live in
`contextwarden.llm.test`.
"""

from __future__ import annotations

from .openai_server import (
    ReceivedRequest,
    ScriptedDisconnect,
    ScriptedError,
    ScriptedOpenAIServer,
    ScriptedReply,
    ScriptedStream,
    ServerScriptItem,
)

__all__ = [
    "ReceivedRequest",
    "ScriptedDisconnect",
    "ScriptedError",
    "ScriptedOpenAIServer",
    "ScriptedReply",
    "ScriptedStream",
    "ServerScriptItem",
]

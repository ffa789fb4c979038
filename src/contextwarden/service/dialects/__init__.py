"""The API dialects the proxy speaks, one module each, behind one contract (`Dialect`)."""

from __future__ import annotations

from .anthropic_messages import AnthropicMessages
from .base import Conversation, Dialect, Reply, StreamAssembler
from .openai_chat import OpenAIChat
from .openai_responses import OpenAIResponses

__all__ = [
    "DIALECTS",
    "AnthropicMessages",
    "Conversation",
    "Dialect",
    "OpenAIChat",
    "OpenAIResponses",
    "Reply",
    "StreamAssembler",
]

DIALECTS: tuple[Dialect, ...] = (OpenAIChat(), AnthropicMessages(), OpenAIResponses())
"""One instance of each dialect (they hold no state)."""

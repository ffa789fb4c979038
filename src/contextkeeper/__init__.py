"""contextkeeper: keep long-running LLM agents inside their context window without forgetting."""

from __future__ import annotations

from ._version import __version__
from .exceptions import (
    BudgetExceeded,
    CompactionFailed,
    ConfigError,
    ContextKeeperError,
    ContextOverflowError,
    MessageError,
    SchemaError,
    SessionNotFound,
    SnapshotError,
    StoreError,
    StoreUnavailable,
    ToolPairError,
    UnknownModelError,
    UpstreamError,
    UsageError,
    VersionConflict,
)
from .messages import ImagePart, Message, TextPart, ThinkingPart, ToolCall

__all__ = [
    "BudgetExceeded",
    "CompactionFailed",
    "ConfigError",
    "ContextKeeperError",
    "ContextOverflowError",
    "ImagePart",
    "Message",
    "MessageError",
    "SchemaError",
    "SessionNotFound",
    "SnapshotError",
    "StoreError",
    "StoreUnavailable",
    "TextPart",
    "ThinkingPart",
    "ToolCall",
    "ToolPairError",
    "UnknownModelError",
    "UpstreamError",
    "UsageError",
    "VersionConflict",
    "__version__",
]

"""contextkeeper: keep long-running LLM agents inside their context window without forgetting."""

from __future__ import annotations

from ._version import __version__
from .adapters import Format, detect_format, from_messages, to_messages
from .agent_state import AgentState, CompletedSubtask
from .budget import (
    Budget,
    BudgetCheck,
    ComponentBudgets,
    PressureMonitor,
    PressureReport,
    PressureState,
    Thresholds,
)
from .compaction.config import CompactionConfig, HybridWeights
from .compaction.engine import ViewStatus
from .compaction.summarizer import AsyncSummarizer, Summarizer, SummaryRequest
from .events import (
    Alert,
    CompactionFinished,
    CompactionStarted,
    ContextStatus,
    Event,
    EventBus,
    SnapshotWritten,
)
from .exceptions import (
    AgentStateError,
    BudgetExceeded,
    CompactionFailed,
    ConfigError,
    ContextKeeperError,
    ContextOverflowError,
    LockTimeout,
    MessageError,
    MessageNotFound,
    SchemaError,
    SessionExists,
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
from .ledger import Ledger, LedgerEntry
from .messages import ImagePart, Message, TextPart, ThinkingPart, ToolCall
from .models import ModelInfo, list_models, lookup_model, register_model
from .rounds import Round, group_rounds
from .session import AsyncSession, PreparedView, Session
from .snapshots import READ_CONTEXT_TOOL, FileSnapshotStore, MemorySnapshotStore, SnapshotStore
from .stores import AsyncSessionStore, SessionInfo, SessionStore, open_async_store, open_store
from .tokens import TokenCounter, counter_for_model, get_counter
from .tokens.accountant import ANTHROPIC_FRAMING, GEMINI_FRAMING, OPENAI_FRAMING, Framing, TokenAccountant
from .toolpairs import Problem, is_valid, repair, validate
from .usage import RequestUsage, SessionUsage

__all__ = [
    "ANTHROPIC_FRAMING",
    "GEMINI_FRAMING",
    "OPENAI_FRAMING",
    "READ_CONTEXT_TOOL",
    "AgentState",
    "AgentStateError",
    "Alert",
    "AsyncSession",
    "AsyncSessionStore",
    "AsyncSummarizer",
    "Budget",
    "BudgetCheck",
    "BudgetExceeded",
    "CompactionConfig",
    "CompactionFailed",
    "CompactionFinished",
    "CompactionStarted",
    "CompletedSubtask",
    "ComponentBudgets",
    "ConfigError",
    "ContextKeeperError",
    "ContextOverflowError",
    "ContextStatus",
    "Event",
    "EventBus",
    "FileSnapshotStore",
    "Format",
    "Framing",
    "HybridWeights",
    "ImagePart",
    "Ledger",
    "LedgerEntry",
    "LockTimeout",
    "MemorySnapshotStore",
    "Message",
    "MessageError",
    "MessageNotFound",
    "ModelInfo",
    "PreparedView",
    "PressureMonitor",
    "PressureReport",
    "PressureState",
    "Problem",
    "RequestUsage",
    "Round",
    "SchemaError",
    "Session",
    "SessionExists",
    "SessionInfo",
    "SessionNotFound",
    "SessionStore",
    "SessionUsage",
    "SnapshotError",
    "SnapshotStore",
    "SnapshotWritten",
    "StoreError",
    "StoreUnavailable",
    "Summarizer",
    "SummaryRequest",
    "TextPart",
    "ThinkingPart",
    "Thresholds",
    "TokenAccountant",
    "TokenCounter",
    "ToolCall",
    "ToolPairError",
    "UnknownModelError",
    "UpstreamError",
    "UsageError",
    "VersionConflict",
    "ViewStatus",
    "counter_for_model",
    "detect_format",
    "from_messages",
    "get_counter",
    "group_rounds",
    "is_valid",
    "list_models",
    "lookup_model",
    "open_async_store",
    "open_store",
    "register_model",
    "repair",
    "to_messages",
    "validate",
    "__version__",
]

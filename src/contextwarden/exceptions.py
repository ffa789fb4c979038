"""Errors raised by contextwarden.

Every error derives from one root so that ``except ContextWardenError`` catches all of them::

    ContextWardenError
    ├── UsageError                  a developer mistake: fix the call or the input
    │   ├── ConfigError             invalid configuration value
    │   ├── MessageError            a message that cannot be understood (index, field, fix)
    │   │   └── ToolPairError       a tool result whose call is unknown, or a second result
    │   ├── UnknownModelError       a model the registry does not know and no window was given
    │   ├── AgentStateError         an AgentState that breaks its invariants (lists the problems)
    │   ├── MemoryQueryError        a recall query that is empty, too long or not text
    │   └── MemoryRecordError       a memory record field of the wrong type or out of range
    ├── BudgetExceeded              the protected part of the view cannot fit the budget
    ├── CompactionFailed            a compaction layer failed (the summarizer, usually)
    │   └── SummaryRejected         a summarizer failed or was rejected; carries a fallback summary
    ├── StoreError                  a session store failed
    │   ├── StoreUnavailable        the store's server cannot be reached
    │   ├── VersionConflict         a compare-and-set lost against a newer write
    │   ├── SessionNotFound         no session with that id (for that tenant)
    │   │   └── SessionLost         a live session's store no longer has it (restarted empty, deleted)
    │   ├── SessionExists           an import would overwrite an existing session
    │   ├── MessageNotFound         no message with that id in the session
    │   ├── LockTimeout             the session lock was not acquired in time
    │   └── SchemaError             a corrupted row or an unknown schema version
    ├── SnapshotError               a snapshot reference that is invalid or missing
    └── UpstreamError               the model server failed (url, status)
        ├── StreamInterrupted       a streamed reply ended before its end marker (or sent nothing)
        ├── EmbedderError           an embedder failed or returned vectors of the wrong shape
        └── ContextOverflowError    the provider says the prompt is too long
            └── OverflowUnresolved  emergency compaction could not shrink the view any further

Runtime conditions (``BudgetExceeded``, ``StoreError``, ``UpstreamError``) are kept apart from
developer mistakes (``UsageError``), so an agent loop can retry the former and fix the latter.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "AgentStateError",
    "BudgetExceeded",
    "CompactionFailed",
    "ConfigError",
    "ContextOverflowError",
    "ContextWardenError",
    "EmbedderError",
    "LockTimeout",
    "MemoryQueryError",
    "MemoryRecordError",
    "MessageError",
    "MessageNotFound",
    "OverflowUnresolved",
    "SchemaError",
    "SessionExists",
    "SessionLost",
    "SessionNotFound",
    "SnapshotError",
    "StoreError",
    "StoreUnavailable",
    "StreamInterrupted",
    "SummaryRejected",
    "ToolPairError",
    "UnknownModelError",
    "UpstreamError",
    "UsageError",
    "VersionConflict",
]


class ContextWardenError(Exception):
    """Root of every error raised by contextwarden."""


class UsageError(ContextWardenError):
    """A developer mistake: the call or its input must change."""


class ConfigError(UsageError):
    """A configuration value is invalid."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class MessageError(UsageError):
    """A message cannot be understood; the message names its index, the field and the fix."""

    def __init__(self, message: str, *, index: int | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.index = index
        self.field = field


class ToolPairError(MessageError):
    """A tool result whose call is unknown, or a second result for the same call."""

    def __init__(self, message: str, *, index: int | None = None, call_id: str | None = None) -> None:
        super().__init__(message, index=index, field="tool_call_id")
        self.call_id = call_id


class UnknownModelError(UsageError):
    """The model registry does not know the model and no context window was given."""

    def __init__(self, message: str, *, model: str) -> None:
        super().__init__(message)
        self.model = model


class BudgetExceeded(ContextWardenError):
    """The protected part of the view (system, pinned, current request) cannot fit the budget."""

    def __init__(self, message: str, *, budget: int, used: int, breakdown: Mapping[str, int] | None = None) -> None:
        super().__init__(message)
        self.budget = budget
        self.used = used
        self.breakdown = dict(breakdown or {})


class CompactionFailed(ContextWardenError):
    """A compaction layer failed; the deterministic layers keep working."""

    def __init__(self, message: str, *, layer: str) -> None:
        super().__init__(message)
        self.layer = layer


class SummaryRejected(CompactionFailed):
    """A summarizer's model failed, timed out or wrote a summary that was rejected.

    It still counts as a failure of the summary layer (the circuit breaker sees it), but the
    summarizer already computed a usable replacement: ``fallback`` (the extractive summary, or
    the model's summary with the identifiers it dropped restored). A session uses that text
    instead of keeping the previous summary.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        fallback: str | None,
        span: tuple[str, str] | None = None,
    ) -> None:
        super().__init__(message, layer="summarize")
        self.reason = reason
        """``timeout``, ``error``, ``rejected`` (empty or an error text) or ``lost-identifiers``."""
        self.fallback = fallback
        """The summary to use instead (None when none could be made)."""
        self.span = span
        """First and last message id the summary covers."""


class StoreError(ContextWardenError):
    """A session store failed."""

    def __init__(self, message: str, *, session_id: str | None = None) -> None:
        super().__init__(message)
        self.session_id = session_id


class StoreUnavailable(StoreError):
    """The store's server cannot be reached; retry after it is back."""


class VersionConflict(StoreError):
    """A compare-and-set write lost against a newer version; reload and retry."""

    def __init__(self, message: str, *, session_id: str | None = None, expected: int, actual: int) -> None:
        super().__init__(message, session_id=session_id)
        self.expected = expected
        self.actual = actual


class SessionNotFound(StoreError):
    """No session with that id exists in the store (or none that belongs to the tenant asked for)."""


class SessionLost(SessionNotFound):
    """A live `Session`'s store no longer has the session: it restarted empty, expired it or deleted it.

    The session's transcript and view are still in the process's memory; `Session.restore_to_store`
    writes them back.
    """


class SchemaError(StoreError):
    """A corrupted row or an unknown schema version."""


class SessionExists(StoreError):
    """An import would overwrite a session that already exists."""


class MessageNotFound(StoreError):
    """No message with that id exists in the session's transcript."""

    def __init__(self, message: str, *, session_id: str | None = None, message_id: str) -> None:
        super().__init__(message, session_id=session_id)
        self.message_id = message_id


class LockTimeout(StoreError):
    """The session lock was not acquired within the timeout; another worker holds it."""

    def __init__(
        self,
        message: str,
        *,
        session_id: str | None = None,
        timeout: float,
        holder: str | None = None,
        since: float | None = None,
        expires_in: float | None = None,
    ) -> None:
        super().__init__(message, session_id=session_id)
        self.timeout = timeout
        self.holder = holder
        """Who holds the lock (``host pid N``, or a Postgres backend), when the store knows."""
        self.since = since
        """Unix time the holder took the lock, when the store knows."""
        self.expires_in = expires_in
        """Seconds until the holder's lease ends unless it renews it (a live holder does), when known."""


class MemoryRecordError(UsageError):
    """A memory record with a field of the wrong type, out of range, or with text no store can keep."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class AgentStateError(UsageError):
    """An `AgentState` breaks its invariants; ``problems`` lists every one found."""

    def __init__(self, message: str, *, problems: list[str]) -> None:
        super().__init__(message)
        self.problems = problems


class MemoryQueryError(UsageError):
    """A recall query that cannot be answered: empty, longer than the limit, or not text."""

    def __init__(self, message: str, *, field: str = "query") -> None:
        super().__init__(message)
        self.field = field


class SnapshotError(ContextWardenError):
    """A snapshot reference is invalid, escapes its session, or is missing."""


class UpstreamError(ContextWardenError):
    """The model server failed."""

    def __init__(self, message: str, *, url: str | None = None, status_code: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status_code = status_code


class ContextOverflowError(UpstreamError):
    """The provider rejected the request because the prompt is longer than the model's window."""

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        status_code: int | None = None,
        limit: int | None = None,
        requested: int | None = None,
    ) -> None:
        super().__init__(message, url=url, status_code=status_code)
        self.limit = limit
        """The window (or input limit) the provider reported, in tokens, when it said so."""
        self.requested = requested
        """The tokens the request needed according to the provider, when it said so."""


class EmbedderError(UpstreamError):
    """An embedder failed, or returned vectors of the wrong count or dimension (recall falls back to keywords)."""


class StreamInterrupted(UpstreamError):
    """A streamed reply ended before the provider's end marker, or the server sent no event at all.

    Some servers answer a prompt that is too long for their window with HTTP 200 and an empty
    event stream (llama-cpp-python's server does); `Session.stream` then asks once more without
    streaming to learn the real error.
    """


class OverflowUnresolved(ContextOverflowError):
    """The provider said the prompt is too long and emergency compaction could not shrink the view.

    Raised instead of sending the same view again; ``view_tokens`` is the view's size as counted.
    """

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        status_code: int | None = None,
        limit: int | None = None,
        requested: int | None = None,
        view_tokens: int,
    ) -> None:
        super().__init__(message, url=url, status_code=status_code, limit=limit, requested=requested)
        self.view_tokens = view_tokens
        """Tokens of the view that could not be made smaller (the library's count, calibrated)."""

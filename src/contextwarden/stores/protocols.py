"""What a store knows about a session (`SessionInfo`) and the two public store contracts.

`SessionStore` and `AsyncSessionStore` are the Protocols third parties implement; contextwarden's
own backends implement them on `BaseStore` / `BaseAsyncStore` (see `stores.base`).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..messages import Message
from .values import DEFAULT_SLOT, check_format, check_stored_text, corrupted, loads_stored, stored_float, stored_int

__all__ = ["AsyncSessionStore", "SessionInfo", "SessionStore", "StateWrite", "session_info"]


@dataclass(frozen=True, kw_only=True)
class StateWrite:
    """A state slot saved in the same write as appended messages (`SessionStore.append_messages`).

    For display records that must not lag the transcript (a session's figures): it is saved over
    whatever version the slot holds, last writer wins, never a conflict.
    """

    slot: str
    state: Mapping[str, Any]
    version: int = 0
    """The slot's version the writer last saw (saves a read when it is still current)."""


@dataclass(frozen=True, kw_only=True)
class SessionInfo:
    """What a store knows about a session besides its content."""

    session_id: str
    tenant: str
    """Owner of the session; the service isolates tenants by it."""
    created_at: float
    """Unix time the session was created."""
    last_active: float
    """Unix time of the last write or `touch`; idle expiry is measured from it."""
    model: str | None = None
    """Model the session talks to, when known."""
    window: int | None = None
    """Context window in tokens, when known."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Free-form JSON metadata given at creation."""
    archived_at: float | None = None
    """Unix time the session was archived; archived sessions are kept but hidden from listing and expiry."""
    message_count: int = 0
    """Number of messages in the transcript."""

    @property
    def archived(self) -> bool:
        """Whether the session was archived."""
        return self.archived_at is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "session_id": self.session_id,
            "tenant": self.tenant,
            "created_at": self.created_at,
            "last_active": self.last_active,
            "model": self.model,
            "window": self.window,
            "metadata": dict(self.metadata),
            "archived_at": self.archived_at,
            "message_count": self.message_count,
        }


def session_info(
    session_id: str,
    *,
    tenant: object,
    created_at: object,
    last_active: object,
    model: object,
    window: object,
    metadata: str,
    archived_at: object,
    message_count: object,
    fmt: object,
) -> SessionInfo:
    """Build a `SessionInfo` from stored fields, checking the format and the type of every field.

    Raises:
        SchemaError: a field of the wrong type or not valid UTF-8 (the message names the session and
            the field), or a format newer than this release reads.
    """
    check_format(session_id, stored_int(fmt, session_id=session_id, what="`format`"))
    meta = loads_stored(metadata, session_id=session_id, what="session `metadata`")
    if not isinstance(meta, dict):
        raise corrupted(session_id, "session `metadata`", f"{type(meta).__name__}, not an object")
    model_name = None if model is None else check_stored_text(model, session_id=session_id, what="session `model`")
    window_value = (
        None if window is None else stored_int(window, session_id=session_id, what="session `window`", minimum=1)
    )
    return SessionInfo(
        session_id=session_id,
        tenant=check_stored_text(tenant, session_id=session_id, what="session `tenant`"),
        created_at=stored_float(created_at, session_id=session_id, what="session `created_at`"),
        last_active=stored_float(last_active, session_id=session_id, what="session `last_active`"),
        model=model_name,
        window=window_value,
        metadata=meta,
        archived_at=None
        if archived_at is None
        else stored_float(archived_at, session_id=session_id, what="session `archived_at`"),
        message_count=stored_int(message_count, session_id=session_id, what="session `message_count`", minimum=0),
    )


@runtime_checkable
class SessionStore(Protocol):
    """Where sessions live: transcript, versioned state, snapshots, audit log and metadata.

    Every method taking a ``session_id`` raises `SessionNotFound` when the session does not exist
    (create it with `create_session`), `UsageError` for an invalid id, and `StoreUnavailable` when
    the backing server cannot be reached. Each also takes ``tenant``: when given, a session that
    belongs to another tenant raises the very `SessionNotFound` a missing session raises (the
    check is part of the same atomic operation). Stored data that cannot be read back (a wrong
    type, invalid UTF-8, broken JSON) raises `SchemaError` naming the session and the field.
    """

    def create_session(
        self,
        session_id: str,
        *,
        tenant: str = "default",
        model: str | None = None,
        window: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        """Create the session if it is missing; return it (the existing one, unchanged, if it was there).

        Raises:
            SessionNotFound: the id is taken by a session of another tenant (it is neither
                returned nor changed; choose another id).
        """
        ...

    def get_session(self, session_id: str, *, tenant: str | None = None) -> SessionInfo:
        """The session's metadata."""
        ...

    def touch(self, session_id: str, *, tenant: str | None = None) -> None:
        """Mark the session active now (writes do this too)."""
        ...

    def list_sessions(
        self,
        *,
        tenant: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        include_archived: bool = False,
    ) -> tuple[list[SessionInfo], str | None]:
        """One page of sessions ordered by id (only ``tenant``'s when given), and the cursor of the next page."""
        ...

    def archive(self, session_id: str, *, tenant: str | None = None) -> None:
        """Archive the session: kept and readable, but hidden from listing and never expired."""
        ...

    def delete_session(self, session_id: str, *, tenant: str | None = None) -> None:
        """Delete the session and everything stored under it."""
        ...

    def expire_idle(self, max_idle_seconds: float) -> list[str]:
        """Delete every non-archived session idle for longer than ``max_idle_seconds``; return their ids."""
        ...

    def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        tenant: str | None = None,
        expected_count: int | None = None,
        state: StateWrite | None = None,
    ) -> int:
        """Append to the transcript in one transaction; return how many were new.

        A message whose ``message_id`` is already stored is skipped (appends are idempotent). The
        batch is all-or-nothing and keeps its order. With ``expected_count`` the append is a
        compare-and-set on the transcript's length: it happens only if the transcript holds exactly
        that many messages. With ``state``, that slot is saved in the same write (SQL: the same
        transaction), after the messages.

        Raises:
            VersionConflict: ``expected_count`` is not the transcript's length (``actual`` is); nothing was written.
        """
        ...

    def load_messages(
        self, session_id: str, *, start: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[Message]:
        """Transcript messages from position ``start`` (0-based), at most ``limit`` of them."""
        ...

    def count_messages(self, session_id: str, *, tenant: str | None = None) -> int:
        """Number of messages in the transcript."""
        ...

    def get_message(self, session_id: str, message_id: str, *, tenant: str | None = None) -> Message:
        """One transcript message by id; raises `MessageNotFound` when absent."""
        ...

    def load_state(
        self, session_id: str, *, slot: str = DEFAULT_SLOT, tenant: str | None = None
    ) -> tuple[dict[str, Any] | None, int]:
        """The JSON state saved in ``slot`` and its version (``(None, 0)`` before the first save)."""
        ...

    def save_state(
        self,
        session_id: str,
        state: Mapping[str, Any],
        *,
        expected_version: int,
        slot: str = DEFAULT_SLOT,
        tenant: str | None = None,
    ) -> int:
        """Compare-and-set: save ``state`` if the stored version is ``expected_version``; return the new version.

        Raises:
            VersionConflict: another writer saved first; reload with `load_state` and retry.
        """
        ...

    def put_snapshot(
        self,
        session_id: str,
        snapshot_id: str,
        data: bytes,
        *,
        metadata: Mapping[str, Any] | None = None,
        tenant: str | None = None,
    ) -> None:
        """Store a blob under the session; writing the same id again replaces it."""
        ...

    def get_snapshot(self, session_id: str, snapshot_id: str, *, tenant: str | None = None) -> bytes:
        """The blob stored under ``snapshot_id``; raises `SnapshotError` when missing."""
        ...

    def list_snapshots(self, session_id: str, *, tenant: str | None = None) -> list[str]:
        """Snapshot ids of the session, sorted."""
        ...

    def append_audit(self, session_id: str, event: Mapping[str, Any], *, tenant: str | None = None) -> None:
        """Append one JSON event to the session's audit log."""
        ...

    def read_audit(
        self, session_id: str, *, since: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[dict[str, Any]]:
        """Audit events from position ``since`` (0-based), oldest first."""
        ...

    def export_session(self, session_id: str, *, tenant: str | None = None) -> Iterator[str]:
        """The whole session as JSONL lines (each ending in a newline), for `import_session`."""
        ...

    def import_session(
        self, lines: Iterable[str | bytes], *, session_id: str | None = None, tenant: str | None = None
    ) -> SessionInfo:
        """Recreate a session from `export_session` lines, under ``session_id`` or the exported id.

        Every line is read and checked before anything is written: the header, each message (as
        `Session.add` would check it), the tool pairs of the transcript (no result without its
        call, no second result), states (the view state in slot ``"view"`` as a session opens it:
        its ``format`` and its shape), snapshots and audit events. ``tenant`` puts the session
        under that tenant instead of the one the export names (a service importing a tenant's
        upload passes it).

        Raises:
            SessionExists: the target session already exists.
            SchemaError: the lines are not a valid contextwarden export (the message names the line
                and the field); nothing was written.
        """
        ...

    def lock(
        self, session_id: str, *, timeout: float = 10.0, tenant: str | None = None
    ) -> AbstractContextManager[None]:
        """Hold the session's lock (for compaction) while the block runs; `LockTimeout` after ``timeout`` s.

        The holder's lease is renewed in the background while the block runs; a holder that dies
        loses the lock within one lease (Postgres: when its connection closes).
        """
        ...

    def close(self) -> None:
        """Release the connections the store owns."""
        ...


@runtime_checkable
class AsyncSessionStore(Protocol):
    """The async twin of `SessionStore`: the same methods, awaited."""

    async def create_session(
        self,
        session_id: str,
        *,
        tenant: str = "default",
        model: str | None = None,
        window: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo: ...

    async def get_session(self, session_id: str, *, tenant: str | None = None) -> SessionInfo: ...

    async def touch(self, session_id: str, *, tenant: str | None = None) -> None: ...

    async def list_sessions(
        self,
        *,
        tenant: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        include_archived: bool = False,
    ) -> tuple[list[SessionInfo], str | None]: ...

    async def archive(self, session_id: str, *, tenant: str | None = None) -> None: ...

    async def delete_session(self, session_id: str, *, tenant: str | None = None) -> None: ...

    async def expire_idle(self, max_idle_seconds: float) -> list[str]: ...

    async def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        tenant: str | None = None,
        expected_count: int | None = None,
        state: StateWrite | None = None,
    ) -> int: ...

    async def load_messages(
        self, session_id: str, *, start: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[Message]: ...

    async def count_messages(self, session_id: str, *, tenant: str | None = None) -> int: ...

    async def get_message(self, session_id: str, message_id: str, *, tenant: str | None = None) -> Message: ...

    async def load_state(
        self, session_id: str, *, slot: str = DEFAULT_SLOT, tenant: str | None = None
    ) -> tuple[dict[str, Any] | None, int]: ...

    async def save_state(
        self,
        session_id: str,
        state: Mapping[str, Any],
        *,
        expected_version: int,
        slot: str = DEFAULT_SLOT,
        tenant: str | None = None,
    ) -> int: ...

    async def put_snapshot(
        self,
        session_id: str,
        snapshot_id: str,
        data: bytes,
        *,
        metadata: Mapping[str, Any] | None = None,
        tenant: str | None = None,
    ) -> None: ...

    async def get_snapshot(self, session_id: str, snapshot_id: str, *, tenant: str | None = None) -> bytes: ...

    async def list_snapshots(self, session_id: str, *, tenant: str | None = None) -> list[str]: ...

    async def append_audit(self, session_id: str, event: Mapping[str, Any], *, tenant: str | None = None) -> None: ...

    async def read_audit(
        self, session_id: str, *, since: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[dict[str, Any]]: ...

    def export_session(self, session_id: str, *, tenant: str | None = None) -> AsyncIterator[str]: ...

    async def import_session(
        self,
        lines: Iterable[str | bytes] | AsyncIterable[str | bytes],
        *,
        session_id: str | None = None,
        tenant: str | None = None,
    ) -> SessionInfo: ...

    def lock(
        self, session_id: str, *, timeout: float = 10.0, tenant: str | None = None
    ) -> AbstractAsyncContextManager[None]: ...

    async def aclose(self) -> None: ...

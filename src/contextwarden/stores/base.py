"""The session-store base classes: `BaseStore` (sync) and `BaseAsyncStore` (async) drive the same flows.

`SessionStore` and `AsyncSessionStore` (`stores.protocols`) are the public Protocols; third
parties implement them. Our own backends subclass `BaseStore` / `BaseAsyncStore`, which run the
store's flows (`stores.flows`: every check, every decision, the export format, the lock loop)
and hold nothing else. A backend supplies two things:

* ``_ops``: an object whose methods are *generators* (sans-IO, `StoreOps`). Each yields backend
  commands (an SQL statement, a Redis command) and receives their results, so one implementation
  of the logic serves both the sync and the async twin.
* ``_run(op, write=...)``: the driver that runs one such generator inside one transaction.

Data layout per session (the same on every backend): metadata, an append-only transcript of
`Message` JSON with a sequence number per message and a unique message id, named state slots
(``"view"`` for the compaction state, ``"agent"`` for `AgentState`) each with a version for
compare-and-set, snapshots (bytes + JSON metadata), and an append-only audit log of JSON events.

Tenants: every call that names a session also takes ``tenant``. Given, it must be the session's
tenant, checked in the same atomic operation; a session of another tenant fails exactly like a
missing one (`SessionNotFound`, the same message), so a tenant cannot even tell it exists.

Locks: see `stores.locks`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from types import TracebackType
from typing import Any, Self

import anyio

from ..exceptions import StoreError
from ..messages import Message
from .flows import StoreFlows
from .locks import DEFAULT_LOCK_LEASE, Heartbeat, heartbeat, lock_timeout, new_owner, sole
from .ops import Flow, Op, StoreOps, T, adrive, aresume, arun_flow, arun_stream, drive, resume, run_flow, run_stream
from .protocols import AsyncSessionStore, SessionInfo, SessionStore, StateWrite, session_info
from .values import (
    DEFAULT_SLOT,
    FORMAT_VERSION,
    MAX_ID_LENGTH,
    check_format,
    check_id,
    corrupted,
    not_found,
    stored_int,
    transcript_moved,
)

__all__ = [
    "DEFAULT_LOCK_LEASE",
    "DEFAULT_SLOT",
    "FORMAT_VERSION",
    "MAX_ID_LENGTH",
    "AsyncSessionStore",
    "BaseAsyncStore",
    "BaseStore",
    "Op",
    "SessionInfo",
    "SessionStore",
    "StoreOps",
    "adrive",
    "aresume",
    "check_format",
    "check_id",
    "corrupted",
    "drive",
    "lock_timeout",
    "not_found",
    "resume",
    "session_info",
    "stored_int",
    "transcript_moved",
]

logger = logging.getLogger(__name__)


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


class BaseStore(StoreFlows):
    """Shared implementation of `SessionStore`; a backend provides ``_ops`` and ``_run``."""

    def _run(self, op: Op[T], *, write: bool) -> T:
        """Run ``op`` in one transaction (a write transaction when ``write``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement `_run`")

    def _step(self, op: Op[Any], write: bool) -> Any:
        return self._run(op, write=write)

    def _drive(self, flow: Flow[T]) -> T:
        return run_flow(flow, self._step, _sleep)

    def setup(self) -> None:
        """Create or migrate the backend's schema (idempotent; stores also do it on first use)."""
        self._drive(self._setup_flow())

    def close(self) -> None:
        """Release the resources the store owns (a given connection or client stays open)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # lifecycle
    def create_session(
        self,
        session_id: str,
        *,
        tenant: str = "default",
        model: str | None = None,
        window: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        return self._drive(self._create_session_flow(session_id, tenant, model, window, metadata))

    def get_session(self, session_id: str, *, tenant: str | None = None) -> SessionInfo:
        return self._drive(self._get_session_flow(session_id, tenant))

    def touch(self, session_id: str, *, tenant: str | None = None) -> None:
        self._drive(self._touch_flow(session_id, tenant))

    def list_sessions(
        self,
        *,
        tenant: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        include_archived: bool = False,
    ) -> tuple[list[SessionInfo], str | None]:
        return self._drive(self._list_sessions_flow(tenant, limit, cursor, include_archived))

    def archive(self, session_id: str, *, tenant: str | None = None) -> None:
        self._drive(self._archive_flow(session_id, tenant))

    def delete_session(self, session_id: str, *, tenant: str | None = None) -> None:
        self._drive(self._delete_session_flow(session_id, tenant))

    def expire_idle(self, max_idle_seconds: float) -> list[str]:
        return self._drive(self._expire_idle_flow(max_idle_seconds))

    # transcript
    def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        tenant: str | None = None,
        expected_count: int | None = None,
        state: StateWrite | None = None,
    ) -> int:
        return self._drive(self._append_messages_flow(session_id, messages, tenant, expected_count, state))

    def load_messages(
        self, session_id: str, *, start: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[Message]:
        return self._drive(self._load_messages_flow(session_id, start, limit, tenant))

    def count_messages(self, session_id: str, *, tenant: str | None = None) -> int:
        return self._drive(self._count_messages_flow(session_id, tenant))

    def get_message(self, session_id: str, message_id: str, *, tenant: str | None = None) -> Message:
        return self._drive(self._get_message_flow(session_id, message_id, tenant))

    # state
    def load_state(
        self, session_id: str, *, slot: str = DEFAULT_SLOT, tenant: str | None = None
    ) -> tuple[dict[str, Any] | None, int]:
        return self._drive(self._load_state_flow(session_id, slot, tenant))

    def save_state(
        self,
        session_id: str,
        state: Mapping[str, Any],
        *,
        expected_version: int,
        slot: str = DEFAULT_SLOT,
        tenant: str | None = None,
    ) -> int:
        return self._drive(self._save_state_flow(session_id, state, expected_version, slot, tenant))

    # snapshots
    def put_snapshot(
        self,
        session_id: str,
        snapshot_id: str,
        data: bytes,
        *,
        metadata: Mapping[str, Any] | None = None,
        tenant: str | None = None,
    ) -> None:
        self._drive(self._put_snapshot_flow(session_id, snapshot_id, data, metadata, tenant))

    def get_snapshot(self, session_id: str, snapshot_id: str, *, tenant: str | None = None) -> bytes:
        return self._drive(self._get_snapshot_flow(session_id, snapshot_id, tenant))

    def list_snapshots(self, session_id: str, *, tenant: str | None = None) -> list[str]:
        return self._drive(self._list_snapshots_flow(session_id, tenant))

    # audit
    def append_audit(self, session_id: str, event: Mapping[str, Any], *, tenant: str | None = None) -> None:
        self._drive(self._append_audit_flow(session_id, event, tenant))

    def read_audit(
        self, session_id: str, *, since: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[dict[str, Any]]:
        return self._drive(self._read_audit_flow(session_id, since, limit, tenant))

    # export / import
    def export_session(self, session_id: str, *, tenant: str | None = None) -> Iterator[str]:
        return run_stream(self._export_stream(session_id, tenant), self._step)

    def import_session(
        self, lines: Iterable[str | bytes], *, session_id: str | None = None, tenant: str | None = None
    ) -> SessionInfo:
        return self._drive(self._import_flow(lines, session_id, tenant))

    # locking
    @contextmanager
    def lock(self, session_id: str, *, timeout: float = 10.0, tenant: str | None = None) -> Iterator[None]:
        owner = new_owner()
        self._drive(self._acquire_flow(session_id, owner, timeout, tenant))
        beat = Heartbeat(lambda: self._drive(self._renew_flow(session_id, owner)), session_id, self._lock_lease)
        beat.start()
        try:
            yield
        finally:
            beat.stop()
            try:
                self._drive(self._unlock_flow(session_id, owner))
            except StoreError as exc:  # the lease ends it; the block's own outcome must not be masked
                logger.warning("session %r: releasing its lock failed (%s); it ends with its lease", session_id, exc)


class BaseAsyncStore(StoreFlows):
    """Shared implementation of `AsyncSessionStore`; a backend provides ``_ops`` and an async ``_run``."""

    async def _run(self, op: Op[T], *, write: bool) -> T:
        """Run ``op`` in one transaction (a write transaction when ``write``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement `_run`")

    async def _step(self, op: Op[Any], write: bool) -> Any:
        return await self._run(op, write=write)

    async def _drive(self, flow: Flow[T]) -> T:
        return await arun_flow(flow, self._step, anyio.sleep)

    async def setup(self) -> None:
        """Create or migrate the backend's schema (idempotent; stores also do it on first use)."""
        await self._drive(self._setup_flow())

    async def aclose(self) -> None:
        """Release the resources the store owns (a given connection or client stays open)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # lifecycle
    async def create_session(
        self,
        session_id: str,
        *,
        tenant: str = "default",
        model: str | None = None,
        window: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        return await self._drive(self._create_session_flow(session_id, tenant, model, window, metadata))

    async def get_session(self, session_id: str, *, tenant: str | None = None) -> SessionInfo:
        return await self._drive(self._get_session_flow(session_id, tenant))

    async def touch(self, session_id: str, *, tenant: str | None = None) -> None:
        await self._drive(self._touch_flow(session_id, tenant))

    async def list_sessions(
        self,
        *,
        tenant: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        include_archived: bool = False,
    ) -> tuple[list[SessionInfo], str | None]:
        return await self._drive(self._list_sessions_flow(tenant, limit, cursor, include_archived))

    async def archive(self, session_id: str, *, tenant: str | None = None) -> None:
        await self._drive(self._archive_flow(session_id, tenant))

    async def delete_session(self, session_id: str, *, tenant: str | None = None) -> None:
        await self._drive(self._delete_session_flow(session_id, tenant))

    async def expire_idle(self, max_idle_seconds: float) -> list[str]:
        return await self._drive(self._expire_idle_flow(max_idle_seconds))

    # transcript
    async def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        tenant: str | None = None,
        expected_count: int | None = None,
        state: StateWrite | None = None,
    ) -> int:
        return await self._drive(self._append_messages_flow(session_id, messages, tenant, expected_count, state))

    async def load_messages(
        self, session_id: str, *, start: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[Message]:
        return await self._drive(self._load_messages_flow(session_id, start, limit, tenant))

    async def count_messages(self, session_id: str, *, tenant: str | None = None) -> int:
        return await self._drive(self._count_messages_flow(session_id, tenant))

    async def get_message(self, session_id: str, message_id: str, *, tenant: str | None = None) -> Message:
        return await self._drive(self._get_message_flow(session_id, message_id, tenant))

    # state
    async def load_state(
        self, session_id: str, *, slot: str = DEFAULT_SLOT, tenant: str | None = None
    ) -> tuple[dict[str, Any] | None, int]:
        return await self._drive(self._load_state_flow(session_id, slot, tenant))

    async def save_state(
        self,
        session_id: str,
        state: Mapping[str, Any],
        *,
        expected_version: int,
        slot: str = DEFAULT_SLOT,
        tenant: str | None = None,
    ) -> int:
        return await self._drive(self._save_state_flow(session_id, state, expected_version, slot, tenant))

    # snapshots
    async def put_snapshot(
        self,
        session_id: str,
        snapshot_id: str,
        data: bytes,
        *,
        metadata: Mapping[str, Any] | None = None,
        tenant: str | None = None,
    ) -> None:
        await self._drive(self._put_snapshot_flow(session_id, snapshot_id, data, metadata, tenant))

    async def get_snapshot(self, session_id: str, snapshot_id: str, *, tenant: str | None = None) -> bytes:
        return await self._drive(self._get_snapshot_flow(session_id, snapshot_id, tenant))

    async def list_snapshots(self, session_id: str, *, tenant: str | None = None) -> list[str]:
        return await self._drive(self._list_snapshots_flow(session_id, tenant))

    # audit
    async def append_audit(self, session_id: str, event: Mapping[str, Any], *, tenant: str | None = None) -> None:
        await self._drive(self._append_audit_flow(session_id, event, tenant))

    async def read_audit(
        self, session_id: str, *, since: int = 0, limit: int | None = None, tenant: str | None = None
    ) -> list[dict[str, Any]]:
        return await self._drive(self._read_audit_flow(session_id, since, limit, tenant))

    # export / import
    def export_session(self, session_id: str, *, tenant: str | None = None) -> AsyncIterator[str]:
        return arun_stream(self._export_stream(session_id, tenant), self._step)

    async def import_session(
        self,
        lines: Iterable[str | bytes] | AsyncIterable[str | bytes],
        *,
        session_id: str | None = None,
        tenant: str | None = None,
    ) -> SessionInfo:
        # An async source is read fully first: the import is checked whole before it writes.
        source: Iterable[str | bytes] = [line async for line in lines] if isinstance(lines, AsyncIterable) else lines
        return await self._drive(self._import_flow(source, session_id, tenant))

    # locking
    @asynccontextmanager
    async def lock(self, session_id: str, *, timeout: float = 10.0, tenant: str | None = None) -> AsyncIterator[None]:
        owner = new_owner()
        await self._drive(self._acquire_flow(session_id, owner, timeout, tenant))
        try:
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(
                        heartbeat,
                        lambda: self._drive(self._renew_flow(session_id, owner)),
                        session_id,
                        self._lock_lease,
                    )
                    try:
                        yield
                    finally:
                        group.cancel_scope.cancel()
            except BaseExceptionGroup as errors:
                # The heartbeat never raises: the group holds the block's own exception.
                raise sole(errors) from None
        finally:
            # A cancelled holder must still release, or the lock stays taken until its lease ends.
            with anyio.CancelScope(shield=True):
                try:
                    await self._drive(self._unlock_flow(session_id, owner))
                except StoreError as exc:
                    logger.warning(
                        "session %r: releasing its lock failed (%s); it ends with its lease", session_id, exc
                    )

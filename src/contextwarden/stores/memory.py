"""In-memory session store: for tests, demos and single-process agents that need no persistence.

It keeps the same JSON text the other backends store, so it rejects exactly what they reject and
hands out fresh objects on every read (no aliasing between callers).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .base import BaseAsyncStore, BaseStore
from .locks import DEFAULT_LOCK_LEASE
from .ops import Op, T, append_then_save, drive
from .protocols import SessionInfo, session_info
from .values import FORMAT_VERSION, not_found, transcript_moved

__all__ = ["AsyncMemoryStore", "MemoryStore"]


@dataclass(kw_only=True)
class _Session:
    tenant: str
    created_at: float
    last_active: float
    model: str | None
    window: int | None
    metadata: str
    archived_at: float | None = None
    messages: list[str] = field(default_factory=list)
    ids: dict[str, int] = field(default_factory=dict)
    states: dict[str, tuple[str, int]] = field(default_factory=dict)
    snapshots: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    audit: list[str] = field(default_factory=list)
    lock: tuple[str, float] | None = None


def _done(value: T) -> Op[T]:
    """Wrap an already computed result as an operation (memory needs no I/O)."""
    return value
    yield  # unreachable; the yield makes this function a generator


def _no_io(command: object) -> object:
    raise AssertionError(f"the memory store yielded a command: {command!r}")


class MemoryOps:
    """The store operations on dicts, each done atomically under one lock."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Session] = {}
        self._mutex = threading.RLock()

    def _get(self, session_id: str, tenant: str | None = None) -> _Session:
        session = self._sessions.get(session_id)
        if session is None or (tenant is not None and session.tenant != tenant):
            raise not_found(session_id, tenant)
        return session

    def _info(self, session_id: str, s: _Session) -> SessionInfo:
        return session_info(
            session_id,
            tenant=s.tenant,
            created_at=s.created_at,
            last_active=s.last_active,
            model=s.model,
            window=s.window,
            metadata=s.metadata,
            archived_at=s.archived_at,
            message_count=len(s.messages),
            fmt=FORMAT_VERSION,
        )

    def _bump(self, session_id: str, now: float, tenant: str | None = None) -> _Session:
        session = self._get(session_id, tenant)
        session.last_active = max(session.last_active, now)
        return session

    def setup(self) -> Op[int]:
        return _done(0)

    def create_session(
        self,
        session_id: str,
        *,
        tenant: str,
        model: str | None,
        window: int | None,
        metadata: str,
        created_at: float,
        last_active: float,
    ) -> Op[SessionInfo]:
        with self._mutex:
            session = self._sessions.get(session_id)
            if session is None:
                session = _Session(
                    tenant=tenant,
                    created_at=created_at,
                    last_active=last_active,
                    model=model,
                    window=window,
                    metadata=metadata,
                )
                self._sessions[session_id] = session
            return _done(self._info(session_id, session))

    def get_session(self, session_id: str, *, tenant: str | None = None) -> Op[SessionInfo | None]:
        with self._mutex:
            session = self._sessions.get(session_id)
            if session is None or (tenant is not None and session.tenant != tenant):
                return _done(None)
            return _done(self._info(session_id, session))

    def touch(self, session_id: str, *, now: float, tenant: str | None = None) -> Op[None]:
        with self._mutex:
            self._bump(session_id, now, tenant)
            return _done(None)

    def list_sessions(
        self, *, tenant: str | None, limit: int, after: str | None, include_archived: bool
    ) -> Op[list[SessionInfo]]:
        with self._mutex:
            found: list[SessionInfo] = []
            for session_id in sorted(self._sessions):
                session = self._sessions[session_id]
                if after is not None and session_id <= after:
                    continue
                if tenant is not None and session.tenant != tenant:
                    continue
                if not include_archived and session.archived_at is not None:
                    continue
                found.append(self._info(session_id, session))
                if len(found) >= limit:
                    break
            return _done(found)

    def archive(self, session_id: str, *, now: float, tenant: str | None = None) -> Op[None]:
        with self._mutex:
            session = self._get(session_id, tenant)
            if session.archived_at is None:
                session.archived_at = now
            return _done(None)

    def delete_session(self, session_id: str, *, tenant: str | None = None) -> Op[None]:
        with self._mutex:
            self._get(session_id, tenant)
            del self._sessions[session_id]
            return _done(None)

    def expire_idle(self, *, cutoff: float) -> Op[list[str]]:
        with self._mutex:
            expired = sorted(
                session_id
                for session_id, session in self._sessions.items()
                if session.last_active < cutoff and session.archived_at is None
            )
            for session_id in expired:
                del self._sessions[session_id]
            return _done(expired)

    def append_messages(
        self,
        session_id: str,
        items: Sequence[tuple[str, str]],
        *,
        now: float,
        tenant: str | None = None,
        expected: int | None = None,
    ) -> Op[int]:
        with self._mutex:
            if expected is not None:  # checked before the bump: a refused append leaves the session as it was
                count = len(self._get(session_id, tenant).messages)
                if count != expected:
                    raise transcript_moved(session_id, expected, count)
            session = self._bump(session_id, now, tenant)
            added = 0
            for message_id, body in items:
                if message_id in session.ids:
                    continue
                session.ids[message_id] = len(session.messages)
                session.messages.append(body)
                added += 1
            return _done(added)

    def load_messages(
        self, session_id: str, *, start: int, limit: int | None, tenant: str | None = None
    ) -> Op[list[tuple[int, str]]]:
        with self._mutex:
            messages = self._get(session_id, tenant).messages
            end = len(messages) if limit is None else min(len(messages), start + limit)
            return _done([(seq, messages[seq]) for seq in range(start, end)])

    def count_messages(self, session_id: str, *, tenant: str | None = None) -> Op[int]:
        with self._mutex:
            return _done(len(self._get(session_id, tenant).messages))

    def get_message(self, session_id: str, message_id: str, *, tenant: str | None = None) -> Op[tuple[int, str] | None]:
        with self._mutex:
            session = self._get(session_id, tenant)
            seq = session.ids.get(message_id)
            return _done(None if seq is None else (seq, session.messages[seq]))

    def load_state(self, session_id: str, slot: str, *, tenant: str | None = None) -> Op[tuple[str | None, int]]:
        with self._mutex:
            body, version = self._get(session_id, tenant).states.get(slot, (None, 0))
            return _done((body, version))

    def append_with_state(
        self,
        session_id: str,
        items: Sequence[tuple[str, str]],
        slot: str,
        body: str,
        *,
        version: int,
        token: str,
        now: float,
        tenant: str | None = None,
        expected: int | None = None,
    ) -> Op[int]:
        return append_then_save(
            self, session_id, items, slot, body, version=version, token=token, now=now, tenant=tenant, expected=expected
        )

    def save_state(
        self, session_id: str, slot: str, body: str, *, expected: int, now: float, token: str, tenant: str | None = None
    ) -> Op[tuple[bool, int]]:
        with self._mutex:
            session = self._bump(session_id, now, tenant)
            current = session.states.get(slot, ("", 0))[1]
            if current != expected:
                return _done((False, current))
            session.states[slot] = (body, current + 1)
            return _done((True, current + 1))

    def restore_state(self, session_id: str, slot: str, body: str, *, version: int, now: float) -> Op[None]:
        with self._mutex:
            self._bump(session_id, now).states[slot] = (body, version)
            return _done(None)

    def list_states(self, session_id: str, *, tenant: str | None = None) -> Op[list[tuple[str, str, int]]]:
        with self._mutex:
            states = self._get(session_id, tenant).states
            return _done([(slot, body, version) for slot, (body, version) in sorted(states.items())])

    def put_snapshot(
        self, session_id: str, snapshot_id: str, data: bytes, metadata: str, *, now: float, tenant: str | None = None
    ) -> Op[None]:
        with self._mutex:
            self._bump(session_id, now, tenant).snapshots[snapshot_id] = (bytes(data), metadata)
            return _done(None)

    def get_snapshot(
        self, session_id: str, snapshot_id: str, *, tenant: str | None = None
    ) -> Op[tuple[bytes, str] | None]:
        with self._mutex:
            return _done(self._get(session_id, tenant).snapshots.get(snapshot_id))

    def list_snapshots(self, session_id: str, *, tenant: str | None = None) -> Op[list[str]]:
        with self._mutex:
            return _done(sorted(self._get(session_id, tenant).snapshots))

    def append_audit(self, session_id: str, event: str, *, now: float, tenant: str | None = None) -> Op[None]:
        with self._mutex:
            self._bump(session_id, now, tenant).audit.append(event)
            return _done(None)

    def read_audit(self, session_id: str, *, since: int, limit: int | None, tenant: str | None = None) -> Op[list[str]]:
        with self._mutex:
            audit = self._get(session_id, tenant).audit
            return _done(audit[since:] if limit is None else audit[since : since + limit])

    def try_lock(self, session_id: str, owner: str, *, lease: float, now: float, tenant: str | None = None) -> Op[bool]:
        with self._mutex:
            session = self._get(session_id, tenant)
            if session.lock is not None and session.lock[1] > now:
                return _done(False)
            session.lock = (owner, now + lease)
            return _done(True)

    def renew_lock(self, session_id: str, owner: str, *, lease: float, now: float) -> Op[bool]:
        with self._mutex:
            session = self._sessions.get(session_id)
            if session is None or session.lock is None or session.lock[0] != owner:
                return _done(False)
            session.lock = (owner, now + lease)
            return _done(True)

    def lock_holder(self, session_id: str, *, now: float) -> Op[tuple[str, float] | None]:
        with self._mutex:
            session = self._sessions.get(session_id)
            if session is None or session.lock is None or session.lock[1] <= now:
                return _done(None)
            return _done((session.lock[0], session.lock[1] - now))

    def unlock(self, session_id: str, token: str) -> Op[None]:
        with self._mutex:
            session = self._sessions.get(session_id)
            if session is not None and session.lock is not None and session.lock[0] == token:
                session.lock = None
            return _done(None)


class MemoryStore(BaseStore):
    """`SessionStore` in process memory; thread-safe, gone when the process ends.

    Args:
        clock: Source of timestamps (tests inject a fake one).
        lock_lease: Seconds a lock outlives its holder's last heartbeat (a live holder renews it).
        share: Another memory store whose sessions this one should see (sync and async code, or
            several workers, over the same data).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
        share: MemoryStore | AsyncMemoryStore | None = None,
    ) -> None:
        super().__init__(clock=clock, lock_lease=lock_lease)
        self._ops: MemoryOps = share._ops if share is not None else MemoryOps()

    def _run(self, op: Op[T], *, write: bool) -> T:
        return drive(op, _no_io)


class AsyncMemoryStore(BaseAsyncStore):
    """The async twin of `MemoryStore`.

    Args:
        clock: Source of timestamps.
        lock_lease: Seconds a lock outlives its holder's last heartbeat (a live holder renews it).
        share: Another memory store whose sessions this one should see.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
        share: MemoryStore | AsyncMemoryStore | None = None,
    ) -> None:
        super().__init__(clock=clock, lock_lease=lock_lease)
        self._ops: MemoryOps = share._ops if share is not None else MemoryOps()

    async def _run(self, op: Op[T], *, write: bool) -> T:
        return drive(op, _no_io)

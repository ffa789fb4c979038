"""A session's link to its store: its tenant on every call, a lost session told apart, degraded mode.

`Session` and `AsyncSession` hold the transcript and the view in memory and write them through a
link to their store. The link names the session's tenant in every call (a session of another
tenant is as good as missing), turns the store's `SessionNotFound` for the session that was open
into `SessionLost` (whose message says how to get it back), and keeps what could not be written
while the store failed: the compaction snapshots and audit events, written once it works again.
Whether the view state itself still waits to be saved is kept here too (``unsaved``); saving it
is the session's job, since only the session can compact again after a conflict.

The link announces each change of the store's condition with an ``alert`` event:
``store-unavailable`` (the server cannot be reached: the session compacts in memory),
``store-lost`` (the store no longer has the session: `restore_to_store` writes it back) and
``store-recovered`` (everything that waited is saved).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Literal

from .events import Alert, EventBus
from .exceptions import SessionLost, SessionNotFound, SnapshotError, StoreError, StoreUnavailable, VersionConflict
from .messages import Message
from .stores.protocols import StateWrite
from .timeline import STATUS_SLOT

__all__ = ["AsyncStoreLink", "StoreLink", "StoreProblem"]

logger = logging.getLogger(__name__)

StoreProblem = Literal["store-unavailable", "store-lost"]
"""Why a session's store does not have its newest view: unreachable, or it lost the session."""

_BACKLOG_LIMIT = 10_000
"""Audit events kept for a failing store (the oldest go first past it, as in the in-memory log)."""
_RESTORE_BATCH = 500
"""Messages per append when a session is written back (one transaction, one Redis script each)."""
_EPHEMERAL = frozenset({"context.status"})
"""Events not written to the audit log (one per turn; the metrics carry them)."""

Loaded = tuple[list[Message], dict[str, Any] | None, int]
"""A stored session: its transcript, its view state and that state's version."""


class _Link:
    """What the sync and async links share: the store's condition and what waits for it."""

    def __init__(self, store: Any, session_id: str, tenant: str, events: EventBus) -> None:
        self.store = store
        self.session_id = session_id
        self.tenant = tenant
        self.events = events
        self.problem: StoreProblem | None = None
        """Why the store does not have this session's newest view (None: it has)."""
        self.unsaved = False
        """A compaction ran in memory while the store failed; its view state waits to be saved."""
        self.backlog: list[dict[str, Any]] = []

    def lost(self, transcript_messages: int | None = None) -> SessionLost:
        """The error for a session its store no longer has, with the ways back."""
        held = "" if transcript_messages is None else f" ({transcript_messages} messages)"
        return SessionLost(
            f"Session {self.session_id!r} is gone from its store ({type(self.store).__name__}): the store lost it "
            "(a restart without persistence, an expiry or a deletion) while this Session was open. Its transcript"
            f"{held} and view are still in this process: call `session.restore_to_store()` to write them back, "
            "then retry; or open a new Session to start over.",
            session_id=self.session_id,
        )

    def fail(self, error: StoreError) -> None:
        """Record that the store failed with ``error``; announce it when the condition changed."""
        problem: StoreProblem = "store-lost" if isinstance(error, SessionNotFound) else "store-unavailable"
        if problem == self.problem:
            return
        self.problem = problem  # set before the alert: the audit sink then keeps the alert for later
        if problem == "store-lost":
            detail = (
                f"the store no longer has session {self.session_id!r}; it keeps compacting in memory and "
                "`restore_to_store()` writes it back"
            )
        else:
            detail = (
                f"the store of session {self.session_id!r} cannot be reached ({error}); the view is compacted in "
                "memory and saved when the store is back"
            )
        logger.warning("session %s: %s", self.session_id, detail)
        self.events.emit(Alert(session_id=self.session_id, alert=problem, detail=detail))

    def recovered(self) -> None:
        """Everything that waited is in the store again."""
        self.unsaved = False
        if self.problem is None:
            return
        self.problem = None
        detail = f"the store has session {self.session_id!r} again, with its newest view"
        logger.info("session %s: %s", self.session_id, detail)
        self.events.emit(Alert(session_id=self.session_id, alert="store-recovered", detail=detail))

    def keep(self, record: Mapping[str, Any]) -> None:
        self.backlog.append(dict(record))
        if len(self.backlog) > _BACKLOG_LIMIT:
            del self.backlog[: len(self.backlog) - _BACKLOG_LIMIT]


class _StoreSnapshots:
    """The sync store as a session's snapshot store; snapshots it cannot take now wait in memory."""

    def __init__(self, link: StoreLink) -> None:
        self._link = link
        self.pending: dict[str, bytes] = {}

    def put_snapshot(self, session_id: str, snapshot_id: str, data: bytes) -> None:
        link = self._link
        if link.problem is None:
            try:
                link.store.put_snapshot(session_id, snapshot_id, data, tenant=link.tenant)
                return
            except (StoreUnavailable, SessionNotFound):
                pass  # the compaction goes on in memory; the view state save reports the failure
        self.pending[snapshot_id] = bytes(data)

    def get_snapshot(self, session_id: str, snapshot_id: str) -> bytes:
        data = self.pending.get(snapshot_id)
        if data is not None:
            return data
        link = self._link
        try:
            stored: bytes = link.store.get_snapshot(session_id, snapshot_id, tenant=link.tenant)
        except (StoreUnavailable, SessionNotFound) as exc:
            # read_context then rebuilds the snapshot from the transcript in memory
            raise SnapshotError(f"snapshot {snapshot_id!r} cannot be read from the store now ({exc})") from exc
        return stored

    def list_snapshots(self, session_id: str) -> list[str]:
        link = self._link
        try:
            stored: list[str] = link.store.list_snapshots(session_id, tenant=link.tenant)
        except (StoreUnavailable, SessionNotFound):
            stored = []
        return sorted({*stored, *self.pending})

    def flush(self) -> None:
        link = self._link
        for snapshot_id, data in list(self.pending.items()):
            link.store.put_snapshot(link.session_id, snapshot_id, data, tenant=link.tenant)
            del self.pending[snapshot_id]


class StoreLink(_Link):
    """The link of a `Session` to a sync store."""

    def __init__(self, store: Any, session_id: str, tenant: str, events: EventBus, *, snapshots_in_store: bool) -> None:
        super().__init__(store, session_id, tenant, events)
        self.snapshots: _StoreSnapshots | None = _StoreSnapshots(self) if snapshots_in_store else None
        """The snapshot store to give the engine when snapshots live in the session store."""

    @contextmanager
    def _calls(self) -> Iterator[None]:
        """Note a failing store; a session the store no longer has becomes `SessionLost`."""
        try:
            yield
        except SessionLost:
            raise
        except SessionNotFound as exc:
            self.fail(exc)
            raise self.lost() from exc
        except StoreUnavailable as exc:
            self.fail(exc)
            raise

    def open(self, *, model: str | None, window: int) -> Loaded:
        """Create the session in the store if it is new (``SessionNotFound``: another tenant's), then load it."""
        self.store.create_session(self.session_id, tenant=self.tenant, model=model, window=window)
        return self.load()

    def load(self) -> Loaded:
        """The stored transcript and view state."""
        with self._calls():
            messages: list[Message] = self.store.load_messages(self.session_id, tenant=self.tenant)
            state, version = self.store.load_state(self.session_id, tenant=self.tenant)
        return messages, state, version

    def append(
        self, messages: Sequence[Message], *, transcript_messages: int, status: StateWrite | None = None
    ) -> None:
        """Write messages through, with the figures (``status``) in the same write when given; a lost
        session refuses until `restore` (its transcript would have a gap)."""
        if self.problem == "store-lost":
            raise self.lost(transcript_messages)
        try:
            with self._calls():
                self.store.append_messages(self.session_id, messages, tenant=self.tenant, state=status)
        except SessionLost:
            raise self.lost(transcript_messages) from None

    def version(self) -> int:
        """The stored view state's version."""
        with self._calls():
            _, version = self.store.load_state(self.session_id, tenant=self.tenant)
        return int(version)

    def save(self, state: Mapping[str, Any], *, expected_version: int) -> int:
        """Save the view state (compare-and-set); the new version."""
        with self._calls():
            version: int = self.store.save_state(
                self.session_id, state, expected_version=expected_version, tenant=self.tenant
            )
        return version

    @contextmanager
    def lock(self) -> Iterator[None]:
        """The session's lock in the store (one compactor at a time)."""
        with self._calls(), self.store.lock(self.session_id, tenant=self.tenant):
            yield

    def audit(self, record: Mapping[str, Any]) -> None:
        """The event sink: events go to the store's audit log, or wait while it fails."""
        if record.get("kind") in _EPHEMERAL:
            return
        if self.problem is not None:
            self.keep(record)
            return
        try:
            self.store.append_audit(self.session_id, record, tenant=self.tenant)
        except (StoreUnavailable, SessionNotFound) as exc:
            self.keep(record)
            self.fail(exc)

    @property
    def waiting(self) -> bool:
        """Whether snapshots or audit events wait to be written."""
        return bool(self.backlog or (self.snapshots is not None and self.snapshots.pending))

    def flush(self) -> None:
        """Write the snapshots and audit events that waited for the store."""
        with self._calls():
            if self.snapshots is not None:
                self.snapshots.flush()
            while self.backlog:
                self.store.append_audit(self.session_id, self.backlog[0], tenant=self.tenant)
                del self.backlog[0]

    def probe(self) -> None:
        """One cheap call, to learn whether the store works again."""
        with self._calls():
            self.store.count_messages(self.session_id, tenant=self.tenant)

    def load_status(self) -> tuple[dict[str, Any] | None, int]:
        """The saved figures and timeline (`contextwarden.timeline.STATUS_SLOT`) and their version."""
        try:
            return self.store.load_state(self.session_id, slot=STATUS_SLOT, tenant=self.tenant)  # type: ignore[no-any-return]
        except StoreError:
            return None, 0

    def save_status(self, record: Mapping[str, Any], *, version: int) -> int:
        """Save the figures and timeline; the new version (``version`` unchanged when the store refused).

        A display record: another writer's newer record is overwritten (it holds the same session's
        figures), and a store failure leaves it for the next save.
        """
        for _ in range(2):
            try:
                saved: int = self.store.save_state(
                    self.session_id, record, expected_version=version, slot=STATUS_SLOT, tenant=self.tenant
                )
                return saved
            except VersionConflict as exc:
                version = exc.actual
            except StoreError:
                break
        return version

    def restore(self, transcript: Sequence[Message], *, model: str | None, window: int) -> None:
        """Create the session again and write ``transcript`` (messages the store has are skipped)."""
        self.store.create_session(self.session_id, tenant=self.tenant, model=model, window=window)
        for start in range(0, len(transcript), _RESTORE_BATCH):
            batch = transcript[start : start + _RESTORE_BATCH]
            self.store.append_messages(self.session_id, batch, tenant=self.tenant)


class AsyncStoreLink(_Link):
    """The link of an `AsyncSession` to an async store."""

    @asynccontextmanager
    async def _calls(self) -> AsyncIterator[None]:
        try:
            yield
        except SessionLost:
            raise
        except SessionNotFound as exc:
            self.fail(exc)
            raise self.lost() from exc
        except StoreUnavailable as exc:
            self.fail(exc)
            raise

    async def open(self, *, model: str | None, window: int) -> Loaded:
        await self.store.create_session(self.session_id, tenant=self.tenant, model=model, window=window)
        return await self.load()

    async def load(self) -> Loaded:
        async with self._calls():
            messages: list[Message] = await self.store.load_messages(self.session_id, tenant=self.tenant)
            state, version = await self.store.load_state(self.session_id, tenant=self.tenant)
        return messages, state, version

    async def append(
        self, messages: Sequence[Message], *, transcript_messages: int, status: StateWrite | None = None
    ) -> None:
        if self.problem == "store-lost":
            raise self.lost(transcript_messages)
        try:
            async with self._calls():
                await self.store.append_messages(self.session_id, messages, tenant=self.tenant, state=status)
        except SessionLost:
            raise self.lost(transcript_messages) from None

    async def version(self) -> int:
        async with self._calls():
            _, version = await self.store.load_state(self.session_id, tenant=self.tenant)
        return int(version)

    async def save(self, state: Mapping[str, Any], *, expected_version: int) -> int:
        async with self._calls():
            version: int = await self.store.save_state(
                self.session_id, state, expected_version=expected_version, tenant=self.tenant
            )
        return version

    async def put_snapshot(self, snapshot_id: str, data: bytes) -> None:
        async with self._calls():
            await self.store.put_snapshot(self.session_id, snapshot_id, data, tenant=self.tenant)

    async def get_snapshot(self, snapshot_id: str) -> bytes:
        data: bytes = await self.store.get_snapshot(self.session_id, snapshot_id, tenant=self.tenant)
        return data

    @asynccontextmanager
    async def lock(self) -> AsyncIterator[None]:
        async with self._calls(), self.store.lock(self.session_id, tenant=self.tenant):
            yield

    async def probe(self) -> None:
        async with self._calls():
            await self.store.count_messages(self.session_id, tenant=self.tenant)

    async def load_status(self) -> tuple[dict[str, Any] | None, int]:
        try:
            return await self.store.load_state(self.session_id, slot=STATUS_SLOT, tenant=self.tenant)  # type: ignore[no-any-return]
        except StoreError:
            return None, 0

    async def save_status(self, record: Mapping[str, Any], *, version: int) -> int:
        for _ in range(2):
            try:
                saved: int = await self.store.save_state(
                    self.session_id, record, expected_version=version, slot=STATUS_SLOT, tenant=self.tenant
                )
                return saved
            except VersionConflict as exc:
                version = exc.actual
            except StoreError:
                break
        return version

    async def restore(self, transcript: Sequence[Message], *, model: str | None, window: int) -> None:
        await self.store.create_session(self.session_id, tenant=self.tenant, model=model, window=window)
        for start in range(0, len(transcript), _RESTORE_BATCH):
            batch = transcript[start : start + _RESTORE_BATCH]
            await self.store.append_messages(self.session_id, batch, tenant=self.tenant)

"""The sessions a service process holds open: one `AsyncSession` per (tenant, session id).

Session ids are the tenant's own: tenant T's session S lives under a tenant-scoped store key
(`contextwarden.stores.tenancy`), so the same id under another tenant is another session.

A request takes its session's lease: an asyncio lock (one request of a session at a time in this
process) and a check that the store has no message this process has not seen (another replica
served the session meanwhile), in which case the session is reopened from the store. The proxy
defers that check to its first append, made a compare-and-set on the transcript's length
(`Lease.expect`), which saves a store round trip per request; other callers read the length at
once. A failed request drops the session from memory, so the next one starts from what the store
holds.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..adapters import from_messages
from ..events import Event
from ..exceptions import ConfigError, SessionNotFound, UsageError, VersionConflict
from ..messages import Message
from ..session import AsyncSession
from ..settings import Settings
from ..stores import AsyncSessionStore, StateWrite
from ..stores.tenancy import acreate_scoped, alocate
from ..summarize import AsyncExtractiveSummarizer
from ..tokens import TokenCounter, counter_for_model
from .history import MessageKey, message_key

__all__ = ["Lease", "SessionMoved", "SessionPool", "session_options"]

logger = logging.getLogger(__name__)

EventSink = Callable[[str, str, Event], None]
"""Called with (tenant, session id, event) for every event of every open session."""
Watcher = Callable[[str, str, AsyncSession | None], None]
"""Called with (tenant, session id, session) when a session opens, with None when it closes."""


@functools.lru_cache(maxsize=256)
def _counter_for(model: str) -> TokenCounter:
    """The model's counter, found once per process: for a model the registry does not know, finding
    that out (with close-match suggestions for an error nobody reads) cost a session open ~1 ms."""
    return counter_for_model(model)


def session_options(settings: Settings, model: str | None, *, window: int | None = None) -> dict[str, Any]:
    """Keyword arguments of the `AsyncSession` a request for ``model`` gets, from the settings.

    ``window``: the window the stored session was made with; it wins over the configured and the
    registry's (the session keeps the budget it was made with, whoever serves it).

    Raises:
        UnknownModelError: the model is not in the registry and no window is configured for it.
    """
    from ..models import lookup_model

    if window is None:
        window = settings.window_for(model)
    if window is None:
        window = lookup_model(model or "").context_window
    options: dict[str, Any] = {
        "model": model,
        "window": window,
        "reserved_output": settings.reserved_output_for(model, window),
        "thresholds": settings.thresholds(),
        "config": settings.compaction_config(effective=max(1, window - settings.reserved_output_for(model, window))),
        "format": "openai",
    }
    if settings.tokenizer:
        options["counter"] = settings.tokenizer
    elif model is not None:
        options["counter"] = _counter_for(model)
    name = settings.summarizer.model.strip().lower()
    if name == "extractive":
        options["summarizer"] = AsyncExtractiveSummarizer()
    elif name != "none":
        raise ConfigError(
            f"summarizer.model = {settings.summarizer.model!r}: the service summarizes without an LLM; set it to "
            "'extractive' or 'none'.",
            key="summarizer.model",
        )
    return options


class SessionMoved(Exception):
    """An append that expected the transcript at this process's length found it moved (another writer
    appended) or gone (deleted, expired): nothing was written, and the session must be read again."""


class _CheckedStore:
    """The store as one open session sees it: the service can make the session's next append a
    compare-and-set on the transcript's length (`expected`).

    Everything else goes to the store unchanged.
    """

    def __init__(self, store: AsyncSessionStore) -> None:
        self._store = store
        self.expected: int | None = None
        """The transcript length the next append expects (None: any); an append uses it up."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        tenant: str | None = None,
        expected_count: int | None = None,
        state: StateWrite | None = None,
    ) -> int:
        expected, self.expected = self.expected, None
        if expected is None or expected_count is not None:
            return await self._store.append_messages(
                session_id, messages, tenant=tenant, expected_count=expected_count, state=state
            )
        try:
            return await self._store.append_messages(
                session_id, messages, tenant=tenant, expected_count=expected, state=state
            )
        except (VersionConflict, SessionNotFound) as exc:
            # Kept from the session, which would take a missing session for a lost store and go on in
            # memory: the service reads the session again instead.
            raise SessionMoved(str(exc)) from exc


@dataclass(eq=False)
class _Entry:
    key: str
    """The store key of the session (see `contextwarden.stores.tenancy`)."""
    session: AsyncSession
    keys: list[MessageKey]
    store: _CheckedStore
    memo: dict[str, Any] = field(default_factory=dict)
    created: bool = False
    """The store's session was created for the request that opened it, which has not succeeded yet."""


@dataclass(eq=False)
class Lease:
    """A request's hold on its session."""

    tenant: str
    session_id: str
    """The id the tenant's clients use."""
    store_key: str
    """The id the store keeps the session under (tenant-scoped; see `contextwarden.stores.tenancy`)."""
    session: AsyncSession
    keys: list[MessageKey]
    """The key of every transcript message (see `contextwarden.service.history`)."""
    lock: asyncio.Lock
    store: _CheckedStore
    checked: bool
    """The session is known to hold everything the store has (it was read or its length checked in this lease)."""
    released: bool = False
    failed: bool = False
    memo: dict[str, Any] = field(default_factory=dict)
    """What the proxy keeps of the session's last request between requests (its converted history)."""
    created: bool = False
    """This lease's request created the session (see `SessionPool.discard`)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def expect(self, count: int | None) -> None:
        """Make the session's next append write only if the stored transcript has ``count`` messages;
        else it raises `SessionMoved` (None: no condition)."""
        self.store.expected = count

    def _take(self, entry: _Entry) -> None:
        self.session, self.keys, self.store, self.memo = entry.session, entry.keys, entry.store, entry.memo
        self.store_key = entry.key
        self.created = self.created or entry.created

    def sync_keys(self) -> None:
        """Key the transcript messages added since the last call."""
        state = self.session.state
        if state.transcript_length > len(self.keys):
            fresh = from_messages(state.messages(len(self.keys)), format="openai")
            self.keys.extend(message_key(m) for m in fresh)

    def keyed(self, sources: Sequence[Mapping[str, Any]], *, before: int) -> None:
        """Key the messages just added from the OpenAI dicts ``sources`` when the transcript grew from
        ``before`` by exactly them (else `sync_keys` keys them later).

        The adapter renders a message back to the dict it was read from, so the key of the source is
        the key of its rendering, without rendering it.
        """
        if len(self.keys) == before and self.session.state.transcript_length == before + len(sources):
            self.keys.extend(message_key(m) for m in sources)


class SessionPool:
    """Open sessions of this process, least recently used dropped past ``limit``."""

    def __init__(
        self,
        store: AsyncSessionStore,
        settings: Settings,
        *,
        on_event: EventSink,
        watch: Watcher | None = None,
        limit: int = 1000,
    ) -> None:
        self.store = store
        self.settings = settings
        self.on_event = on_event
        self.watch = watch
        self.limit = limit
        self._open: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._waiting: Counter[tuple[str, str]] = Counter()
        """Requests waiting for each lock."""
        self._options: dict[tuple[str | None, int | None], dict[str, Any]] = {}
        """`session_options` by (model, window): worked out once, not for every session opened."""

    def __len__(self) -> int:
        return len(self._open)

    def _session_options(self, model: str | None, *, window: int | None = None) -> dict[str, Any]:
        """`session_options` of the pool's settings (a fresh summarizer for each session: it is the session's own)."""
        key = (model, window)
        options = self._options.get(key)
        if options is None:
            options = session_options(self.settings, model, window=window)
            if len(self._options) >= 256:
                self._options.clear()
            self._options[key] = options
        if "summarizer" in options:
            return {**options, "summarizer": AsyncExtractiveSummarizer()}
        return dict(options)

    async def acquire(
        self,
        tenant: str,
        session_id: str,
        *,
        model: str | None = None,
        tools: Sequence[Mapping[str, Any]] = (),
        create: bool = True,
        check: bool = True,
    ) -> Lease:
        """Lease the session (created when ``create`` and missing); `release` it when done.

        Without ``check``, a session this process holds is leased without asking the store whether
        another writer appended to it: the caller makes its first append conditional (`Lease.expect`)
        or calls `verify` before it relies on the transcript.

        Raises:
            SessionNotFound: the session is missing (and ``create`` is False).
            UsageError: the session id is not usable (see `contextwarden.stores.tenancy.session_keys`).
            UnknownModelError: a new session for a model the registry does not know, with no window configured.
        """
        key = (tenant, session_id)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        self._waiting[key] += 1
        try:
            await lock.acquire()
        finally:
            self._waiting[key] -= 1
            if self._waiting[key] <= 0:
                del self._waiting[key]
        try:
            entry, checked = await self._current(key, model=model, tools=tools, create=create, check=check)
        except BaseException:
            lock.release()
            self._prune(key, lock)
            raise
        return Lease(
            tenant=tenant,
            session_id=session_id,
            store_key=entry.key,
            session=entry.session,
            keys=entry.keys,
            lock=lock,
            store=entry.store,
            checked=checked,
            memo=entry.memo,
            created=entry.created,
        )

    async def verify(self, lease: Lease, *, model: str | None = None, tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """Make the leased session hold what the store holds: check its length, read it again if it moved."""
        if not lease.checked:
            lease._take((await self._current((lease.tenant, lease.session_id), model=model, tools=tools))[0])
            lease.checked = True

    async def reload(self, lease: Lease, *, model: str | None = None, tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """Drop the leased session from memory and read it again from the store (created again if deleted)."""
        self._closed((lease.tenant, lease.session_id))
        lease._take((await self._current((lease.tenant, lease.session_id), model=model, tools=tools))[0])
        lease.checked = True

    async def _current(
        self,
        key: tuple[str, str],
        *,
        model: str | None,
        tools: Sequence[Mapping[str, Any]],
        create: bool = True,
        check: bool = True,
    ) -> tuple[_Entry, bool]:
        tenant, session_id = key
        cached = self._open.get(key)
        if cached is not None:
            if not check:
                self._open.move_to_end(key)
                return cached, False
            # one read tells whether another replica wrote to the session since this process did
            try:
                stored = await self.store.count_messages(cached.key, tenant=tenant)
            except SessionNotFound:
                stored = -1  # deleted meanwhile: created again below, or 404 for a read
            if cached.session.state.transcript_length == stored:
                self._open.move_to_end(key)
                return cached, True
        created = False
        if create:
            try:
                info = await alocate(self.store, tenant, session_id)
            except SessionNotFound:
                # a request that cannot be served (an unknown model) must not leave a session behind:
                # the options are checked before the session is created
                options = self._session_options(model)
                info = await acreate_scoped(self.store, tenant, session_id, model=model, window=int(options["window"]))
                created = True
        else:
            info = await alocate(self.store, tenant, session_id)
        # new here, or another replica (or a failed request) changed it: read it again from the store
        options = self._session_options(model or info.model, window=info.window)
        store = _CheckedStore(self.store)
        session = await AsyncSession.open(info.session_id, store=store, tenant=tenant, tools=tools, **options)
        session.subscribe(lambda event: self.on_event(tenant, session_id, event))
        if cached is not None:
            self._closed(key)
        if self.watch is not None:
            self.watch(tenant, session_id, session)
        entry = _Entry(key=info.session_id, session=session, keys=[], store=store, created=created)
        self._open[key] = entry
        self._open.move_to_end(key)
        self._evict()
        return entry, True

    def _evict(self) -> None:
        while len(self._open) > self.limit:
            key = next(iter(self._open))
            self._closed(key)
            lock = self._locks.get(key)
            if lock is not None and not lock.locked():
                del self._locks[key]

    async def discard(self, lease: Lease) -> None:
        """The request was refused: delete the session it created (a refused request leaves no session behind).

        A session that existed before the request is kept; `release` must still be called.
        """
        if not lease.created or lease.released:
            return
        try:
            await self.store.delete_session(lease.store_key, tenant=lease.tenant)
        except SessionNotFound:
            pass
        lease.failed = True  # dropped from memory on release

    def release(self, lease: Lease) -> None:
        """End the lease; a failed request's session is dropped (the store's copy is the truth)."""
        if lease.released:
            return
        lease.released = True
        key = (lease.tenant, lease.session_id)
        entry = self._open.get(key)
        if entry is not None and not lease.failed:
            entry.created = False  # served once: the session is the client's now
        if lease.failed:
            self._closed(key)
        lease.lock.release()
        self._prune(key, lease.lock)

    def _prune(self, key: tuple[str, str], lock: asyncio.Lock) -> None:
        """Forget the lock of a session this process does not hold open, once nobody holds or awaits it:
        a stream of refused or failed requests with ever new ids would otherwise grow the table."""
        if key not in self._open and not lock.locked() and self._locks.get(key) is lock:
            # a request waiting for this lock holds the object: a new one would not exclude it
            if key not in self._waiting:
                del self._locks[key]

    def forget(self, tenant: str, session_id: str) -> None:
        """Drop a session from memory (after it was deleted)."""
        self._closed((tenant, session_id))

    def _closed(self, key: tuple[str, str]) -> None:
        if self._open.pop(key, None) is not None and self.watch is not None:
            self.watch(key[0], key[1], None)

    async def exists(self, tenant: str, session_id: str) -> bool:
        """Whether the store holds the session (this process's open sessions first)."""
        if (tenant, session_id) in self._open:
            return True
        try:
            await alocate(self.store, tenant, session_id)
        except (SessionNotFound, UsageError):  # missing, or an id the store would refuse
            return False
        return True

    def loaded(self, tenant: str, session_id: str) -> AsyncSession | None:
        """The open session, if this process has it (no store access)."""
        entry = self._open.get((tenant, session_id))
        return None if entry is None else entry.session

"""The sessions a service process holds open: one `AsyncSession` per (tenant, session id).

A request takes its session's lease: an asyncio lock (one request of a session at a time in this
process) and a check that the store has no message this process has not seen (another replica
served the session meanwhile), in which case the session is reopened from the store. A failed
request drops the session from memory, so the next one starts from what the store holds.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..adapters import from_messages
from ..events import Event
from ..exceptions import ConfigError, SessionNotFound
from ..session import AsyncSession
from ..settings import Settings
from ..stores import AsyncSessionStore
from ..summarize import AsyncExtractiveSummarizer
from ..tokens import TokenCounter, counter_for_model
from .history import MessageKey, message_key

__all__ = ["Lease", "SessionPool", "session_options"]

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


def session_options(settings: Settings, model: str | None) -> dict[str, Any]:
    """Keyword arguments of the `AsyncSession` a request for ``model`` gets, from the settings.

    Raises:
        UnknownModelError: the model is not in the registry and no window is configured for it.
    """
    from ..models import lookup_model

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


@dataclass(eq=False)
class Lease:
    """A request's hold on its session."""

    tenant: str
    session_id: str
    session: AsyncSession
    keys: list[MessageKey]
    """The key of every transcript message (see `contextkeeper.service.history`)."""
    lock: asyncio.Lock
    released: bool = False
    failed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def sync_keys(self) -> None:
        """Key the transcript messages added since the last call."""
        transcript = self.session.engine.transcript
        if len(transcript) > len(self.keys):
            fresh = from_messages(transcript[len(self.keys) :], format="openai")
            self.keys.extend(message_key(m) for m in fresh)


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
        self._open: OrderedDict[tuple[str, str], tuple[AsyncSession, list[MessageKey]]] = OrderedDict()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def __len__(self) -> int:
        return len(self._open)

    async def acquire(
        self,
        tenant: str,
        session_id: str,
        *,
        model: str | None = None,
        tools: Sequence[Mapping[str, Any]] = (),
        create: bool = True,
    ) -> Lease:
        """Lease the session (created when ``create`` and missing); `release` it when done.

        Raises:
            SessionNotFound: the session is missing (and ``create`` is False) or another tenant's.
            UnknownModelError: a new session for a model the registry does not know, with no window configured.
        """
        key = (tenant, session_id)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        await lock.acquire()
        try:
            session, keys = await self._current(key, model=model, tools=tools, create=create)
        except BaseException:
            lock.release()
            raise
        return Lease(tenant=tenant, session_id=session_id, session=session, keys=keys, lock=lock)

    async def _current(
        self, key: tuple[str, str], *, model: str | None, tools: Sequence[Mapping[str, Any]], create: bool
    ) -> tuple[AsyncSession, list[MessageKey]]:
        tenant, session_id = key
        cached = self._open.get(key)
        if cached is not None:
            # one read tells whether another replica wrote to the session since this process did
            try:
                stored = await self.store.count_messages(session_id, tenant=tenant)
            except SessionNotFound:
                stored = -1  # deleted meanwhile: created again below, or 404 for a read
            if len(cached[0].engine.transcript) == stored:
                self._open.move_to_end(key)
                return cached
        if create:
            info = await self.store.create_session(session_id, tenant=tenant, model=model)
        else:
            info = await self.store.get_session(session_id, tenant=tenant)
        # new here, or another replica (or a failed request) changed it: read it again from the store
        options = session_options(self.settings, model or info.model)
        session = await AsyncSession.open(session_id, store=self.store, tenant=tenant, tools=tools, **options)
        session.subscribe(lambda event: self.on_event(tenant, session_id, event))
        if cached is not None:
            self._closed(key)
        if self.watch is not None:
            self.watch(tenant, session_id, session)
        entry: tuple[AsyncSession, list[MessageKey]] = (session, [])
        self._open[key] = entry
        self._open.move_to_end(key)
        self._evict()
        return entry

    def _evict(self) -> None:
        while len(self._open) > self.limit:
            key = next(iter(self._open))
            self._closed(key)
            lock = self._locks.get(key)
            if lock is not None and not lock.locked():
                del self._locks[key]

    def release(self, lease: Lease) -> None:
        """End the lease; a failed request's session is dropped (the store's copy is the truth)."""
        if lease.released:
            return
        lease.released = True
        key = (lease.tenant, lease.session_id)
        if lease.failed:
            self._closed(key)
        lease.lock.release()

    def forget(self, tenant: str, session_id: str) -> None:
        """Drop a session from memory (after it was deleted)."""
        self._closed((tenant, session_id))

    def _closed(self, key: tuple[str, str]) -> None:
        if self._open.pop(key, None) is not None and self.watch is not None:
            self.watch(key[0], key[1], None)

    def loaded(self, tenant: str, session_id: str) -> AsyncSession | None:
        """The open session, if this process has it (no store access)."""
        entry = self._open.get((tenant, session_id))
        return None if entry is None else entry[0]

"""Typed events: what the context did, for callbacks, async iterators, metrics and the audit log.

Subscribers that raise never break the agent: the error is logged and counted, and shows up
in the next status as ``subscriber_errors``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from contextwarden.exceptions import ConfigError

__all__ = [
    "LAYER_NAMES",
    "Alert",
    "CompactionFinished",
    "CompactionStarted",
    "ContextStatus",
    "DelegationFinished",
    "Event",
    "EventBus",
    "LayerName",
    "OptionalLayer",
    "SnapshotWritten",
    "event_to_dict",
]

logger = logging.getLogger(__name__)

PressureLevel = Literal["normal", "warning", "error", "critical", "overflow"]
Trigger = Literal["high-water", "reactive", "manual", "oversized", "thrashing"]
OptionalLayer = Literal["clear", "evict", "summarize"]
"""The layers a configuration may leave out (``layers``) and the ``cascade`` table gates."""
LayerName = OptionalLayer | Literal["shrink"]
"""The compaction layers, cheapest first: the one name each has in configuration (``layers``, the
``cascade`` table), events, status and documentation (``shrink`` runs whenever the budget itself is
at stake)."""
LAYER_NAMES: tuple[LayerName, ...] = ("clear", "evict", "summarize", "shrink")
"""Every `LayerName`, cheapest first."""


@dataclass(frozen=True, kw_only=True)
class ContextStatus:
    """Where the view stands: emitted after accounting and after each compaction layer."""

    session_id: str
    used: int
    budget: int
    ratio: float
    state: PressureLevel
    layer: LayerName | None = None
    """The layer that last ran in this prepare, or None."""
    last_layer: LayerName | None = None
    """The layer that last changed the view in this session (`ViewStatus.last_layer`)."""
    rule: Literal["band", "ratio"] | None = None
    """How ``state`` is named (`contextwarden.figures.StateRule`)."""
    turn: int | None = None
    """The turn of a prepared view; None on the status after a single compaction layer."""
    ts: float = field(default_factory=time.time)
    kind: Literal["context.status"] = "context.status"


@dataclass(frozen=True, kw_only=True)
class CompactionStarted:
    """A compaction layer is about to run."""

    session_id: str
    layer: LayerName
    trigger: Trigger
    tokens_before: int
    target: int
    ts: float = field(default_factory=time.time)
    kind: Literal["compaction.started"] = "compaction.started"


@dataclass(frozen=True, kw_only=True)
class CompactionFinished:
    """A compaction layer ran."""

    session_id: str
    layer: LayerName
    trigger: Trigger
    tokens_before: int
    tokens_after: int
    duration_ms: float
    items: int = 0
    """How many tool outputs were cleared, rounds evicted or spans summarized."""
    ts: float = field(default_factory=time.time)
    kind: Literal["compaction.finished"] = "compaction.finished"


@dataclass(frozen=True, kw_only=True)
class Alert:
    """Something an operator should look at (thrashing, spikes, a tripped breaker, a failing hook)."""

    session_id: str
    alert: str
    """Short machine name: thrashing, spike, breaker-open, subscriber-error, hook-error, oversized,
    store-unavailable, store-lost, store-recovered (the session's store: see `Session.restore_to_store`);
    a `contextwarden.health.HealthMonitor` adds critical-utilization, high-eviction-frequency,
    low-fidelity, low-compression and burn-rate-spike."""
    detail: str
    ts: float = field(default_factory=time.time)
    kind: Literal["alert"] = "alert"


@dataclass(frozen=True, kw_only=True)
class SnapshotWritten:
    """A full original was saved before compaction shortened it."""

    session_id: str
    snapshot_id: str
    reason: Literal["cleared", "evicted", "offloaded", "summarized"]
    message_ids: tuple[str, ...]
    ts: float = field(default_factory=time.time)
    kind: Literal["snapshot.written"] = "snapshot.written"


@dataclass(frozen=True, kw_only=True)
class DelegationFinished:
    """A sub-task marked delegable ran in its own session; only its result entered this one."""

    session_id: str
    task_id: str
    task: str
    utilization: float
    """The parent's utilization when it delegated (the cascade's ``delegation`` threshold or more)."""
    result_tokens: int
    turns: int
    finished: bool
    condensed: bool
    sub_session_id: str
    ts: float = field(default_factory=time.time)
    kind: Literal["delegation.finished"] = "delegation.finished"


Event = ContextStatus | CompactionStarted | CompactionFinished | Alert | SnapshotWritten | DelegationFinished


_FIELDS: dict[type, tuple[str, ...]] = {}


def event_to_dict(event: Event) -> dict[str, Any]:
    """JSON-ready dict of an event (the audit-log and SSE format)."""
    names = _FIELDS.get(type(event))
    if names is None:  # events are flat: a shallow copy is enough and far cheaper than asdict
        names = _FIELDS[type(event)] = tuple(f.name for f in dataclasses.fields(event))
    out = {name: getattr(event, name) for name in names}
    for name, value in out.items():
        if isinstance(value, tuple):
            out[name] = list(value)
    return out


class EventBus:
    """Fan-out of events to callbacks and async iterators; keeps a bounded in-memory audit log."""

    def __init__(self, *, audit_limit: int = 10_000) -> None:
        self._subscribers: list[Callable[[Event], object]] = []
        self._queues: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[Event]]] = []
        self._lock = threading.Lock()
        self._audit: deque[Event] = deque(maxlen=self._check_limit(audit_limit))
        """Events of the in-memory audit log, made into dicts when read (a compaction emits dozens).
        A bounded deque drops the oldest in constant time; a list would shift every kept event."""
        self.subscriber_errors = 0
        self.sinks: list[Callable[[dict[str, Any]], None]] = []
        """Called with the dict of every event but ``context.status``; a session store's audit log plugs in here."""

    def subscribe(self, callback: Callable[[Event], object]) -> Callable[[], None]:
        """Call ``callback(event)`` for every event; returns a function that unsubscribes."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    async def stream(self) -> AsyncIterator[Event]:
        """Iterate over events as they happen (until the consumer stops)."""
        queue: asyncio.Queue[Event] = asyncio.Queue()
        entry = (asyncio.get_running_loop(), queue)
        with self._lock:
            self._queues.append(entry)
        try:
            while True:
                yield await queue.get()
        finally:
            with self._lock:
                self._queues.remove(entry)

    @staticmethod
    def _check_limit(limit: int) -> int:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigError(
                f"audit_limit must be a whole number of events, 0 or more (0 keeps none); got {limit!r}",
                key="audit_limit",
            )
        return limit

    @property
    def audit_limit(self) -> int:
        """How many events the in-memory audit log keeps; lowering it drops the oldest at once."""
        maxlen = self._audit.maxlen
        assert maxlen is not None  # always built bounded
        return maxlen

    @audit_limit.setter
    def audit_limit(self, limit: int) -> None:
        limit = self._check_limit(limit)
        with self._lock:  # no emit lands on the old deque while the new one is built
            self._audit = deque(self._audit, maxlen=limit)

    @property
    def audit(self) -> list[dict[str, Any]]:
        """The in-memory audit log, oldest first: the dict (`event_to_dict`) of every event but ``context.status``."""
        with self._lock:  # a copy under the lock: an emit on another thread cannot change it mid-read
            kept = list(self._audit)
        return [event_to_dict(event) for event in kept]

    @property
    def listening(self) -> bool:
        """True when someone receives events: subscribers, async streams or sinks."""
        return bool(self._subscribers or self._queues or self.sinks)

    @property
    def status_listening(self) -> bool:
        """True when someone receives the per-turn ``context.status`` (sinks and the audit log do not)."""
        return bool(self._subscribers or self._queues)

    def emit(self, event: Event) -> None:
        """Deliver ``event``; a failing subscriber is logged and counted, never raised.

        Every event but the per-turn ``context.status`` is kept in the in-memory audit log and
        handed to the sinks.
        """
        audited = event.kind != "context.status"
        with self._lock:
            if audited:
                self._audit.append(event)
            subscribers = list(self._subscribers)
            queues = list(self._queues)
        if audited and self.sinks:
            record = event_to_dict(event)
            for sink in self.sinks:
                self._call(sink, record)
        for callback in subscribers:
            self._call(callback, event)
        for loop, queue in queues:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, event)
            except RuntimeError:  # the consumer's loop is closed; it will never read again
                continue

    def _call(self, fn: Callable[[Any], object], arg: Any) -> None:
        try:
            fn(arg)
        except Exception:
            self.subscriber_errors += 1
            logger.exception("event subscriber %r failed", fn)

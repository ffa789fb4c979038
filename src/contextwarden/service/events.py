"""Session events as Server-Sent Events: numbered per session, kept for resume, fanned out.

Every event of a session gets the next number of that session; the newest ``history`` of them are
kept, so a client reconnecting with ``Last-Event-ID`` gets what it missed. `LocalHub` does this in
process memory (one process, or SQLite); `RedisHub` keeps the numbers and the history in Redis and
fans events out with Redis pub/sub, so an SSE client of one replica sees the events of a session
served by another. Each session has its own channel, which a replica subscribes to only while one
of its clients watches that session: a replica does not read back every event of every replica.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import AsyncIterator, Mapping
from contextlib import suppress
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit, urlunsplit

__all__ = ["EventHub", "LocalHub", "RedisHub", "encode_event", "open_hub", "sse_stream"]

logger = logging.getLogger(__name__)

Numbered = tuple[int, dict[str, Any]]
"""An event's number in its session and its JSON-ready dict (``kind`` names it)."""


def encode_event(event_id: int, record: Mapping[str, Any]) -> bytes:
    """One SSE frame: ``id``, ``event`` (the event's kind) and its JSON as ``data``."""
    data = json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=str)
    return f"id: {event_id}\nevent: {record.get('kind', 'message')}\ndata: {data}\n\n".encode()


class EventHub(Protocol):
    """Numbers, keeps and delivers session events."""

    def publish(self, tenant: str, session_id: str, record: dict[str, Any]) -> None:
        """Queue an event of the session (never blocks; called from session callbacks)."""

    def listen(self, tenant: str, session_id: str) -> asyncio.Queue[Numbered]:
        """A queue receiving the session's events from now on; `unlisten` it when done."""
        ...

    def unlisten(self, tenant: str, session_id: str, queue: asyncio.Queue[Numbered]) -> None:
        """Stop delivering to ``queue``."""

    async def ready(self, tenant: str, session_id: str) -> None:
        """Return once the session's events published from now on reach its listeners (after `listen`)."""

    async def since(self, tenant: str, session_id: str, after: int) -> list[Numbered]:
        """Kept events numbered above ``after``, oldest first."""
        ...

    async def start(self) -> None:
        """Start background delivery."""

    async def stop(self) -> None:
        """Stop background delivery."""

    async def ping(self) -> None:
        """Raise when the hub's backend cannot be reached."""


class _Listeners:
    def __init__(self) -> None:
        self._queues: defaultdict[tuple[str, str], set[asyncio.Queue[Numbered]]] = defaultdict(set)

    def listen(self, tenant: str, session_id: str) -> asyncio.Queue[Numbered]:
        queue: asyncio.Queue[Numbered] = asyncio.Queue(maxsize=10_000)
        queues = self._queues[(tenant, session_id)]
        queues.add(queue)
        if len(queues) == 1:
            self._watched(tenant, session_id, True)
        return queue

    def unlisten(self, tenant: str, session_id: str, queue: asyncio.Queue[Numbered]) -> None:
        queues = self._queues.get((tenant, session_id))
        if queues is not None:
            queues.discard(queue)
            if not queues:
                del self._queues[(tenant, session_id)]
                self._watched(tenant, session_id, False)

    def _watched(self, tenant: str, session_id: str, watched: bool) -> None:
        """The session got its first listener (``watched``) or lost its last one."""

    def deliver(self, tenant: str, session_id: str, item: Numbered) -> None:
        for queue in list(self._queues.get((tenant, session_id), ())):
            with suppress(asyncio.QueueFull):  # a client that stopped reading loses events, not the server
                queue.put_nowait(item)


class LocalHub(_Listeners):
    """Events of this process only (a single replica), kept for the ``sessions`` most recently active."""

    def __init__(self, history: int = 1000, *, sessions: int = 1000) -> None:
        super().__init__()
        self.history = history
        self.sessions = sessions
        self._kept: OrderedDict[tuple[str, str], tuple[int, deque[Numbered]]] = OrderedDict()

    def publish(self, tenant: str, session_id: str, record: dict[str, Any]) -> None:
        key = (tenant, session_id)
        number, kept = self._kept.pop(key, (0, deque(maxlen=self.history)))
        item = (number + 1, record)
        kept.append(item)
        self._kept[key] = (number + 1, kept)  # most recent last
        if len(self._kept) > self.sessions:
            # a session idle this long restarts its numbers; its clients resume from the start
            self._kept.popitem(last=False)
        self.deliver(tenant, session_id, item)

    async def ready(self, tenant: str, session_id: str) -> None:
        return None  # delivery is in process: a listener gets every event published after `listen`

    async def since(self, tenant: str, session_id: str, after: int) -> list[Numbered]:
        number, kept = self._kept.get((tenant, session_id), (0, deque()))
        if after > number:
            after = 0  # numbers from before a restart (or an eviction): everything kept is new to the client
        return [item for item in kept if item[0] > after]

    def forget(self, tenant: str, session_id: str) -> None:
        """Drop a deleted session's events."""
        self._kept.pop((tenant, session_id), None)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def ping(self) -> None:
        return None


# Numbers the event, keeps it (newest first, trimmed) and publishes "<number> <json>" in one step.
_PUBLISH = """
local n = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[4])
local message = n .. ' ' .. ARGV[2]
if tonumber(ARGV[3]) > 0 then
  redis.call('LPUSH', KEYS[2], message)
  redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
  redis.call('EXPIRE', KEYS[2], ARGV[4])
end
redis.call('PUBLISH', ARGV[1], message)
return n
"""


_PUBLISH_BATCH = 100
"""Events sent to Redis in one pipeline at most."""


class RedisHub(_Listeners):
    """Events shared by every replica over one Redis: numbers and history in keys, delivery by pub/sub.

    An event is published on its session's channel. One pub/sub connection per replica subscribes
    to the channels of the sessions its clients watch (and to the hub's own channel, which keeps
    the connection subscribed while none is watched); subscriptions follow `listen` and `unlisten`
    in order, through one task.
    """

    def __init__(self, url: str, *, prefix: str = "contextwarden", history: int = 1000, ttl: int = 7 * 86400) -> None:
        super().__init__()
        import redis.asyncio as aioredis

        self._redis = aioredis.Redis.from_url(url)
        self.prefix = prefix
        self.history = history
        self.ttl = ttl
        self.channel = f"{prefix}:events"
        self._outbox: asyncio.Queue[tuple[str, str, dict[str, Any]]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._sha = hashlib.sha1(_PUBLISH.encode()).hexdigest()
        self._subscribed = asyncio.Event()
        self._changes: asyncio.Queue[str] = asyncio.Queue()
        """Channels whose subscription may have to change (watched or not any more)."""
        self._wanted: set[str] = set()
        """Channels of the sessions this replica's clients watch."""
        self._due: Counter[str] = Counter()
        """Subscribe commands sent on the current connection and not yet confirmed, by channel."""
        self._live: dict[str, asyncio.Event] = {}
        """Per watched channel: set once its last subscribe command is confirmed."""
        self._pubsub: Any = None

    def _base(self, tenant: str, session_id: str) -> str:
        return f"{self.prefix}:ev:{len(tenant)}:{tenant}:{session_id}"

    def _keys(self, tenant: str, session_id: str) -> list[str]:
        base = self._base(tenant, session_id)
        return [f"{base}:n", f"{base}:log"]

    def _session_channel(self, tenant: str, session_id: str) -> str:
        return f"{self._base(tenant, session_id)}:live"

    def publish(self, tenant: str, session_id: str, record: dict[str, Any]) -> None:
        self._outbox.put_nowait((tenant, session_id, record))

    def _watched(self, tenant: str, session_id: str, watched: bool) -> None:
        channel = self._session_channel(tenant, session_id)
        if watched:
            self._wanted.add(channel)
            live = self._live.get(channel)
            if live is None or live.is_set():
                self._live[channel] = asyncio.Event()
        else:
            self._wanted.discard(channel)
            self._live.pop(channel, None)
        self._changes.put_nowait(channel)

    async def ready(self, tenant: str, session_id: str) -> None:
        live = self._live.get(self._session_channel(tenant, session_id))
        if live is not None:
            with suppress(TimeoutError):  # Redis unreachable: live events resume when it is back
                await asyncio.wait_for(live.wait(), timeout=5.0)

    async def _publisher(self) -> None:
        from redis.exceptions import NoScriptError

        while True:
            batch = [await self._outbox.get()]
            # a request emits a few events at once: they go out in one round trip, in order
            while not self._outbox.empty() and len(batch) < _PUBLISH_BATCH:
                batch.append(self._outbox.get_nowait())
            calls = [
                (
                    *self._keys(tenant, session_id),
                    self._session_channel(tenant, session_id),
                    json.dumps([tenant, session_id, record], separators=(",", ":"), default=str),
                    self.history,
                    self.ttl,
                )
                for tenant, session_id, record in batch
            ]
            try:
                try:
                    await self._send(calls)
                except NoScriptError:  # Redis restarted or its scripts were flushed: load it again, once
                    await self._redis.script_load(_PUBLISH)
                    await self._send(calls)
            except Exception:  # events are best effort: a Redis outage must not stop the proxy
                logger.warning("could not publish %d events to Redis", len(batch))

    async def _send(self, calls: list[tuple[Any, ...]]) -> None:
        if len(calls) == 1:  # a request's one status event: a pipeline would only add its own bookkeeping
            await self._redis.evalsha(self._sha, 2, *calls[0])
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for call in calls:
                pipe.evalsha(self._sha, 2, *call)
            await pipe.execute()

    async def _subscriptions(self) -> None:
        """Subscribe to a channel when it becomes watched, unsubscribe when it is not any more."""
        subscribed: set[bytes] = set()
        connection: Any = None
        while True:
            channel = await self._changes.get()
            await self._subscribed.wait()
            pubsub = self._pubsub
            if pubsub is not connection:  # a new connection subscribed to what was wanted then
                connection, subscribed = pubsub, set(pubsub.channels)
            want, have = channel in self._wanted, channel.encode() in subscribed
            if want and have and not self._due.get(channel):
                # watched again before its unsubscribe went out: still subscribed, and confirmed
                live = self._live.get(channel)
                if live is not None:
                    live.set()
            try:
                if want and not have:
                    self._due[channel] += 1
                    await pubsub.subscribe(channel)
                    subscribed.add(channel.encode())
                elif have and not want:
                    await pubsub.unsubscribe(channel)
                    subscribed.discard(channel.encode())
            except Exception:  # the connection broke: the subscriber subscribes again to what is wanted
                logger.warning("Redis event subscription of %s failed", channel)

    async def _subscriber(self) -> None:
        while True:
            pubsub = self._redis.pubsub()
            try:
                self._subscribed.clear()
                wanted = sorted(self._wanted)
                self._due = Counter(wanted)
                await pubsub.subscribe(self.channel, *wanted)
                self._pubsub = pubsub
                self._subscribed.set()
                async for message in pubsub.listen():
                    kind = message.get("type")
                    if kind == "subscribe":
                        self._confirmed(_text(message["channel"]))
                    elif kind == "message":
                        item = _parse(message["data"])
                        if item is not None:
                            tenant, session_id, numbered = item
                            self.deliver(tenant, session_id, numbered)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning("Redis event subscription broke; resubscribing in 1 s")
                await asyncio.sleep(1.0)
            finally:
                with suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call,unused-ignore]  # typed from redis 8.2 on

    def _confirmed(self, channel: str) -> None:
        """Redis confirmed a subscribe command: the channel is live once its last one is."""
        due = self._due.pop(channel, 0) - 1
        if due > 0:
            self._due[channel] = due
        else:
            live = self._live.get(channel)
            if live is not None and channel in self._wanted:
                live.set()

    async def since(self, tenant: str, session_id: str, after: int) -> list[Numbered]:
        raw = await self._redis.lrange(self._keys(tenant, session_id)[1], 0, -1)
        out: list[Numbered] = []
        for data in reversed(raw):
            item = _parse(data)
            if item is not None and item[2][0] > after:
                out.append(item[2])
        return out

    def forget(self, tenant: str, session_id: str) -> None:
        """Nothing to drop here: a deleted session's keys expire."""

    async def start(self) -> None:
        with suppress(Exception):  # an unreachable Redis is reported by /readyz; the publisher loads it later
            await self._redis.script_load(_PUBLISH)
        self._tasks = [
            asyncio.create_task(self._publisher()),
            asyncio.create_task(self._subscriber()),
            asyncio.create_task(self._subscriptions()),
        ]
        with suppress(TimeoutError):
            await asyncio.wait_for(self._subscribed.wait(), timeout=5.0)

    async def stop(self) -> None:
        # let queued events go out before the publisher stops
        with suppress(TimeoutError):
            await asyncio.wait_for(self._drain(), timeout=2.0)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(asyncio.CancelledError, Exception):
                await task
        await self._redis.aclose()

    async def _drain(self) -> None:
        while not self._outbox.empty():
            await asyncio.sleep(0.01)

    async def ping(self) -> None:
        await self._redis.ping()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _parse(data: bytes | str) -> tuple[str, str, Numbered] | None:
    text = _text(data)
    number, _, payload = text.partition(" ")
    try:
        tenant, session_id, record = json.loads(payload)
        return str(tenant), str(session_id), (int(number), record)
    except (ValueError, TypeError):
        return None


def open_hub(store_url: str, *, history: int) -> LocalHub | RedisHub:
    """A `RedisHub` when the store is Redis (replicas share it), else a `LocalHub`."""
    parts = urlsplit(store_url)
    scheme = parts.scheme.lower()
    if scheme not in ("redis", "rediss"):
        return LocalHub(history)
    prefix = parse_qs(parts.query).get("prefix", ["contextwarden"])[0]
    return RedisHub(urlunsplit((scheme, parts.netloc, parts.path, "", "")), prefix=prefix, history=history)


async def sse_stream(
    hub: EventHub,
    tenant: str,
    session_id: str,
    *,
    last_event_id: int,
    keepalive: float,
) -> AsyncIterator[bytes]:
    """The session's events as SSE frames: first those after ``last_event_id``, then live ones.

    A comment line goes out every ``keepalive`` seconds without events, so proxies keep the
    connection open and a dead client is noticed.
    """
    queue = hub.listen(tenant, session_id)  # before reading the history: nothing falls in between
    try:
        yield b"retry: 2000\n\n"
        await hub.ready(tenant, session_id)  # live delivery runs before the history is read: no gap between
        sent = last_event_id
        for number, record in await hub.since(tenant, session_id, last_event_id):
            yield encode_event(number, record)
            sent = number
        while True:
            try:
                number, record = await asyncio.wait_for(queue.get(), timeout=keepalive)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            if number <= sent:
                continue  # already sent from the history
            yield encode_event(number, record)
            sent = number
    finally:
        hub.unlisten(tenant, session_id, queue)

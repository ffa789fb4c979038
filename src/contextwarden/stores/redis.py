"""Redis session store (redis-py; extra ``[redis]``).

Every key of a session carries the hash tag ``{<prefix>:<session>}``, so a session lives in one
Redis Cluster slot and each operation is one Lua script over that slot: atomic (a batch of
messages appears whole or not at all) and one round trip. Session ids are percent-encoded in
keys, so ids with ``/``, quotes, braces or colons cannot collide or break the tag.

Keys of session ``S`` (``T = {prefix:S}``): ``T:meta`` (hash), ``T:ids`` (message id -> position),
``T:msgs`` (list of message JSON), ``T:state`` / ``T:statever`` (state slots and their versions),
``T:snaps`` / ``T:snapmeta``, ``T:audit`` (list), ``T:lock``. Listing uses two sorted sets outside
the session slot, ``prefix:sessions`` and ``prefix:tenant=<tenant>``; they are updated after the
session's own keys and cleaned lazily, so a listing never shows a session that is gone. No key
has a colon after ``prefix:`` (tenants and session ids are percent-encoded), so the keys of two
prefixes never collide, even when one prefix extends the other (``cw`` and ``cw:tenant``).
Namespaces written by schema version 1 kept tenant listings under ``prefix:tenant:<tenant>``;
the first use by this release copies them to the new keys (one pass over the session index).

With ``ttl`` set, every write pushes the expiry of all the session's keys ``ttl`` seconds ahead:
Redis itself then removes idle sessions. Without it, `expire_idle` walks the session index
(cost grows with the number of sessions; run it from a periodic job, not per request).

Redis Cluster: pass a ``redis.cluster.RedisCluster`` (or ``redis.asyncio.cluster.RedisCluster``)
client, or open ``redis+cluster://host:port,host2:port2/?prefix=cw`` (``rediss+cluster://`` for
TLS; every listed node is a seed, one reachable seed is enough). No script ever touches two
slots: a session's scripts touch only its own tagged keys, and the indexes are separate keys
changed by plain single-key commands, so sessions and indexes spread over all masters. Listing
and expiry send one pipeline per page, which the cluster client splits by node. A master that
loses its data (restarted without persistence, failed over without a replica) may take an index
with it while other masters keep their sessions: `RedisStore.reindex` rebuilds the indexes.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Self

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import (
    ClusterDownError,
    ClusterError,
    ConnectionError as RedisConnectionError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    SlotNotCoveredError,
    TimeoutError as RedisTimeoutError,
    TryAgainError,
)
from redis.retry import Retry

from ..exceptions import ConfigError, StoreError, StoreUnavailable
from .base import BaseAsyncStore, BaseStore
from .locks import DEFAULT_LOCK_LEASE
from .ops import Op, T, adrive, drive
from .redis_ops import SCAN_PAGE, SCHEMA_VERSION, Cmd, Eval, Pipe, RedisOps
from .redis_url import check_prefix, parse_url

__all__ = ["SCHEMA_VERSION", "AsyncRedisStore", "RedisStore"]


# --- drivers ------------------------------------------------------------------------------------

# A cluster client reports an unreachable or reconfiguring cluster with these messages.
_CLUSTER_UNAVAILABLE = ("cannot be connected", "not covered", "could not agree")


def _connection_kwargs(client: Any) -> dict[str, Any]:
    """The connection settings of a standalone client (its pool's) or a cluster client (its nodes')."""
    for source in (getattr(client, "connection_pool", None), getattr(client, "nodes_manager", None), client):
        kwargs = getattr(source, "connection_kwargs", None)
        if isinstance(kwargs, dict):
            return kwargs
    return {}


def _check_client(client: Any) -> None:
    if _connection_kwargs(client).get("decode_responses"):
        raise ConfigError(
            "the Redis client decodes responses to str, which would corrupt binary snapshots; create it with "
            "`decode_responses=False` (the default).",
            key="decode_responses",
        )


def _owned_client_options(options: dict[str, Any], *, asynchronous: bool) -> dict[str, Any]:
    # Fail fast when the server is gone: a handful of short retries, then StoreUnavailable. The
    # asyncio clients need the asyncio Retry (the sync one would not retry awaited calls).
    backoff = ExponentialWithJitterBackoff(base=0.01, cap=0.2)
    defaults: dict[str, Any] = {
        "socket_connect_timeout": 5.0,
        "socket_timeout": 10.0,
        "retry": AsyncRetry(backoff, 3) if asynchronous else Retry(backoff, 3),
    }
    return {**defaults, **options}


def _translate(exc: Exception, where: str) -> StoreError:
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):
        return StoreUnavailable(
            f"Redis at {where} is unreachable ({type(exc).__name__}: {exc}); the operation was not confirmed. "
            "Check the server and retry; appends are idempotent by message id."
        )
    text = str(exc)
    if isinstance(exc, ClusterDownError | ClusterError | TryAgainError | SlotNotCoveredError):
        return StoreUnavailable(
            f"Redis at {where} is not ready ({type(exc).__name__}: {text}); the cluster is failing over or "
            "resharding, retry shortly."
        )
    if isinstance(exc, RedisClusterException):
        if "not enabled" in text:
            return StoreError(
                f"Redis at {where} is not a cluster node ({text}); use a `redis://` URL (or a `redis.Redis` "
                "client) for a standalone server."
            )
        if isinstance(exc.__cause__, RedisConnectionError | RedisTimeoutError | OSError) or any(
            marker in text for marker in _CLUSTER_UNAVAILABLE
        ):
            return StoreUnavailable(
                f"Redis at {where} is unreachable or incomplete ({text}); the operation was not confirmed. "
                "Check the cluster nodes and retry; appends are idempotent by message id."
            )
    if text.startswith(("LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN")):
        return StoreUnavailable(f"Redis at {where} is not ready ({text}); retry shortly.")
    return StoreError(f"Redis at {where} failed: {type(exc).__name__}: {text}")


# The sync ClusterNode is untyped; through this alias strict mypy accepts calling it.
_sync_node: Callable[[str, int], Any] = redis.cluster.ClusterNode

# RedisClusterException (no cluster reachable, slots not covered) is not a RedisError.
_DRIVER_ERRORS = (RedisError, RedisClusterException)


def _describe(client: Any) -> str:
    manager = getattr(client, "nodes_manager", None)
    if manager is not None:
        return "cluster " + (",".join(sorted(getattr(manager, "startup_nodes", {}))) or "?")
    kwargs = _connection_kwargs(client)
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"


def _pipeline_parts(pipe: Any, commands: Sequence[Cmd | Eval]) -> None:
    for part in commands:
        if isinstance(part, Cmd):
            pipe.execute_command(*part.args)
        else:
            pipe.execute_command("EVALSHA", part.script.sha, len(part.keys), *part.keys, *part.args)


def _refused_scripts(commands: Sequence[Cmd | Eval], replies: Sequence[Any]) -> list[int]:
    """Positions of the scripts a node did not know (to send again in full); raise any other error.

    A node that lost its script cache (a restart, a failover) refuses only its own share of a
    pipeline; on a cluster the other nodes ran theirs, so only the refused commands are resent.
    """
    refused: list[int] = []
    for position, (part, reply) in enumerate(zip(commands, replies, strict=True)):
        if isinstance(reply, NoScriptError) and isinstance(part, Eval):
            refused.append(position)
        elif isinstance(reply, Exception):
            raise reply
    return refused


def _eval_args(command: Eval, *, full: bool) -> tuple[Any, ...]:
    head = ("EVAL", command.script.source) if full else ("EVALSHA", command.script.sha)
    return (*head, len(command.keys), *command.keys, *command.args)


def _close_sync_client(client: Any) -> None:
    manager = getattr(client, "nodes_manager", None)
    if manager is None:
        client.close()
        return
    # A cluster client made from a URL gives each node a Redis client over a pool it passed in,
    # and closing such a client leaves the pool's sockets open: disconnect the pools ourselves.
    nodes = [*getattr(manager, "nodes_cache", {}).values(), *getattr(manager, "startup_nodes", {}).values()]
    client.close()
    for node in nodes:
        node_client = getattr(node, "redis_connection", None)
        if node_client is not None:
            node_client.connection_pool.disconnect()


class RedisStore(BaseStore):
    """`SessionStore` on Redis or Redis Cluster.

    Args:
        client: A ``redis.Redis`` or ``redis.cluster.RedisCluster`` made with ``decode_responses=False``
            (the default); the store does not close it.
        prefix: Namespace of every key (braces not allowed).
        ttl: Seconds of inactivity after which Redis removes a session by itself; None keeps sessions.
        clock: Source of timestamps (tests inject a fake one).
        lock_lease: Seconds a lock outlives its holder's last heartbeat (a live holder renews it).
    """

    def __init__(
        self,
        client: redis.Redis | redis.cluster.RedisCluster,
        *,
        prefix: str = "cw",
        ttl: float | None = None,
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
    ) -> None:
        super().__init__(clock=clock, lock_lease=lock_lease)
        _check_client(client)
        # redis-py's command methods are untyped; the store only uses execute_command and pipelines.
        self._client: Any = client
        self._ops: RedisOps = RedisOps(prefix=check_prefix(prefix), ttl=ttl)
        self._owns = False
        self._ready = False
        self._where = _describe(client)

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        prefix: str = "cw",
        ttl: float | None = None,
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
        **client_options: Any,
    ) -> Self:
        """A store owning a new client for ``url`` (``?prefix=`` and ``?ttl=`` in the query are ours).

        ``redis://`` and ``rediss://`` connect on first use. ``redis+cluster://`` (and
        ``rediss+cluster://``) make a cluster client, which reads the slot map from the first
        reachable node right away.

        Raises:
            StoreUnavailable: a cluster URL whose nodes cannot be reached.
            ConfigError: a malformed URL (a cluster URL naming a database other than 0).
        """
        target = parse_url(url)
        options = _owned_client_options(client_options, asynchronous=False)
        client: redis.Redis | redis.cluster.RedisCluster
        if target.cluster:
            seeds = [_sync_node(host, port) for host, port in target.seeds]
            try:
                client = redis.cluster.RedisCluster.from_url(target.url, startup_nodes=seeds or None, **options)
            except _DRIVER_ERRORS as exc:
                raise _translate(exc, target.where) from exc
        else:
            client = redis.Redis.from_url(target.url, **options)
        store = cls(
            client,
            prefix=target.options.get("prefix", prefix),
            ttl=target.options.get("ttl", ttl),
            clock=clock,
            lock_lease=lock_lease,
        )
        store._owns = True
        return store

    @classmethod
    @contextmanager
    def from_url(cls, url: str, **kwargs: Any) -> Iterator[Self]:
        """Open the store for ``url`` and close its client when the block ends."""
        store = cls.connect(url, **kwargs)
        try:
            yield store
        finally:
            store.close()

    def close(self) -> None:
        if self._owns:
            _close_sync_client(self._client)

    def _call(self, command: Cmd | Eval) -> Any:
        if isinstance(command, Cmd):
            return self._client.execute_command(*command.args)
        try:
            return self._client.execute_command(*_eval_args(command, full=False))
        except NoScriptError:
            return self._client.execute_command(*_eval_args(command, full=True))

    def _execute(self, command: Cmd | Eval | Pipe) -> Any:
        if not isinstance(command, Pipe):
            return self._call(command)
        with self._client.pipeline(transaction=False) as pipe:
            _pipeline_parts(pipe, command.commands)
            replies = list(pipe.execute(raise_on_error=False))
        for position in _refused_scripts(command.commands, replies):
            part = command.commands[position]
            assert isinstance(part, Eval)
            replies[position] = self._client.execute_command(*_eval_args(part, full=True))
        return replies

    def _run(self, op: Op[T], *, write: bool) -> T:
        try:
            if not self._ready:
                drive(self._ops.setup(), self._execute)
                self._ready = True
            return drive(op, self._execute)
        except _DRIVER_ERRORS as exc:
            raise _translate(exc, self._where) from exc

    def reindex(self) -> int:
        """Rebuild the listing indexes from the sessions' own keys; return the number of sessions.

        Needed only after Redis lost the index keys but not all sessions: on a cluster, a master
        that restarted without persistence (or failed over without a replica) takes the indexes it
        held with it, and the sessions on the other masters would no longer be listed or expired.
        It SCANs every master (cost grows with the whole key space): run it from an operator's
        job, not per request.
        """
        found = 0
        batch: list[str] = []
        try:
            for key in self._client.scan_iter(match=self._ops.meta_pattern(), count=1000):
                session_id = self._ops.session_of_meta_key(key)
                if session_id is not None:
                    batch.append(session_id)
                if len(batch) >= SCAN_PAGE:
                    found += self._run(self._ops.reindex(batch), write=True)
                    batch = []
        except _DRIVER_ERRORS as exc:
            raise _translate(exc, self._where) from exc
        if batch:
            found += self._run(self._ops.reindex(batch), write=True)
        return found


class AsyncRedisStore(BaseAsyncStore):
    """The async twin of `RedisStore`, on ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``.

    Args:
        client: An asyncio Redis or Redis Cluster client made with ``decode_responses=False``; the
            store does not close it.
        prefix: Namespace of every key (braces not allowed).
        ttl: Seconds of inactivity after which Redis removes a session by itself; None keeps sessions.
        clock: Source of timestamps.
        lock_lease: Seconds a lock outlives its holder's last heartbeat (a live holder renews it).
    """

    def __init__(
        self,
        client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster,
        *,
        prefix: str = "cw",
        ttl: float | None = None,
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
    ) -> None:
        super().__init__(clock=clock, lock_lease=lock_lease)
        _check_client(client)
        # redis-py's command methods are untyped; the store only uses execute_command and pipelines.
        self._client: Any = client
        self._ops: RedisOps = RedisOps(prefix=check_prefix(prefix), ttl=ttl)
        self._owns = False
        self._ready = False
        self._where = _describe(client)

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        prefix: str = "cw",
        ttl: float | None = None,
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
        **client_options: Any,
    ) -> Self:
        """A store owning a new client for ``url`` (a ``redis+cluster://`` URL too); it connects on first use."""
        target = parse_url(url)
        options = _owned_client_options(client_options, asynchronous=True)
        client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster
        if target.cluster:
            seeds = [redis.asyncio.cluster.ClusterNode(host, port) for host, port in target.seeds]
            client = redis.asyncio.cluster.RedisCluster.from_url(target.url, startup_nodes=seeds or None, **options)
        else:
            client = redis.asyncio.Redis.from_url(target.url, **options)
        store = cls(
            client,
            prefix=target.options.get("prefix", prefix),
            ttl=target.options.get("ttl", ttl),
            clock=clock,
            lock_lease=lock_lease,
        )
        store._owns = True
        return store

    @classmethod
    @asynccontextmanager
    async def from_url(cls, url: str, **kwargs: Any) -> AsyncIterator[Self]:
        """Open the store for ``url`` and close its client when the block ends."""
        store = cls.connect(url, **kwargs)
        try:
            yield store
        finally:
            await store.aclose()

    async def aclose(self) -> None:
        if self._owns:
            await self._client.aclose()

    async def _call(self, command: Cmd | Eval) -> Any:
        if isinstance(command, Cmd):
            return await self._client.execute_command(*command.args)
        try:
            return await self._client.execute_command(*_eval_args(command, full=False))
        except NoScriptError:
            return await self._client.execute_command(*_eval_args(command, full=True))

    async def _execute(self, command: Cmd | Eval | Pipe) -> Any:
        if not isinstance(command, Pipe):
            return await self._call(command)
        async with self._client.pipeline(transaction=False) as pipe:
            _pipeline_parts(pipe, command.commands)
            replies = list(await pipe.execute(raise_on_error=False))
        for position in _refused_scripts(command.commands, replies):
            part = command.commands[position]
            assert isinstance(part, Eval)
            replies[position] = await self._client.execute_command(*_eval_args(part, full=True))
        return replies

    async def _run(self, op: Op[T], *, write: bool) -> T:
        execute: Callable[[Any], Awaitable[Any]] = self._execute
        try:
            if not self._ready:
                await adrive(self._ops.setup(), execute)
                self._ready = True
            return await adrive(op, execute)
        except _DRIVER_ERRORS as exc:
            raise _translate(exc, self._where) from exc

    async def reindex(self) -> int:
        """Rebuild the listing indexes from the sessions' own keys (see `RedisStore.reindex`)."""
        found = 0
        batch: list[str] = []
        try:
            async for key in self._client.scan_iter(match=self._ops.meta_pattern(), count=1000):
                session_id = self._ops.session_of_meta_key(key)
                if session_id is not None:
                    batch.append(session_id)
                if len(batch) >= SCAN_PAGE:
                    found += await self._run(self._ops.reindex(batch), write=True)
                    batch = []
        except _DRIVER_ERRORS as exc:
            raise _translate(exc, self._where) from exc
        if batch:
            found += await self._run(self._ops.reindex(batch), write=True)
        return found

"""Fixtures for the session-store suites: real Redis and Postgres, one namespace per test.

Servers come from ``CONTEXTWARDEN_TEST_REDIS_URL`` / ``CONTEXTWARDEN_TEST_POSTGRES_URL``
(defaults: the local servers). The Redis Cluster is started by the test run itself from the
installed ``redis-server`` (three masters on free ports, stopped at the end), unless
``CONTEXTWARDEN_TEST_REDIS_CLUSTER_URL`` names one (``redis+cluster://host:port/``). A test that
needs an unreachable server (or a missing ``redis-server``) skips, or fails when
``CONTEXTWARDEN_REQUIRE_SERVICES=1`` (as in CI). Every Redis test gets its own key prefix and
every Postgres test its own schema; both are removed afterwards.

The `store` fixture runs each contract test on every backend, through the sync store and through
the async twin (driven from a blocking portal), so both twins pass the very same scenarios.
"""

from __future__ import annotations

import functools
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import psycopg
import pytest
import redis
import redis.cluster
from anyio.from_thread import BlockingPortal, start_blocking_portal

from _services import POSTGRES_URL, REDIS_URL, unavailable
from contextwarden.stores import (
    AsyncMemoryStore,
    AsyncSqliteStore,
    MemoryStore,
    SqliteStore,
)
from contextwarden.stores.postgres import AsyncPostgresStore, PostgresStore
from contextwarden.stores.redis import AsyncRedisStore, RedisStore
from contextwarden.stores.redis_url import parse_url

from ._cluster import ClusterStartError, LocalCluster, find_binaries, start_cluster

REDIS_CLUSTER_URL = os.environ.get("CONTEXTWARDEN_TEST_REDIS_CLUSTER_URL")
BACKENDS = ("memory", "sqlite", "redis", "redis-cluster", "postgres")


def service_missing(what: str, variable: str, error: BaseException, *, problem: str = "is not reachable") -> NoReturn:
    """Skip (or, with CONTEXTWARDEN_REQUIRE_SERVICES=1, fail) a test whose server is unreachable."""
    message = (
        f"{what} {problem} ({type(error).__name__}: {error}); start it, or point {variable} at one. "
        "Set CONTEXTWARDEN_REQUIRE_SERVICES=1 to make this a failure."
    )
    unavailable(message)


@pytest.fixture(scope="session")
def redis_url() -> str:
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        service_missing(f"Redis at {REDIS_URL}", "CONTEXTWARDEN_TEST_REDIS_URL", exc)
    finally:
        client.close()
    return REDIS_URL


def cluster_client(url: str, **options: Any) -> redis.cluster.RedisCluster:
    """A plain cluster client (for checks and cleanup) on the first node of a ``redis+cluster://`` URL.

    Made from host and port, not from the URL: redis-py's `close` leaves the sockets of a
    URL-made cluster client open.
    """
    first = urlsplit(parse_url(url).url)
    return redis.cluster.RedisCluster(host=first.hostname, port=first.port or 6379, socket_connect_timeout=2, **options)


@contextmanager
def local_cluster(directory: Path) -> Iterator[LocalCluster]:
    """A Redis Cluster of three masters started here (skip or fail when redis-server is missing)."""
    if find_binaries() is None:
        service_missing(
            "Redis Cluster",
            "CONTEXTWARDEN_TEST_REDIS_CLUSTER_URL",
            FileNotFoundError("redis-server and redis-cli are not both on PATH"),
            problem="cannot be started here: install redis-server (it brings redis-cli)",
        )
    try:
        cluster = start_cluster(directory)
    except (ClusterStartError, OSError, subprocess.SubprocessError) as exc:
        service_missing("Redis Cluster", "CONTEXTWARDEN_TEST_REDIS_CLUSTER_URL", exc, problem="did not start")
        raise  # unreachable: service_missing raises
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis Cluster for the whole run: the one the environment names, or our own."""
    if REDIS_CLUSTER_URL:
        try:
            cluster_client(REDIS_CLUSTER_URL).close()
        except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
            service_missing(f"Redis Cluster at {REDIS_CLUSTER_URL}", "CONTEXTWARDEN_TEST_REDIS_CLUSTER_URL", exc)
        yield REDIS_CLUSTER_URL
        return
    with local_cluster(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster.url


def drop_cluster_prefix(url: str, prefix: str) -> None:
    # scan_iter walks every master; delete splits the keys by slot
    drop_keys(cluster_client(url), prefix)


def drop_keys(client: Any, prefix: str) -> None:
    """Delete every key of a test's prefix (hash-tagged or not), then close the client."""
    try:
        for pattern in (f"{{{prefix}:*", f"{prefix}:*"):
            keys = list(client.scan_iter(match=pattern, count=1000))
            if keys:
                client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def redis_cluster_prefix(redis_cluster_url: str) -> Iterator[str]:
    prefix = f"ckt-{uuid.uuid4().hex[:12]}"
    yield prefix
    drop_cluster_prefix(redis_cluster_url, prefix)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        service_missing(f"Postgres at {POSTGRES_URL}", "CONTEXTWARDEN_TEST_POSTGRES_URL", exc)
    return POSTGRES_URL


def drop_redis_prefix(url: str, prefix: str) -> None:
    drop_keys(redis.Redis.from_url(url), prefix)


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    prefix = f"ckt-{uuid.uuid4().hex[:12]}"
    yield prefix
    drop_redis_prefix(redis_url, prefix)


def drop_pg_schema(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def pg_schema(postgres_url: str) -> Iterator[str]:
    schema = f"ckt_{uuid.uuid4().hex[:12]}"
    yield schema
    drop_pg_schema(postgres_url, schema)


class FakeClock:
    """A settable clock: stores stamp sessions with it, so idle expiry tests need no sleeping."""

    def __init__(self, start: float = 1_750_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def portal() -> Iterator[BlockingPortal]:
    with start_blocking_portal(backend="asyncio") as portal:
        yield portal


async def _collect(lines: AsyncIterator[str]) -> list[str]:
    return [line async for line in lines]


class PortalStore:
    """Sync view of an async store: each call runs on the portal's event loop."""

    def __init__(self, portal: BlockingPortal, store: Any) -> None:
        self.portal = portal
        self.inner = store

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if name == "export_session":
            return lambda *args, **kwargs: iter(self.portal.call(_collect, attribute(*args, **kwargs)))
        if name == "lock":
            return lambda *args, **kwargs: self.portal.wrap_async_context_manager(attribute(*args, **kwargs))
        if not callable(attribute):
            return attribute
        return lambda *args, **kwargs: self.portal.call(functools.partial(attribute, *args, **kwargs))

    def close(self) -> None:
        self.portal.call(self.inner.aclose)


class Backend:
    """Makes stores of one backend over one namespace (each new store sees the same sessions)."""

    def __init__(self, name: str, mode: str, *, request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock):
        self.name = name
        self.mode = mode
        self.clock = clock
        self._request = request
        self._tmp_path = tmp_path
        self._created: list[Any] = []
        self._first: Any = None
        if name == "redis":
            self.url = request.getfixturevalue("redis_url")
            self.prefix = request.getfixturevalue("redis_prefix")
        elif name == "redis-cluster":
            self.url = request.getfixturevalue("redis_cluster_url")
            self.prefix = request.getfixturevalue("redis_cluster_prefix")
        elif name == "postgres":
            self.url = request.getfixturevalue("postgres_url")
            self.schema = request.getfixturevalue("pg_schema")
        elif name == "sqlite":
            self.path = tmp_path / "cw.db"

    def make(self, **options: Any) -> Any:
        """A new store over this test's namespace."""
        options.setdefault("clock", self.clock)
        if self.mode == "async":
            portal: BlockingPortal = self._request.getfixturevalue("portal")
            store = PortalStore(portal, portal.call(functools.partial(self._make_async, **options)))
        else:
            store = self._make_sync(**options)
        if self._first is None:
            self._first = store
        self._created.append(store)
        return store

    def _make_sync(self, **options: Any) -> Any:
        if self.name == "memory":
            share = self._first
            return MemoryStore(share=share, **options)
        if self.name == "sqlite":
            return SqliteStore.connect(self.path, **options)
        if self.name in ("redis", "redis-cluster"):
            return RedisStore.connect(self.url, prefix=self.prefix, **options)
        return PostgresStore.connect(self.url, schema=self.schema, **options)

    def _make_async(self, **options: Any) -> Any:
        if self.name == "memory":
            share = self._first.inner if self._first is not None else None
            return AsyncMemoryStore(share=share, **options)
        if self.name == "sqlite":
            return AsyncSqliteStore.connect(self.path, **options)
        if self.name in ("redis", "redis-cluster"):
            return AsyncRedisStore.connect(self.url, prefix=self.prefix, **options)
        return AsyncPostgresStore.connect(self.url, schema=self.schema, **options)

    def close(self) -> None:
        for store in reversed(self._created):
            store.close()


@pytest.fixture(params=[(name, mode) for name in BACKENDS for mode in ("sync", "async")], ids=lambda p: "-".join(p))
def backend(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Backend]:
    name, mode = request.param
    made = Backend(name, mode, request=request, tmp_path=tmp_path, clock=clock)
    yield made
    made.close()


@pytest.fixture
def store(backend: Backend) -> Any:
    return backend.make()


@pytest.fixture(params=BACKENDS)
def sync_backend(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Backend]:
    made = Backend(request.param, "sync", request=request, tmp_path=tmp_path, clock=clock)
    yield made
    made.close()


MakeStore = Callable[..., Any]

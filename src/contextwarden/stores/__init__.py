"""Session stores: one contract, four backends, selected by URL.

=============================================  ================================================
URL                                            backend
=============================================  ================================================
``memory://``                                  `MemoryStore` (process memory)
``sqlite:///cw.db``, ``sqlite:////abs.db``     `SqliteStore` (embedded default; WAL)
``redis://host:6379/0``, ``rediss://``         `RedisStore` (extra ``[redis]``)
``redis+cluster://h1:6379,h2:6379/``           `RedisStore` on a Redis Cluster (``rediss+cluster://``
                                               for TLS; every listed node is a seed)
``postgresql://user@host/db``                  `PostgresStore` (extra ``[postgres]``)
=============================================  ================================================

`open_store` returns a store that owns its connections (close it, or use it as a context
manager); `open_async_store` does the same for the async twins. Backend options go as keyword
arguments or, for string configuration, in the URL query: ``sqlite:///cw.db?busy_timeout=10``,
``redis://localhost:6379/0?prefix=cw&ttl=86400``, ``redis+cluster://10.0.0.5:6379/?prefix=cw``,
``postgresql://localhost/app?schema=cw``.
The Redis and Postgres modules import their drivers lazily; a missing driver raises an
`ImportError` that names the extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .._store_url import StoreUrl
from .base import (
    DEFAULT_LOCK_LEASE,
    DEFAULT_SLOT,
    FORMAT_VERSION,
    MAX_ID_LENGTH,
    AsyncSessionStore,
    BaseAsyncStore,
    BaseStore,
    SessionInfo,
    SessionStore,
    check_id,
)
from .memory import AsyncMemoryStore, MemoryStore
from .protocols import StateWrite
from .sqlite import AsyncSqliteStore, SqliteStore, connect_options as sqlite_connect_options, sqlite_path_from_url

if TYPE_CHECKING:
    from .postgres import AsyncPostgresStore, PostgresStore
    from .redis import AsyncRedisStore, RedisStore

__all__ = [
    "DEFAULT_LOCK_LEASE",
    "DEFAULT_SLOT",
    "FORMAT_VERSION",
    "MAX_ID_LENGTH",
    "AsyncMemoryStore",
    "AsyncPostgresStore",
    "AsyncRedisStore",
    "AsyncSessionStore",
    "AsyncSqliteStore",
    "BaseAsyncStore",
    "BaseStore",
    "MemoryStore",
    "PostgresStore",
    "RedisStore",
    "SessionInfo",
    "SessionStore",
    "SqliteStore",
    "StateWrite",
    "check_id",
    "open_async_store",
    "open_store",
]

_EXTRAS = {"redis": ("redis", ("redis",)), "postgres": ("postgres", ("psycopg", "psycopg_pool"))}
_LAZY_EXPORTS = {
    "RedisStore": "redis",
    "AsyncRedisStore": "redis",
    "PostgresStore": "postgres",
    "AsyncPostgresStore": "postgres",
}


def _backend(name: str) -> ModuleType:
    """Import the backend module ``name``, turning a missing driver into an install hint."""
    extra, drivers = _EXTRAS[name]
    try:
        return importlib.import_module(f".{name}", __name__)
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in drivers:
            raise
        raise ImportError(
            f"The {name} session store needs the {missing!r} package, which is not installed; "
            f"install it with `pip install 'contextwarden[{extra}]'`."
        ) from exc


def __getattr__(name: str) -> Any:
    module = _LAZY_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_backend(module), name)


def open_store(url: str, **options: Any) -> SessionStore:
    """Open the sync store a URL names; the caller closes it (or uses ``with``).

    Args:
        url: ``memory://``, ``sqlite:///path``, ``redis://...``, ``redis+cluster://...`` or ``postgresql://...``.
        **options: Keyword arguments of the backend's constructor (``clock``, ``lock_lease``, ``prefix``...).

    A ``redis+cluster://`` URL already talks to the cluster here: the client reads its slot map.

    Raises:
        ConfigError: an unknown scheme or option.
        ImportError: the backend's driver is not installed (the message names the extra).
        StoreUnavailable: no node of a ``redis+cluster://`` URL answers.
    """
    target = StoreUrl.parse(url, key="store_url")
    if target.backend == "memory":
        return MemoryStore(**options)
    if target.backend == "sqlite":
        path, query = sqlite_path_from_url(url)

        return SqliteStore.connect(path, **{**sqlite_connect_options(query), **options})
    if target.backend == "redis":
        target.check(check_path=False)  # an unknown option fails here, not at the first request
        store: SessionStore = _backend("redis").RedisStore.connect(url, **options)
        return store
    store = _backend("postgres").PostgresStore.connect(url, **options)
    return store


def open_async_store(url: str, **options: Any) -> AsyncSessionStore:
    """Open the async store a URL names; the caller awaits ``aclose()`` (or uses ``async with``).

    Connections open lazily on first use, so this function itself does no I/O.
    """
    target = StoreUrl.parse(url, key="store_url")
    if target.backend == "memory":
        return AsyncMemoryStore(**options)
    if target.backend == "sqlite":
        path, query = sqlite_path_from_url(url)

        return AsyncSqliteStore.connect(path, **{**sqlite_connect_options(query), **options})
    if target.backend == "redis":
        target.check(check_path=False)  # an unknown option fails here, not at the first request
        store: AsyncSessionStore = _backend("redis").AsyncRedisStore.connect(url, **options)
        return store
    store = _backend("postgres").AsyncPostgresStore.connect(url, **options)
    return store

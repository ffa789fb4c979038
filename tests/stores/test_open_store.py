"""Selecting a store by URL, lazy driver imports, and the Protocols every backend satisfies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import contextwarden.stores as stores
from contextwarden._store_url import StoreUrl
from contextwarden.exceptions import ConfigError
from contextwarden.stores import (
    AsyncMemoryStore,
    AsyncSessionStore,
    AsyncSqliteStore,
    MemoryStore,
    SessionStore,
    SqliteStore,
    open_async_store,
    open_store,
)


def test_memory_and_sqlite_urls(tmp_path: Path) -> None:
    with open_store("memory://") as store:
        assert isinstance(store, MemoryStore)
    with open_store(f"sqlite:///{tmp_path / 'cw.db'}") as store:
        assert isinstance(store, SqliteStore)
    assert isinstance(open_async_store("memory://"), AsyncMemoryStore)
    assert isinstance(open_async_store(f"sqlite:///{tmp_path / 'cw.db'}"), AsyncSqliteStore)


@pytest.mark.parametrize("url", ["mysql://localhost/db", "cw.db", "", "memory"])
def test_unknown_urls(url: str) -> None:
    with pytest.raises(ConfigError, match="store URL"):
        open_store(url)
    with pytest.raises(ConfigError, match="store URL"):
        open_async_store(url)


def test_every_backend_satisfies_the_protocols(sync_backend: object) -> None:
    store = sync_backend.make()  # type: ignore[attr-defined]
    assert isinstance(store, SessionStore)
    for cls in (stores.AsyncMemoryStore, stores.AsyncSqliteStore, stores.AsyncRedisStore, stores.AsyncPostgresStore):
        assert all(callable(getattr(cls, name, None)) for name in dir(AsyncSessionStore) if not name.startswith("_"))


def test_lazy_exports() -> None:
    assert stores.RedisStore.__module__ == "contextwarden.stores.redis"
    assert stores.AsyncPostgresStore.__module__ == "contextwarden.stores.postgres"
    with pytest.raises(AttributeError):
        _ = stores.NoSuchStore  # type: ignore[attr-defined]
    assert len(set(stores.__all__)) == len(stores.__all__)
    assert all(getattr(stores, name) is not None for name in stores.__all__)


@pytest.mark.parametrize(
    ("blocked", "url", "extra"),
    [
        ("redis", "redis://127.0.0.1:6379/0", "redis"),
        ("psycopg", "postgresql://127.0.0.1/test", "postgres"),
        ("psycopg_pool", "postgresql://127.0.0.1/test", "postgres"),
    ],
)
def test_a_missing_driver_names_the_extra(blocked: str, url: str, extra: str) -> None:
    # A fresh interpreter in which importing the driver fails, as if it were not installed.
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "from contextwarden.stores import open_store\n"
        f"open_store({url!r})\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError:")
    assert f"pip install 'contextwarden[{extra}]'" in last


@pytest.mark.parametrize(
    ("url", "backend", "cluster"),
    [
        ("memory://", "memory", False),
        ("sqlite:///cw.db?busy_timeout=5", "sqlite", False),
        ("redis://localhost:6379/0?prefix=cw", "redis", False),
        ("unix:///run/redis.sock", "redis", False),
        ("rediss+cluster://h1:7000,h2:7001/", "redis", True),
        ("postgres://user@host/db?schema=cw", "postgres", False),
    ],
)
def test_a_store_url_is_parsed_once_into_its_backend(url: str, backend: str, cluster: bool) -> None:
    parsed = StoreUrl.parse(url)
    assert (parsed.url, parsed.backend, parsed.cluster) == (url, backend, cluster)
    parsed.check(check_path=False)

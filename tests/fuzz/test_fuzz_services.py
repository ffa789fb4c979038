"""One short fuzz run on the server stores (Redis, Postgres): hostile `Session.add` input and tenants.

The memory and SQLite stores get the full runs; the server stores share their code above the
wire, so a few inputs per property check what differs (encoding, key and schema layout). Each
test uses its own Redis key prefix or Postgres schema and removes it afterwards. An unreachable
server skips the test, or fails it under ``CONTEXTWARDEN_REQUIRE_SERVICES=1`` (as in CI).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from _services import POSTGRES_URL, REDIS_URL, unavailable

from ._messages import fuzz_add
from ._tenants import fuzz_tenants


def _unreachable(what: str, exc: BaseException) -> None:
    unavailable(f"{what} is not reachable ({type(exc).__name__}: {exc}); start it to run this test.")


@pytest.fixture(params=["redis", "postgres"], scope="module")
def server_store(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "redis":
        import redis

        from contextwarden.stores.redis import RedisStore

        prefix = f"ckfuzz:{uuid.uuid4().hex[:10]}"
        try:
            redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
        except redis.RedisError as exc:
            _unreachable(f"Redis at {REDIS_URL}", exc)
        store = RedisStore.connect(REDIS_URL, prefix=prefix)
        try:
            yield store
        finally:
            store.close()
            client = redis.Redis.from_url(REDIS_URL)
            for key in client.scan_iter(match=f"*{prefix}*", count=1000):
                client.delete(key)
            client.close()
    else:
        import psycopg

        from contextwarden.stores.postgres import PostgresStore

        schema = f"ckfuzz_{uuid.uuid4().hex[:10]}"
        try:
            psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
        except psycopg.Error as exc:
            _unreachable(f"Postgres at {POSTGRES_URL}", exc)
        store = PostgresStore.connect(POSTGRES_URL, schema=schema)
        try:
            yield store
        finally:
            store.close()
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.services
@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_add_hostile_messages_on_a_server_store(server_store: Any, fmt: str) -> None:
    fuzz_add(server_store, fmt, 10)


@pytest.mark.services
def test_other_tenant_cannot_read_or_append_on_a_server_store(server_store: Any) -> None:
    fuzz_tenants(server_store, 15)

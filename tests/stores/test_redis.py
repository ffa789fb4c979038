"""What only the Redis store does: hash-tagged keys, TTL, server-side lock leases, corrupted keys."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import redis
import redis.asyncio
from redis.crc import key_slot

from contextwarden.exceptions import (
    ConfigError,
    SchemaError,
    SessionNotFound,
    StoreUnavailable,
    VersionConflict,
)
from contextwarden.messages import Message
from contextwarden.stores import AsyncRedisStore, RedisStore, open_async_store, open_store

from ._helpers import NASTY_IDS
from .conftest import PortalStore


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def store(redis_url: str, redis_prefix: str) -> Iterator[RedisStore]:
    with RedisStore.from_url(redis_url, prefix=redis_prefix) as store:
        yield store


def _fill(store: RedisStore, session_id: str) -> None:
    store.create_session(session_id)
    store.append_messages(session_id, [Message.user("x", message_id="a")])
    store.save_state(session_id, {"v": 1}, expected_version=0)
    store.put_snapshot(session_id, "snap", b"blob")
    store.append_audit(session_id, {"e": 1})
    with store.lock(session_id):
        pass


def test_every_key_of_a_session_lives_in_one_cluster_slot(
    store: RedisStore, client: redis.Redis, redis_prefix: str
) -> None:
    for session_id in NASTY_IDS:
        _fill(store, session_id)
        tag = "{" + redis_prefix + ":" + quote(session_id, safe="") + "}"
        keys = list(client.scan_iter(match=tag.replace("[", "\\[") + "*", count=1000))
        assert len(keys) >= 7
        assert {key_slot(key) for key in keys} == {key_slot(tag.encode())}
    # Nothing outside the namespace: session keys carry the tag, indexes the prefix.
    everything = list(client.scan_iter(match=f"*{redis_prefix}*", count=1000))
    assert all(
        key.startswith((b"{" + redis_prefix.encode() + b":", redis_prefix.encode() + b":")) for key in everything
    )


def test_ttl_pushes_expiry_on_every_write(redis_url: str, redis_prefix: str, client: redis.Redis) -> None:
    with RedisStore.from_url(f"{redis_url}?prefix={redis_prefix}&ttl=100") as store:
        _fill(store, "s")
        tag = "{" + redis_prefix + ":s}"
        for suffix in (":meta", ":ids", ":msgs", ":state", ":statever", ":snaps", ":snapmeta", ":audit"):
            assert 90_000 < client.pttl(tag + suffix) <= 100_000, suffix
    with RedisStore.from_url(redis_url, prefix=redis_prefix) as store:
        store.create_session("forever")
        assert client.pttl("{" + redis_prefix + ":forever}:meta") == -1


def test_sessions_removed_by_ttl_disappear_from_listing(redis_url: str, redis_prefix: str, client: redis.Redis) -> None:
    with RedisStore.from_url(redis_url, prefix=redis_prefix, ttl=0.2) as short:
        short.create_session("short-lived")
    with RedisStore.from_url(redis_url, prefix=redis_prefix) as store:
        store.create_session("kept")
        time.sleep(0.35)
        with pytest.raises(SessionNotFound):
            store.get_session("short-lived")
        assert [info.session_id for info in store.list_sessions()[0]] == ["kept"]
        # The listing removed the stale index entry.
        assert client.zrange(f"{redis_prefix}:sessions", 0, -1) == [b"kept"]


def test_a_client_that_decodes_responses_is_refused(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    with pytest.raises(ConfigError, match="decode_responses"):
        RedisStore(client)
    client.close()


@pytest.mark.parametrize("prefix", ["", "a{b", "x}"])
def test_prefixes_that_break_the_hash_tag_are_refused(redis_url: str, prefix: str) -> None:
    with pytest.raises(ConfigError, match="prefix"):
        RedisStore(redis.Redis.from_url(redis_url), prefix=prefix)


def test_a_given_client_stays_open(redis_url: str, redis_prefix: str) -> None:
    client = redis.Redis.from_url(redis_url)
    with RedisStore(client, prefix=redis_prefix) as store:
        store.create_session("s")
    assert client.exists("{" + redis_prefix + ":s}:meta") == 1
    client.close()


def test_corrupted_keys_name_the_session(store: RedisStore, client: redis.Redis, redis_prefix: str) -> None:
    store.create_session("victim")
    store.append_messages("victim", [Message.user(f"m{i}", message_id=f"m{i}") for i in range(3)])
    store.save_state("victim", {"ok": True}, expected_version=0)
    tag = "{" + redis_prefix + ":victim}"
    client.lset(tag + ":msgs", 1, b"\xff\xfe not json")
    with pytest.raises(SchemaError, match="position 1") as info:
        store.load_messages("victim")
    assert info.value.session_id == "victim"
    client.hset(tag + ":state", "view", "{broken")
    with pytest.raises(SchemaError, match="state 'view'"):
        store.load_state("victim")
    client.hdel(tag + ":meta", "tenant")
    with pytest.raises(SchemaError, match="metadata hash"):
        store.get_session("victim")


def test_a_session_in_a_newer_format_is_refused(store: RedisStore, client: redis.Redis, redis_prefix: str) -> None:
    store.create_session("s")
    client.hset("{" + redis_prefix + ":s}:meta", "format", 7)
    with pytest.raises(SchemaError, match="format 7") as info:
        store.append_messages("s", [Message.user("x")])
    assert info.value.session_id == "s"
    assert client.llen("{" + redis_prefix + ":s}:msgs") == 0


def test_a_namespace_from_a_newer_release_is_refused(redis_url: str, redis_prefix: str, client: redis.Redis) -> None:
    client.set(f"{redis_prefix}:schema", 5)
    with RedisStore.from_url(redis_url, prefix=redis_prefix) as store:
        with pytest.raises(SchemaError, match="schema version '5'") as info:
            store.create_session("s")
    assert "upgrade contextwarden" in str(info.value)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_prefixes_that_used_to_share_keys_stay_apart(
    redis_url: str, redis_prefix: str, client: redis.Redis, mode: str, portal: Any
) -> None:
    """``P`` and ``P:tenant`` once shared keys: P's index of tenant ``sessions`` was P:tenant's main index
    (so P's listing deleted P:tenant's entries) and P's index of tenant ``schema`` was P:tenant's schema key."""
    short, longer = redis_prefix, redis_prefix + ":tenant"

    def make(prefix: str) -> Any:
        if mode == "sync":
            return RedisStore.connect(redis_url, prefix=prefix)
        return PortalStore(portal, portal.call(functools.partial(AsyncRedisStore.connect, redis_url, prefix=prefix)))

    a, b = make(short), make(longer)
    try:
        b.create_session("b1")
        b.create_session("b2", tenant="sessions")
        a.create_session("a1", tenant="sessions")
        a.create_session("a2", tenant="schema")  # was a ZADD onto P:tenant's schema string (WRONGTYPE)
        assert [i.session_id for i in a.list_sessions(tenant="sessions")[0]] == ["a1"]
        assert [i.session_id for i in a.list_sessions(tenant="schema")[0]] == ["a2"]
        assert [i.session_id for i in b.list_sessions()[0]] == ["b1", "b2"]  # nothing of b's was deleted
        assert [i.session_id for i in b.list_sessions(tenant="sessions")[0]] == ["b2"]
        assert [i.session_id for i in a.list_sessions()[0]] == ["a1", "a2"]
        # a key scan of P does not take P:tenant's sessions for its own
        if mode == "sync":
            assert a.reindex() == 2
            assert [i.session_id for i in a.list_sessions()[0]] == ["a1", "a2"]
        a.delete_session("a1")
        assert [i.session_id for i in b.list_sessions(tenant="sessions")[0]] == ["b2"]
    finally:
        a.close()
        b.close()


def test_a_namespace_of_schema_1_gets_its_tenant_listings_copied(
    redis_url: str, redis_prefix: str, client: redis.Redis
) -> None:
    with RedisStore.from_url(redis_url, prefix=redis_prefix) as store:
        for session_id, tenant in (("s1", "acme"), ("s2", "acme"), ("s3", "beta/x")):
            store.create_session(session_id, tenant=tenant)
    # What schema version 1 left behind: the tenant listings under prefix:tenant:<tenant>.
    for tenant in ("acme", "beta/x"):
        encoded = quote(tenant, safe="")
        client.rename(f"{redis_prefix}:tenant={encoded}", f"{redis_prefix}:tenant:{encoded}")
    client.set(f"{redis_prefix}:schema", 1)
    with RedisStore.from_url(redis_url, prefix=redis_prefix) as store:
        assert [i.session_id for i in store.list_sessions(tenant="acme")[0]] == ["s1", "s2"]
        assert [i.session_id for i in store.list_sessions(tenant="beta/x")[0]] == ["s3"]
    assert client.get(f"{redis_prefix}:schema") == b"2"
    # the old keys stay: one of them could be another prefix's main index
    assert client.zcard(f"{redis_prefix}:tenant:acme") == 2


def test_a_retried_save_recognizes_its_own_write(store: RedisStore) -> None:
    """A save whose reply was lost and is sent again reports success, not a conflict with itself."""
    store.create_session("s")
    save = store._ops.save_state("s", "view", '{"v":1}', expected=0, now=1.0, token="writer-1")
    assert store._run(save, write=True) == (True, 1)
    again = store._ops.save_state("s", "view", '{"v":1}', expected=0, now=1.0, token="writer-1")
    assert store._run(again, write=True) == (True, 1)
    other = store._ops.save_state("s", "view", '{"v":2}', expected=0, now=1.0, token="writer-2")
    assert store._run(other, write=True) == (False, 1)


class _CountingRedis(redis.Redis):
    """A client that records the name of every command it sends (each one is a round trip)."""

    sent: list[str]

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append(str(args[0]))
        return super().execute_command(*args, **options)


def test_a_state_save_is_one_evalsha(redis_url: str, redis_prefix: str) -> None:
    client = _CountingRedis.from_url(redis_url)
    client.sent = []
    with RedisStore(client, prefix=redis_prefix) as store:
        store.create_session("s")
        store.save_state("s", {"v": 1}, expected_version=0)  # the script is cached from here on
        client.sent.clear()
        assert store.save_state("s", {"v": 2}, expected_version=1) == 2
        assert client.sent == ["EVALSHA"]
        client.sent.clear()
        with pytest.raises(VersionConflict):
            store.save_state("s", {"v": "stale"}, expected_version=1)
        assert client.sent == ["EVALSHA"]  # the conflict's version comes back with the refusal
        client.sent.clear()
        store.append_messages("s", [Message.user("x", message_id="a")])
        store.save_state("s", {"v": 3}, expected_version=2)
        assert client.sent == ["EVALSHA", "EVALSHA"]
    client.close()


def test_an_unreachable_server_is_store_unavailable() -> None:
    started = time.monotonic()
    with RedisStore.from_url("redis://127.0.0.1:1/0") as store:
        with pytest.raises(StoreUnavailable, match="127.0.0.1:1"):
            store.create_session("s")
    assert time.monotonic() - started < 5


def test_url_options(redis_url: str, redis_prefix: str, client: redis.Redis) -> None:
    with open_store(f"{redis_url}?prefix={redis_prefix}&ttl=50") as store:
        assert isinstance(store, RedisStore)
        store.create_session("s")
    assert 0 < client.pttl("{" + redis_prefix + ":s}:meta") <= 50_000


@pytest.mark.anyio
async def test_async_twin_from_url(redis_url: str, redis_prefix: str) -> None:
    async with AsyncRedisStore.from_url(redis_url, prefix=redis_prefix) as store:
        await store.create_session("s")
        assert await store.append_messages("s", [Message.user("x", message_id="a")]) == 1
    store = open_async_store(f"{redis_url}?prefix={redis_prefix}")
    assert isinstance(store, AsyncRedisStore)
    assert await store.count_messages("s") == 1
    await store.aclose()
    with pytest.raises(ConfigError):
        AsyncRedisStore(redis.asyncio.Redis.from_url(redis_url, decode_responses=True))

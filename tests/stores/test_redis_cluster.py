"""The Redis store on a real Redis Cluster: slots, spreading, listing across masters, lost scripts, node crashes.

The conformance suite runs on the cluster too (backend ``redis-cluster`` in conftest); this file
checks what only a cluster can show.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster

from contextwarden.exceptions import ConfigError, SessionNotFound, StoreError, StoreUnavailable
from contextwarden.messages import Message
from contextwarden.stores import AsyncRedisStore, RedisStore, open_async_store, open_store
from contextwarden.stores.redis_url import parse_url

from ._cluster import LocalCluster
from ._helpers import NASTY_IDS
from .conftest import FakeClock, cluster_client, drop_cluster_prefix, local_cluster

SESSIONS = [*NASTY_IDS, *(f"session-{i:02d}" for i in range(50))]


@pytest.fixture
def client(redis_cluster_url: str) -> Iterator[redis.cluster.RedisCluster]:
    client = cluster_client(redis_cluster_url)
    yield client
    client.close()


@pytest.fixture
def store(redis_cluster_url: str, redis_cluster_prefix: str, clock: FakeClock) -> Iterator[RedisStore]:
    with RedisStore.from_url(f"{redis_cluster_url}?prefix={redis_cluster_prefix}", clock=clock) as store:
        yield store


def _tag(prefix: str, session_id: str) -> str:
    return "{" + prefix + ":" + quote(session_id, safe="") + "}"


def _fill(store: RedisStore, session_id: str, *, tenant: str = "default") -> None:
    store.create_session(session_id, tenant=tenant)
    store.append_messages(session_id, [Message.user("x", message_id="a"), Message.user("y", message_id="b")])
    store.save_state(session_id, {"v": 1}, expected_version=0)
    store.put_snapshot(session_id, "snap", b"\x00blob")
    store.append_audit(session_id, {"e": 1})


def _keys_by_master(client: redis.cluster.RedisCluster, prefix: str) -> dict[bytes, str]:
    """Every key of the namespace, with the master that actually holds it (a SCAN on each master)."""
    found: dict[bytes, str] = {}
    for node in client.get_primaries():
        connection = client.get_redis_connection(node)
        for key in connection.scan_iter(match=f"*{prefix}*", count=1000):
            assert key not in found, f"{key!r} is on two masters"
            found[key] = node.name
    return found


def test_a_sessions_keys_share_one_slot_and_sessions_spread_over_every_master(
    store: RedisStore, client: redis.cluster.RedisCluster, redis_cluster_prefix: str
) -> None:
    for session_id in SESSIONS:
        _fill(store, session_id)
        with store.lock(session_id):
            # The lock key exists only while held: check it shares the slot too.
            lock_key = _tag(redis_cluster_prefix, session_id) + ":lock"
            assert client.exists(lock_key) == 1
            assert client.cluster_keyslot(lock_key) == client.cluster_keyslot(_tag(redis_cluster_prefix, session_id))
    located = _keys_by_master(client, redis_cluster_prefix)
    masters_used: set[str] = set()
    for session_id in SESSIONS:
        tag = _tag(redis_cluster_prefix, session_id).encode()
        keys = [key for key in located if key.startswith(tag + b":")]
        assert len(keys) == 8, (session_id, keys)  # meta ids msgs state statever snaps snapmeta audit
        # The server's own hash (CLUSTER KEYSLOT), not the client's: one slot per session.
        slots = {client.cluster_keyslot(key) for key in keys}
        assert slots == {client.cluster_keyslot(tag)}, session_id
        homes = {located[key] for key in keys}
        assert len(homes) == 1, (session_id, homes)
        masters_used |= homes
    # 60 sessions over 3 masters: all three hold some (odds of one empty master: about 1e-10).
    assert masters_used == {node.name for node in client.get_primaries()}
    # Besides session keys, only the namespace's indexes and schema marker (outside any session slot).
    others = sorted(key for key in located if not key.startswith(b"{"))
    assert others == sorted(
        f"{redis_cluster_prefix}:{name}".encode() for name in ("schema", "sessions", "tenant=default")
    )


def test_listing_and_expiry_span_every_master(
    store: RedisStore, client: redis.cluster.RedisCluster, redis_cluster_prefix: str, clock: FakeClock
) -> None:
    tenants = ("acme", "globex", "initech")
    for index, session_id in enumerate(SESSIONS):
        _fill(store, session_id, tenant=tenants[index % 3])
    seen: list[str] = []
    cursor = None
    while True:
        page, cursor = store.list_sessions(limit=7, cursor=cursor)
        seen.extend(info.session_id for info in page)
        if cursor is None:
            break
    assert seen == sorted(SESSIONS)
    for index, tenant in enumerate(tenants):
        listed, _ = store.list_sessions(tenant=tenant, limit=1000)
        assert [info.session_id for info in listed] == sorted(SESSIONS[index::3])
        assert all(info.tenant == tenant and info.message_count == 2 for info in listed)
    clock.advance(100)
    kept = SESSIONS[::2]
    for session_id in kept:
        store.touch(session_id)
    clock.advance(50)
    expired = store.expire_idle(120)
    assert expired == sorted(SESSIONS[1::2])
    assert [info.session_id for info in store.list_sessions(limit=1000)[0]] == sorted(kept)
    located = _keys_by_master(client, redis_cluster_prefix)
    for session_id in expired:
        tag = _tag(redis_cluster_prefix, session_id).encode()
        assert not [key for key in located if key.startswith(tag)], session_id
    # The expired sessions were spread over several masters (so expiry really crossed nodes).
    assert len({client.get_node_from_key(_tag(redis_cluster_prefix, sid)).name for sid in expired}) > 1


def test_a_master_that_lost_its_scripts_gets_them_again_without_repeating_work(
    store: RedisStore, client: redis.cluster.RedisCluster, clock: FakeClock
) -> None:
    """A pipeline over several masters where one answers NOSCRIPT: only its commands are resent.

    Resending the whole pipeline would run the expiry script twice on the other masters, and the
    sessions they had just removed would then be missing from the result.
    """
    for session_id in SESSIONS:
        _fill(store, session_id)
    clock.advance(1000)
    one_master = client.get_primaries()[0]
    client.get_redis_connection(one_master).script_flush()
    assert store.expire_idle(10) == sorted(SESSIONS)
    assert store.list_sessions(include_archived=True) == ([], None)


def test_cluster_urls(redis_cluster_url: str, redis_cluster_prefix: str) -> None:
    with open_store(f"{redis_cluster_url}?prefix={redis_cluster_prefix}&ttl=50") as store:
        assert isinstance(store, RedisStore)
        assert isinstance(store._client, redis.cluster.RedisCluster)
        store.create_session("s")
        assert store.get_session("s") is not None
    target = parse_url("rediss+cluster://user:pw@h1:7000,[::1]:7001,h3/?prefix=p&ttl=5&ssl_cert_reqs=none")
    assert target.cluster
    assert target.url == "rediss://user:pw@h1:7000/0?ssl_cert_reqs=none"
    assert target.seeds == (("::1", 7001), ("h3", 6379))
    assert target.options == {"prefix": "p", "ttl": 5.0}
    assert target.where == "cluster h1:7000,[::1]:7001,h3:6379"
    for bad in ("redis+cluster://h1:7000/2", "redis+cluster://h1:x/", "redis+cluster://h1:7000,:7001/"):
        with pytest.raises(ConfigError, match="store_url|database|host:port"):
            open_store(bad)


@pytest.mark.anyio
async def test_async_twin_on_the_cluster(redis_cluster_url: str, redis_cluster_prefix: str) -> None:
    store = open_async_store(f"{redis_cluster_url}?prefix={redis_cluster_prefix}")
    assert isinstance(store, AsyncRedisStore)
    assert isinstance(store._client, redis.asyncio.cluster.RedisCluster)
    try:
        for session_id in SESSIONS[:20]:
            await store.create_session(session_id, tenant="t")
            await store.append_messages(session_id, [Message.user("x", message_id="a")])
        listed, _ = await store.list_sessions(tenant="t", limit=100)
        assert [info.session_id for info in listed] == sorted(SESSIONS[:20])
        client = cluster_client(redis_cluster_url)
        try:
            client.get_redis_connection(client.get_primaries()[1]).script_flush()
        finally:
            client.close()
        assert await store.expire_idle(0) == sorted(SESSIONS[:20])
    finally:
        await store.aclose()


def test_a_decoding_cluster_client_is_refused(redis_cluster_url: str) -> None:
    client = cluster_client(redis_cluster_url, decode_responses=True)
    try:
        with pytest.raises(ConfigError, match="decode_responses"):
            RedisStore(client)
    finally:
        client.close()


def test_a_cluster_url_on_a_standalone_server_says_so(redis_url: str) -> None:
    standalone = redis_url.replace("redis://", "redis+cluster://", 1).rsplit("/", 1)[0] + "/"
    with pytest.raises(StoreError, match="not a cluster node"):
        RedisStore.connect(standalone)


def test_an_unreachable_cluster_is_store_unavailable() -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="cluster 127.0.0.1:1"):
        RedisStore.connect("redis+cluster://127.0.0.1:1/")
    assert time.monotonic() - started < 10


@pytest.mark.anyio
async def test_an_unreachable_cluster_is_store_unavailable_async() -> None:
    async with AsyncRedisStore.from_url("redis+cluster://127.0.0.1:1/") as store:
        with pytest.raises(StoreUnavailable, match="127.0.0.1:1"):
            await store.create_session("s")


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A cluster of this test's own, for crashing one of its masters."""
    with local_cluster(tmp_path) as cluster:
        yield cluster


def test_a_crashed_master_is_store_unavailable_and_the_rest_stays_intact(own_cluster: LocalCluster) -> None:
    prefix = "crash"
    with RedisStore.from_url(own_cluster.url, prefix=prefix) as store:
        for session_id in SESSIONS:
            _fill(store, session_id)
        client = cluster_client(own_cluster.url)
        # The victim holds the session index, and some sessions but not all.
        victim = client.get_node_from_key(f"{prefix}:sessions")
        on_victim = {sid for sid in SESSIONS if client.get_node_from_key(_tag(prefix, sid)).name == victim.name}
        client.close()
        assert 0 < len(on_victim) < len(SESSIONS)
        survivors = sorted(set(SESSIONS) - on_victim)
        own_cluster.kill_node(victim.port)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="cluster"):
            store.append_messages(sorted(on_victim)[0], [Message.user("lost?", message_id="c")])
        assert time.monotonic() - started < 30
        # The node comes back empty (no persistence): its sessions are gone, cleanly; the others are whole.
        own_cluster.start_node(victim.port)
        own_cluster.wait_ok()
        deadline = time.monotonic() + 30
        while True:
            try:
                store.count_messages(survivors[0])
                break
            except StoreUnavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        for session_id in SESSIONS:
            if session_id in on_victim:
                with pytest.raises(SessionNotFound):
                    store.load_messages(session_id)
            else:
                assert [m.message_id for m in store.load_messages(session_id)] == ["a", "b"]
                assert store.load_state(session_id) == ({"v": 1}, 1)
        # The index went down with the victim: the survivors are unlisted until reindex() rebuilds it.
        assert store.list_sessions(limit=1000) == ([], None)
        assert store.reindex() == len(survivors)
        listed, _ = store.list_sessions(limit=1000)
        assert [info.session_id for info in listed] == survivors
        assert [info.session_id for info in store.list_sessions(tenant="default", limit=1000)[0]] == survivors
        assert store.expire_idle(0) == survivors
    drop_cluster_prefix(own_cluster.url, prefix)

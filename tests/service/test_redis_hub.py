"""The Redis event hub on a real Redis: events are numbered and kept in order, survive a script flush, and
reach a replica only for the sessions its clients watch."""

from __future__ import annotations

import asyncio

import pytest
import redis

from contextwarden.service.events import open_hub

pytestmark = pytest.mark.services


async def _collect(queue: asyncio.Queue[tuple[int, dict[str, object]]], count: int) -> list[int]:
    got: list[int] = []
    while len(got) < count:
        _, record = await asyncio.wait_for(queue.get(), timeout=5)
        got.append(int(str(record["i"])))
    return got


def test_a_burst_of_events_arrives_in_order_and_a_flushed_script_is_loaded_again(redis_store_url: str) -> None:
    async def scenario() -> None:
        hub = open_hub(redis_store_url, history=100)
        await hub.start()
        try:
            queue = hub.listen("t", "s")
            await hub.ready("t", "s")
            for i in range(250):  # more than one pipeline's worth
                hub.publish("t", "s", {"kind": "test", "i": i})
            assert await _collect(queue, 250) == list(range(250))
            client = redis.Redis.from_url(redis_store_url.split("?")[0])
            try:
                client.script_flush()
            finally:
                client.close()
            hub.publish("t", "s", {"kind": "test", "i": 250})
            assert await _collect(queue, 1) == [250]
            kept = await hub.since("t", "s", 0)
            assert [number for number, _ in kept] == list(range(152, 252))  # the last 100, numbered from 1
        finally:
            await hub.stop()

    asyncio.run(scenario())


def _subscribers(url: str, hub: object, tenant: str, session_id: str) -> int:
    channel = hub._session_channel(tenant, session_id)  # type: ignore[attr-defined]
    client = redis.Redis.from_url(url.split("?")[0])
    try:
        return int(dict(client.pubsub_numsub(channel))[channel.encode()])
    finally:
        client.close()


def test_a_replica_subscribes_only_to_the_sessions_its_clients_watch(redis_store_url: str) -> None:
    async def scenario() -> None:
        serving, watching = open_hub(redis_store_url, history=10), open_hub(redis_store_url, history=10)
        await serving.start()
        await watching.start()
        try:
            assert _subscribers(redis_store_url, watching, "t", "s") == 0  # nobody watches: nothing read back
            queue = watching.listen("t", "s")
            await watching.ready("t", "s")
            assert _subscribers(redis_store_url, watching, "t", "s") == 1
            assert _subscribers(redis_store_url, watching, "t", "other") == 0
            serving.publish("t", "other", {"kind": "test", "i": -1})
            serving.publish("t", "s", {"kind": "test", "i": 0})
            assert await _collect(queue, 1) == [0]  # another replica's event of the watched session only
            watching.unlisten("t", "s", queue)
            for _ in range(100):
                if _subscribers(redis_store_url, watching, "t", "s") == 0:
                    break
                await asyncio.sleep(0.02)
            assert _subscribers(redis_store_url, watching, "t", "s") == 0
        finally:
            await watching.stop()
            await serving.stop()

    asyncio.run(scenario())


def test_watching_again_right_after_leaving_is_ready_only_once_subscribed_again(redis_store_url: str) -> None:
    async def scenario() -> None:
        hub = open_hub(redis_store_url, history=10)
        await hub.start()
        try:
            first = hub.listen("t", "s")
            hub.unlisten("t", "s", first)  # subscribe and unsubscribe are still on their way
            queue = hub.listen("t", "s")
            await hub.ready("t", "s")
            assert _subscribers(redis_store_url, hub, "t", "s") == 1
            hub.publish("t", "s", {"kind": "test", "i": 7})
            assert await _collect(queue, 1) == [7]
        finally:
            await hub.stop()

    asyncio.run(scenario())


def test_watching_again_right_after_the_last_client_left_is_ready_at_once(redis_store_url: str) -> None:
    async def scenario() -> None:
        hub = open_hub(redis_store_url, history=10)
        await hub.start()
        try:
            first = hub.listen("t", "s")
            await hub.ready("t", "s")
            hub.unlisten("t", "s", first)
            queue = hub.listen("t", "s")  # before the unsubscribe went out: the subscription stays
            await asyncio.wait_for(hub.ready("t", "s"), timeout=1)
            hub.publish("t", "s", {"kind": "test", "i": 3})
            assert await _collect(queue, 1) == [3]
        finally:
            await hub.stop()

    asyncio.run(scenario())

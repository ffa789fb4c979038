"""The Redis event hub on a real Redis: events are numbered and kept in order, and survive a script flush."""

from __future__ import annotations

import asyncio

import pytest
import redis

from contextkeeper.service.events import open_hub

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

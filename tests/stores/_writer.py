"""Writer processes for the fault tests (started from a forkserver, so they start in milliseconds)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio

from contextwarden.exceptions import VersionConflict
from contextwarden.messages import Message
from contextwarden.stores import open_async_store, open_store


def batch(worker: int, number: int) -> list[Message]:
    """Batch ``number`` of ``worker``: 1 to 5 messages whose ids say which batch and how big it is."""
    size = 1 + (worker + number) % 5
    return [
        Message.user(
            f"{worker}/{number}/{k} " + "payload " * (20 + 40 * k), message_id=f"w{worker}:b{number}:{k}:{size}"
        )
        for k in range(size)
    ]


def append_until_killed(url: str, options: dict[str, Any], session_id: str, worker: int, ack_path: str) -> None:
    """Append batches forever; after each acknowledged append, record it in ``ack_path``."""
    store = open_store(url, **options)
    fd = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    number = 0
    while True:
        store.append_messages(session_id, batch(worker, number))
        # One write() of a short line is atomic, so the parent sees whole lines only.
        os.write(fd, f"{worker} {number}\n".encode())
        number += 1


def round_of(worker: int, number: int) -> list[Message]:
    """Round ``number`` of ``worker`` (deterministic, so another worker can re-append it)."""
    return [
        Message.user(f"task {worker}.{number}", message_id=f"w{worker}-r{number}-u"),
        Message.assistant(f"done {worker}.{number}", message_id=f"w{worker}-r{number}-a"),
    ]


def append_and_compact(
    url: str, options: dict[str, Any], session_id: str, worker: int, other: int, rounds: int, barrier: Any, results: Any
) -> None:
    """Append rounds (re-appending the other worker's previous round too) and CAS the state after each.

    Both workers load the state between two barrier waits, so each round both hold the same
    version and exactly one save wins; the loser must reload and retry.
    """
    store = open_store(url, **options)
    conflicts = 0
    for number in range(rounds):
        messages = round_of(worker, number)
        if number:
            messages += round_of(other, number - 1)
        store.append_messages(session_id, messages)
        barrier.wait(30)
        state, version = store.load_state(session_id)
        barrier.wait(30)
        while True:
            done = list((state or {}).get("compactions", []))
            try:
                store.save_state(session_id, {"compactions": [*done, f"{worker}:{number}"]}, expected_version=version)
                break
            except VersionConflict:
                conflicts += 1
                state, version = store.load_state(session_id)
    store.close()
    results.put((worker, conflicts))


def hold_lock_until_killed(url: str, options: dict[str, Any], session_id: str, mode: str, ready_path: str) -> None:
    """Take the session's lock (through the sync or the async store), say so in ``ready_path``, then hang."""
    if mode == "sync":
        store = open_store(url, **options)
        with store.lock(session_id, timeout=10):
            Path(ready_path).write_text("locked")
            time.sleep(3600)
        return

    async def hold() -> None:
        store = open_async_store(url, **options)
        async with store.lock(session_id, timeout=10):
            Path(ready_path).write_text("locked")
            await anyio.sleep(3600)

    anyio.run(hold)

"""Faults: writers killed mid-append, lock holders killed, concurrent writers and compactors, a Redis
server that dies."""

from __future__ import annotations

import multiprocessing
import random
import shutil
import signal
import socket
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis

from compaction._helpers import Recorder
from contextwarden import toolpairs
from contextwarden.exceptions import LockTimeout, SessionLost, SessionNotFound, StoreUnavailable
from contextwarden.messages import Message
from contextwarden.session import AsyncSession, Session
from contextwarden.stores import DEFAULT_LOCK_LEASE, open_store
from contextwarden.stores.redis import AsyncRedisStore, RedisStore

from . import _writer
from ._helpers import MAX_ROUNDS, OPTIONS, make_round, opening, shape
from .conftest import service_missing

KILLS = 50
ROUNDS = 40


def _context() -> ForkServerContext:
    # Children fork from a server that has already imported the store code: ~10 ms per writer
    # instead of ~300 ms for a fresh interpreter, which keeps 100 kills well under a minute.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([_writer.__name__])
    return context


def _location(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    if name == "sqlite":
        return f"sqlite:///{tmp_path / 'cw.db'}", {}
    if name == "redis":
        return request.getfixturevalue("redis_url"), {"prefix": request.getfixturevalue("redis_prefix")}
    if name == "redis-cluster":
        return request.getfixturevalue("redis_cluster_url"), {"prefix": request.getfixturevalue("redis_cluster_prefix")}
    return request.getfixturevalue("postgres_url"), {"schema": request.getfixturevalue("pg_schema")}


def _acks(path: Path) -> list[tuple[int, int]]:
    text = path.read_text()
    # A line cut by the kill has no newline: that append was not acknowledged.
    complete = text[: text.rfind("\n") + 1]
    return [(int(w), int(n)) for w, n in (line.split() for line in complete.splitlines())]


def _settle(store: Any, session_id: str) -> None:
    """Wait until the killed writers' last appends have landed or gone.

    A Postgres server finishes a statement (and its commit) that a killed client had already sent:
    that batch lands after the kill, whole or not at all. The count holding still for half a second
    says no such commit is left in flight.
    """
    deadline = time.monotonic() + 30
    count = store.count_messages(session_id)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = store.count_messages(session_id)
        if now == count:
            return
        count = now
    raise AssertionError(f"the message count still moves 30 s after the last writer was killed ({count})")


@pytest.mark.parametrize("name", ["sqlite", "postgres"])
def test_writers_killed_mid_append_leave_no_partial_batch(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url, options = _location(name, request, tmp_path)
    with open_store(url, **options) as store:
        store.create_session("s")
    context = _context()
    rng = random.Random(20240601)
    acknowledged: set[tuple[int, int]] = set()
    for worker in range(KILLS):
        ack_path = tmp_path / f"ack-{worker}"
        ack_path.touch()
        process = context.Process(
            target=_writer.append_until_killed, args=(url, options, "s", worker, str(ack_path)), daemon=True
        )
        process.start()
        wanted = rng.randint(1, 8)
        deadline = time.monotonic() + 30
        while len(_acks(ack_path)) < wanted:
            assert process.is_alive(), f"writer {worker} died by itself (exit code {process.exitcode})"
            assert time.monotonic() < deadline, f"writer {worker} acknowledged nothing in 30 s"
            time.sleep(0.0005)
        # Land the kill at a random point of the following appends.
        time.sleep(rng.random() * 0.004)
        process.kill()
        process.join(10)
        assert process.exitcode == -signal.SIGKILL
        acknowledged.update(_acks(ack_path))

    with open_store(url, **options) as store:
        _settle(store, "s")
        messages = store.load_messages("s")  # decodes every row: a torn row would raise SchemaError
        assert len(messages) == store.count_messages("s")
    ids = [m.message_id for m in messages]
    assert len(ids) == len(set(ids))
    stored: Counter[tuple[int, int]] = Counter()
    sizes: dict[tuple[int, int], int] = {}
    for message in messages:
        worker, number, part, size = (
            int(field[1:]) if field[0] in "wb" else int(field) for field in message.message_id.split(":")
        )
        assert message.text.startswith(f"{worker}/{number}/{part} ")
        stored[(worker, number)] += 1
        sizes[(worker, number)] = size
    assert all(stored[key] == sizes[key] for key in stored), "a batch was stored in part"
    assert acknowledged <= set(stored), "an acknowledged batch is missing"
    by_worker: dict[int, list[int]] = defaultdict(list)
    for worker, number in stored:
        by_worker[worker].append(number)
    # Each writer's batches are a gap-free prefix: nothing after a lost batch was kept.
    assert all(sorted(numbers) == list(range(len(numbers))) for numbers in by_worker.values())
    assert len(by_worker) == KILLS


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("name", ["sqlite", "redis", "redis-cluster", "postgres"])
def test_a_killed_lock_holder_frees_the_lock_within_5_seconds(
    name: str, mode: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A compactor SIGKILLed while it holds the session lock delays the next compaction by at most one lease.

    The holder's heartbeat stops with it, so its short lease runs out (SQLite, Redis); Postgres
    drops the advisory lock with the dead holder's connection.
    """
    url, options = _location(name, request, tmp_path)
    with open_store(url, **options) as store:
        store.create_session("s")
    ready = tmp_path / "locked"
    process = _context().Process(
        target=_writer.hold_lock_until_killed, args=(url, options, "s", mode, str(ready)), daemon=True
    )
    process.start()
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert process.is_alive(), f"the holder died by itself (exit code {process.exitcode})"
        assert time.monotonic() < deadline, "the holder did not take the lock in 30 s"
        time.sleep(0.01)
    with open_store(url, **options) as store:
        with pytest.raises(LockTimeout, match=f"pid {process.pid}|Postgres backend pid"):
            with store.lock("s", timeout=0.3):
                pass
        process.kill()
        process.join(10)
        assert process.exitcode == -signal.SIGKILL
        started = time.monotonic()
        with store.lock("s", timeout=10):
            waited = time.monotonic() - started
    assert waited < 5.0, f"the next compaction waited {waited:.1f} s for a dead holder's lock"
    assert waited < DEFAULT_LOCK_LEASE + 0.5


@pytest.mark.parametrize("name", ["sqlite", "redis", "redis-cluster", "postgres"])
def test_two_processes_append_and_compact_concurrently(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url, options = _location(name, request, tmp_path)
    with open_store(url, **options) as store:
        store.create_session("s")
    context = _context()
    barrier = context.Barrier(2)
    results = context.Queue()
    processes = [
        context.Process(
            target=_writer.append_and_compact,
            args=(url, options, "s", worker, 1 - worker, ROUNDS, barrier, results),
            daemon=True,
        )
        for worker in (0, 1)
    ]
    for process in processes:
        process.start()
    conflicts = dict(results.get(timeout=60) for _ in processes)
    for process in processes:
        process.join(10)
        assert process.exitcode == 0

    with open_store(url, **options) as store:
        messages = store.load_messages("s")
        state, version = store.load_state("s")
    expected = {m.message_id for w in (0, 1) for n in range(ROUNDS) for m in _writer.round_of(w, n)}
    ids = [m.message_id for m in messages]
    assert len(ids) == len(set(ids)), "a message was stored twice"
    assert set(ids) == expected, "a message was lost"
    for worker in (0, 1):
        own = [int(i.split("-")[1][1:]) for i in ids if i.startswith(f"w{worker}-") and i.endswith("-u")]
        assert own == list(range(ROUNDS)), "a worker's rounds are out of order"
    assert state is not None
    done = state["compactions"]
    assert sorted(done) == sorted(f"{w}:{n}" for w in (0, 1) for n in range(ROUNDS)), "a compaction was lost"
    assert version == 2 * ROUNDS
    # Each round both workers saved from the same version: one lost, reloaded and retried.
    assert sum(conflicts.values()) == ROUNDS


# --- Redis dies mid-session -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _RedisServer:
    """A private redis-server (AOF, fsync always) that the test may kill and restart."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.directory = directory
        self.port = _free_port()
        self.args = [
            binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--dir", str(directory),
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        try:
            while True:
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    if time.monotonic() > deadline or self.process.poll() is not None:
                        raise
                    time.sleep(0.02)
        finally:
            client.close()

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def wipe(self) -> None:
        """Lose every key, as a server restarted without persistence does (call it while stopped)."""
        assert self.process is None or self.process.poll() is not None, "stop the server first"
        shutil.rmtree(self.directory / "appendonlydir", ignore_errors=True)
        (self.directory / "dump.rdb").unlink(missing_ok=True)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[_RedisServer]:
    binary = shutil.which("redis-server")
    if binary is None:
        service_missing(
            "A private redis-server",
            "PATH",
            FileNotFoundError("redis-server is not on PATH"),
            problem="cannot be started here: install redis-server (Debian: apt-get install redis-server)",
        )
    server = _RedisServer(binary, tmp_path)
    try:
        server.start()
    except redis.ConnectionError as exc:
        service_missing("a private redis-server", "PATH", exc)
    yield server
    if server.process is not None and server.process.poll() is None:
        server.kill()


def test_redis_dying_mid_session_raises_store_unavailable_and_keeps_state(redis_server: _RedisServer) -> None:
    with RedisStore.from_url(redis_server.url) as store:
        store.create_session("s")
        first = [Message.user(f"m{i}", message_id=f"m{i}") for i in range(20)]
        store.append_messages("s", first)
        store.save_state("s", {"summary": "before"}, expected_version=0)
        store.put_snapshot("s", "snap", b"\x00blob")

        redis_server.kill()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="unreachable") as info:
            store.append_messages("s", [Message.user("lost?", message_id="during")])
        assert "retry" in str(info.value)
        with pytest.raises(StoreUnavailable):
            store.load_state("s")
        assert time.monotonic() - started < 10

        redis_server.start()
        # The restarted server has an empty script cache: the store reloads its scripts itself.
        assert store.load_messages("s") == first
        assert store.load_state("s") == ({"summary": "before"}, 1)
        assert store.get_snapshot("s", "snap") == b"\x00blob"
        assert store.append_messages("s", [Message.user("after", message_id="after")]) == 1
        assert store.save_state("s", {"summary": "after"}, expected_version=1) == 2
        assert [m.message_id for m in store.load_messages("s")][-1] == "after"
        assert store.count_messages("s") == 21


# --- a live Session whose Redis fails -------------------------------------------------------------


def _until_compaction_is_due(s: Session) -> None:
    """Add rounds (preparing after each) until the next prepare would compact."""
    s.add(opening())
    for i in range(MAX_ROUNDS):
        s.add(make_round("d", i))
        if s.engine.needs_compaction():
            return
        s.prepare()
    pytest.fail("no compaction fell due")


def _alerts(rec: Recorder) -> list[str]:
    return [event.alert for event in rec.of("alert") if event.alert.startswith("store-")]


def test_a_compaction_due_while_redis_is_down_runs_in_memory_and_is_saved_when_it_is_back(
    redis_server: _RedisServer,
) -> None:
    with RedisStore.from_url(redis_server.url) as store:
        s = Session("s", store=store, **OPTIONS)
        rec = Recorder()
        s.subscribe(rec)
        _until_compaction_is_due(s)
        redis_server.kill()

        pv = s.prepare(format="internal")
        assert pv.status.layer is not None, "the due compaction ran"
        assert pv.status.used <= s.budget.effective and toolpairs.validate(pv.view) == []
        assert pv.status.degraded == s.status().degraded == "store-unavailable"
        assert _alerts(rec) == ["store-unavailable"]
        with pytest.raises(StoreUnavailable):  # write-through: an add is acknowledged only once stored
            s.add(make_round("d", 99))
        again = s.prepare(format="internal")  # still down: the view stays in memory, no second alert
        assert again.status.degraded == "store-unavailable" and _alerts(rec) == ["store-unavailable"]

        redis_server.start()
        saved = s.prepare(format="internal")
        assert saved.status.degraded is None and s.status().degraded is None
        assert _alerts(rec) == ["store-unavailable", "store-recovered"]
        state, version = store.load_state("s")
        assert state is not None and version == 1
        stored_snapshots = set(store.list_snapshots("s"))
        assert {m.snapshot_id for m in saved.view if m.snapshot_id} <= stored_snapshots
        assert "store-unavailable" in [e.get("alert") for e in store.read_audit("s")]  # the audit waited too
    with RedisStore.from_url(redis_server.url) as other:
        resumed = Session("s", store=other, **OPTIONS).prepare(format="internal")
        assert shape(resumed.view) == shape(saved.view)


def test_a_session_whose_redis_restarted_empty_says_so_and_is_restored(redis_server: _RedisServer) -> None:
    with RedisStore.from_url(redis_server.url) as store:
        s = Session("s", store=store, tenant="acme", **OPTIONS)
        rec = Recorder()
        s.subscribe(rec)
        _until_compaction_is_due(s)
        before = s.prepare(format="internal")
        redis_server.kill()
        redis_server.wipe()
        redis_server.start()

        with pytest.raises(SessionLost) as info:
            s.add(make_round("g", 0))
        text = str(info.value)
        assert isinstance(info.value, SessionNotFound) and info.value.session_id == "s"
        assert "'s' is gone from its store" in text and "restore_to_store()" in text
        assert f"({len(s.transcript)} messages)" in text
        assert s.status().degraded == "store-lost" and _alerts(rec) == ["store-lost"]
        with pytest.raises(SessionLost):  # no message goes to a store that lacks the ones before it
            s.add(make_round("g", 0))
        assert s.prepare(format="internal").view == before.view  # the view lives on in memory

        s.restore_to_store()
        assert s.status().degraded is None and _alerts(rec) == ["store-lost", "store-recovered"]
        assert store.load_messages("s", tenant="acme") == s.transcript
        assert store.get_session("s").tenant == "acme"
        assert store.load_state("s")[1] == 1
        assert s.add(make_round("g", 0)) == 2
        view = s.prepare(format="internal")
    with RedisStore.from_url(redis_server.url) as other:
        t = Session("s", store=other, tenant="acme", **OPTIONS)
        assert t.transcript == s.transcript
        assert shape(t.prepare(format="internal").view) == shape(view.view)


def test_an_async_session_rides_out_a_redis_outage_and_a_restart_that_lost_it(redis_server: _RedisServer) -> None:
    async def scenario() -> None:
        store = AsyncRedisStore.connect(redis_server.url)
        try:
            s = await AsyncSession.open("s", store=store, **OPTIONS)
            rec = Recorder()
            s.subscribe(rec)
            s.add(opening())
            for i in range(MAX_ROUNDS):
                s.add(make_round("a", i))
                if s.engine.needs_compaction():
                    break
                await s.prepare()
            redis_server.kill()
            pv = await s.prepare(format="internal")  # the adds wait in memory, the compaction runs there
            assert pv.status.layer is not None and pv.status.degraded == "store-unavailable"
            assert pv.status.used <= s.budget.effective and toolpairs.validate(pv.view) == []
            s.add(make_round("a", 100))  # buffered: written by a later prepare
            await s.prepare()
            redis_server.start()
            saved = await s.prepare(format="internal")
            assert saved.status.degraded is None
            assert await store.load_messages("s") == s.transcript
            assert (await store.load_state("s"))[1] == 1
            assert _alerts(rec) == ["store-unavailable", "store-recovered"]

            redis_server.kill()
            redis_server.wipe()
            redis_server.start()
            s.add(make_round("a", 101))
            lost = await s.prepare(format="internal")  # the view still fits, in memory
            assert lost.status.degraded == "store-lost" and lost.status.used <= s.budget.effective
            with pytest.raises(SessionLost, match="restore_to_store"):
                await s.flush()
            await s.restore_to_store()
            assert s.status().degraded is None
            assert await store.load_messages("s") == s.transcript
            assert _alerts(rec) == ["store-unavailable", "store-recovered", "store-lost", "store-recovered"]
            other = await AsyncSession.open("s", store=store, **OPTIONS)
            assert shape((await other.prepare(format="internal")).view) == shape(
                (await s.prepare(format="internal")).view
            )
        finally:
            await store.aclose()

    anyio.run(scenario)

"""What only the SQLite store does: the file, its pragmas, migrations, corruption, the lock table."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import anyio
import pytest

from contextwarden.exceptions import ConfigError, SchemaError, StoreError, StoreUnavailable
from contextwarden.messages import Message
from contextwarden.stores import AsyncSqliteStore, SqliteStore, open_async_store, open_store
from contextwarden.stores.sqlite import sqlite_path_from_url


def test_wal_busy_timeout_and_migrations_table(tmp_path: Path) -> None:
    path = tmp_path / "cw.db"
    with SqliteStore.connect(path, busy_timeout=2.5) as store:
        store.create_session("s")
        assert store._conn.execute("PRAGMA busy_timeout").fetchone() == (2500,)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert [row[0] for row in raw.execute("SELECT version FROM cw_migrations")] == [1]
    tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"cw_sessions", "cw_messages", "cw_state", "cw_snapshots", "cw_audit", "cw_locks"} <= tables
    raw.close()


def test_sessions_survive_reopening(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cw.db'}"
    messages = [Message.user(f"m{i}") for i in range(5)]
    with open_store(url) as store:
        store.create_session("s")
        store.append_messages("s", messages)
        store.save_state("s", {"x": 1}, expected_version=0)
    with open_store(url) as store:
        assert store.load_messages("s") == messages
        assert store.load_state("s") == ({"x": 1}, 1)


def test_a_given_connection_stays_open(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "cw.db", check_same_thread=False)
    with SqliteStore(conn) as store:
        store.create_session("s")
    assert conn.execute("SELECT count(*) FROM cw_sessions").fetchone() == (1,)
    conn.close()


def test_a_closed_store_refuses_work(tmp_path: Path) -> None:
    store = SqliteStore.connect(tmp_path / "cw.db")
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.create_session("s")


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    path = tmp_path / "cw.db"
    with SqliteStore.connect(path) as store:
        store.create_session("victim/1")
        store.append_messages("victim/1", [Message.user(f"m{i}", message_id=f"m{i}") for i in range(3)])
        store.save_state("victim/1", {"ok": True}, expected_version=0)
    return path


def _corrupt(path: Path, sql: str) -> None:
    raw = sqlite3.connect(path)
    raw.execute(sql)
    raw.commit()
    raw.close()


def test_a_corrupted_message_row_names_the_session_and_the_fix(filled: Path) -> None:
    _corrupt(filled, 'UPDATE cw_messages SET body = \'{"role": "user", "parts": [\' WHERE seq = 1')
    with SqliteStore.connect(filled) as store, pytest.raises(SchemaError) as info:
        store.load_messages("victim/1")
    assert info.value.session_id == "victim/1"
    assert "position 1" in str(info.value) and "import_session" in str(info.value)


def test_a_message_of_unknown_shape_is_a_schema_error(filled: Path) -> None:
    _corrupt(filled, 'UPDATE cw_messages SET body = \'{"role": "robot", "parts": []}\' WHERE seq = 2')
    with SqliteStore.connect(filled) as store:
        assert len(store.load_messages("victim/1", limit=2)) == 2
        with pytest.raises(SchemaError, match="position 2"):
            store.get_message("victim/1", "m2")


def test_invalid_utf8_in_a_row_is_a_schema_error(filled: Path) -> None:
    _corrupt(filled, "UPDATE cw_messages SET body = CAST(X'FFFE7B7D' AS TEXT) WHERE seq = 0")
    with SqliteStore.connect(filled) as store, pytest.raises(SchemaError, match="position 0") as info:
        store.load_messages("victim/1")
    assert info.value.session_id == "victim/1"


def test_corrupted_state_and_metadata(filled: Path) -> None:
    _corrupt(filled, "UPDATE cw_state SET body = 'nope'")
    _corrupt(filled, "UPDATE cw_sessions SET metadata = '[1]'")
    with SqliteStore.connect(filled) as store:
        with pytest.raises(SchemaError, match="state 'view' is corrupted"):
            store.load_state("victim/1")
        with pytest.raises(SchemaError, match="metadata"):
            store.get_session("victim/1")


def test_a_session_in_a_newer_format_is_refused(filled: Path) -> None:
    _corrupt(filled, "UPDATE cw_sessions SET format = 9")
    with SqliteStore.connect(filled) as store:
        for call in (
            lambda: store.get_session("victim/1"),
            lambda: store.load_messages("victim/1"),
            lambda: store.append_messages("victim/1", [Message.user("x")]),
        ):
            with pytest.raises(SchemaError, match="format 9") as info:
                call()
            assert info.value.session_id == "victim/1"
            assert "upgrade contextwarden" in str(info.value)
        assert store._conn.execute("SELECT count(*) FROM cw_messages").fetchone() == (3,)


def test_a_database_from_a_newer_release_is_refused(filled: Path) -> None:
    _corrupt(filled, "INSERT INTO cw_migrations (version, applied_at) VALUES (42, 0)")
    with SqliteStore.connect(filled) as store, pytest.raises(SchemaError, match="schema version 42") as info:
        store.count_messages("victim/1")
    assert str(filled) in str(info.value)
    assert "upgrade contextwarden" in str(info.value)


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite at all" * 100)
    with SqliteStore.connect(path) as store, pytest.raises(SchemaError, match="corrupted"):
        store.create_session("s")


def test_a_writer_stuck_behind_another_process_gets_store_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "cw.db"
    with SqliteStore.connect(path) as store:
        store.create_session("s")
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with SqliteStore.connect(path, busy_timeout=0.1) as store:
            with pytest.raises(StoreUnavailable, match="busy_timeout"):
                store.append_messages("s", [Message.user("x")])
            assert store.count_messages("s") == 0  # readers are not blocked (WAL)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_threads_share_one_store(tmp_path: Path) -> None:
    with SqliteStore.connect(tmp_path / "cw.db") as store:
        store.create_session("s")

        def work(worker: int) -> None:
            for number in range(20):
                store.append_messages("s", [Message.user("x", message_id=f"{worker}-{number}")])

        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert store.count_messages("s") == 80


@pytest.mark.parametrize(
    ("url", "path", "options"),
    [
        ("sqlite:///cw.db", "cw.db", {}),
        ("sqlite:////var/lib/cw.db", "/var/lib/cw.db", {}),
        ("sqlite:///:memory:", ":memory:", {}),
        ("sqlite:///data/cw.db?busy_timeout=10", "data/cw.db", {"busy_timeout": "10"}),
    ],
)
def test_sqlite_urls(url: str, path: str, options: dict[str, str]) -> None:
    assert sqlite_path_from_url(url) == (path, options)


@pytest.mark.parametrize("url", ["sqlite://cw.db", "sqlite:///", "sqlite:///cw.db?journal=off"])
def test_bad_sqlite_urls(url: str) -> None:
    with pytest.raises(ConfigError):
        open_store(url).close()


def test_in_memory_sqlite_url_works() -> None:
    with open_store("sqlite:///:memory:") as store:
        store.create_session("s")
        assert store.get_session("s").session_id == "s"


@pytest.mark.anyio
async def test_async_store_from_url(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cw.db'}?busy_timeout=1"
    async with AsyncSqliteStore.from_url(url) as store:
        await store.create_session("s")
        assert await store.append_messages("s", [Message.user("hi", message_id="a")]) == 1
        async with store.lock("s", timeout=1):
            with anyio.move_on_after(0.05):
                await anyio.sleep(1)
    store = open_async_store(url)
    assert isinstance(store, AsyncSqliteStore)
    assert [m.message_id for m in await store.load_messages("s")] == ["a"]
    await store.aclose()


@pytest.mark.anyio
async def test_an_async_write_behind_another_process_waits_without_holding_the_event_loop(tmp_path: Path) -> None:
    path = tmp_path / "cw.db"
    async with AsyncSqliteStore.from_url(f"sqlite:///{path}") as store:
        await store.create_session("s")
        assert await store.append_messages("s", [Message.user("first", message_id="a")]) == 1
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        ticks = 0
        written = anyio.Event()

        async def write() -> None:
            await store.append_messages("s", [Message.user("second", message_id="b")])
            written.set()

        async def tick() -> None:
            nonlocal ticks
            while not written.is_set():
                ticks += 1
                await anyio.sleep(0.01)

        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(write)
                tasks.start_soon(tick)
                await anyio.sleep(0.3)
                assert not written.is_set() and ticks >= 10  # the write waits; the loop runs on
                blocker.execute("ROLLBACK")
        finally:
            blocker.close()
        assert [m.message_id for m in await store.load_messages("s")] == ["a", "b"]


@pytest.mark.anyio
@pytest.mark.parametrize("inline", [True, False])
async def test_async_calls_from_many_tasks_interleave_safely(tmp_path: Path, inline: bool) -> None:
    async with AsyncSqliteStore.connect(tmp_path / "cw.db", inline=inline) as store:
        await store.create_session("s")

        async def work(worker: int) -> None:
            for number in range(20):
                await store.append_messages("s", [Message.user("x", message_id=f"{worker}-{number}")])
                await store.count_messages("s")

        async with anyio.create_task_group() as tasks:
            for worker in range(4):
                tasks.start_soon(work, worker)
        assert await store.count_messages("s") == 80


@pytest.mark.anyio
async def test_inline_writes_leave_the_lock_wait_off_and_every_other_call_waits_again(tmp_path: Path) -> None:
    # the pragma is sent only when the wait changes: not around every inline write
    async with AsyncSqliteStore.connect(tmp_path / "cw.db", busy_timeout=2.5) as store:
        await store.create_session("s")
        conn = store._sync._conn
        for number in range(3):
            await store.append_messages("s", [Message.user("x", message_id=f"m{number}")])
            assert conn.execute("PRAGMA busy_timeout").fetchone() == (0,)
        assert await store.count_messages("s") == 3  # a read runs as `_run` does: waiting again
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (2500,)

"""What only the Postgres store does: schemas, migrations, advisory locks, racing duplicate appends."""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from contextwarden.exceptions import ConfigError, LockTimeout, SchemaError, StoreUnavailable, VersionConflict
from contextwarden.messages import Message
from contextwarden.stores import AsyncPostgresStore, PostgresStore, open_async_store, open_store


@pytest.fixture
def store(postgres_url: str, pg_schema: str) -> Iterator[PostgresStore]:
    with PostgresStore.from_url(postgres_url, schema=pg_schema) as store:
        yield store


def _sql(url: str, statement: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement)
        return cursor.fetchall() if cursor.description else []


def test_tables_and_migrations_live_in_the_schema(store: PostgresStore, postgres_url: str, pg_schema: str) -> None:
    store.create_session("s")
    tables = _sql(postgres_url, f"SELECT tablename FROM pg_tables WHERE schemaname = '{pg_schema}' ORDER BY 1")
    assert [t[0] for t in tables] == [
        "cw_audit",
        "cw_locks",
        "cw_messages",
        "cw_migrations",
        "cw_sessions",
        "cw_snapshots",
        "cw_state",
    ]
    assert _sql(postgres_url, f'SELECT version FROM "{pg_schema}".cw_migrations') == [(1,)]
    store.setup()  # idempotent
    assert _sql(postgres_url, f'SELECT count(*) FROM "{pg_schema}".cw_migrations') == [(1,)]


def test_schemas_isolate_stores(postgres_url: str, pg_schema: str) -> None:
    other = pg_schema + "_b"
    try:
        with (
            PostgresStore.from_url(postgres_url, schema=pg_schema) as a,
            PostgresStore.from_url(f"{postgres_url}?schema={other}") as b,
        ):
            a.create_session("s")
            assert b.list_sessions() == ([], None)
    finally:
        _sql(postgres_url, f'DROP SCHEMA IF EXISTS "{other}" CASCADE')


def test_owned_connections_use_generic_plans_and_the_commit_setting(postgres_url: str, pg_schema: str) -> None:
    with PostgresStore.from_url(
        f"{postgres_url}?schema={pg_schema}&application_name=cw-test", synchronous_commit=False
    ) as store:
        store.create_session("s")
        with store._pool.connection() as conn:
            assert conn.execute("SHOW plan_cache_mode").fetchone() == ("force_generic_plan",)
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
            assert conn.execute("SHOW application_name").fetchone() == ("cw-test",)


def test_synchronous_commit_in_the_url(postgres_url: str, pg_schema: str) -> None:
    with (
        PostgresStore.from_url(f"{postgres_url}?schema={pg_schema}&synchronous_commit=off") as fast,
        open_store(f"{postgres_url}?synchronous_commit=on&schema={pg_schema}", synchronous_commit=False) as durable,
        PostgresStore.from_url(postgres_url, schema=pg_schema) as default,
    ):
        server = _sql(postgres_url, "SHOW synchronous_commit")[0]
        for store, expected in ((fast, ("off",)), (durable, ("on",)), (default, server)):
            assert isinstance(store, PostgresStore)
            store.create_session("s")
            with store._pool.connection() as conn:
                assert conn.execute("SHOW synchronous_commit").fetchone() == expected
    with pytest.raises(ConfigError, match="synchronous_commit"):
        PostgresStore.connect(f"{postgres_url}?synchronous_commit=maybe")


def _prepared(conn: psycopg.Connection[tuple[object, ...]]) -> list[str]:
    rows = conn.execute("SELECT statement FROM pg_prepared_statements ORDER BY prepare_time").fetchall()
    return [str(row[0]) for row in rows]


def test_state_saves_and_appends_are_one_prepared_statement_each(postgres_url: str, pg_schema: str) -> None:
    """The hot writes are prepared at their first use and cost one round trip: no BEGIN, no COMMIT."""
    with PostgresStore.from_url(postgres_url, schema=pg_schema, max_size=1) as store:
        store.create_session("s")
        with store._pool.connection() as conn:
            before = _prepared(conn)
        store.save_state("s", {"v": 1}, expected_version=0)
        store.save_state("s", {"v": 2}, expected_version=1)
        store.append_messages("s", [Message.user("x", message_id="a")])
        with store._pool.connection() as conn:
            added = _prepared(conn)[len(before) :]
        assert len(added) == 3, added  # the first save (an insert), the next ones (an update), the append
        assert any("INSERT INTO" in text and "cw_state" in text for text in added)
        assert any("UPDATE" in text and "cw_state" in text for text in added)
        # A save is one exchange; a stale save adds one read of the current version.
        assert _round_trips(store, lambda: store.save_state("s", {"v": 3}, expected_version=2)) == 1
        assert _round_trips(store, lambda: _stale_save(store)) == 2
        assert _round_trips(store, lambda: store.append_messages("s", [Message.user("y", message_id="b")])) == 1


def test_a_pool_that_turned_preparing_off_keeps_it_off(postgres_url: str, pg_schema: str) -> None:
    pool: ConnectionPool[psycopg.Connection[tuple[object, ...]]] = ConnectionPool(
        postgres_url, min_size=1, max_size=1, kwargs={"prepare_threshold": None, "autocommit": True}, open=True
    )
    with PostgresStore(pool, schema=pg_schema) as store:
        store.create_session("s")
        for version in range(10):
            store.save_state("s", {"v": version}, expected_version=version)
        with pool.connection() as conn:
            assert _prepared(conn) == []
    pool.close()


def _prepared(conn: psycopg.Connection[tuple[object, ...]]) -> list[str]:
    rows = conn.execute("SELECT statement FROM pg_prepared_statements ORDER BY prepare_time").fetchall()
    return [str(row[0]) for row in rows]


def _stale_save(store: PostgresStore) -> None:
    with pytest.raises(VersionConflict) as info:
        store.save_state("s", {"stale": True}, expected_version=1)
    assert (info.value.expected, info.value.actual) == (1, 3)


def _round_trips(store: PostgresStore, action: Callable[[], object]) -> int:
    """Round trips ``action`` makes on the store's only pooled connection, from libpq's protocol trace.

    Each exchange of the extended protocol ends with one Sync from the client; a simple query
    (BEGIN, COMMIT) is one Query message.
    """
    with tempfile.TemporaryFile("w+") as trace:
        with store._pool.connection() as conn:
            conn.pgconn.trace(trace.fileno())
        try:
            action()
        finally:
            with store._pool.connection() as again:
                assert again is conn
                again.pgconn.untrace()
        trace.seek(0)
        sent = [line.split("\t") for line in trace.read().splitlines()]
    return sum(1 for fields in sent if len(fields) > 3 and fields[1] == "F" and fields[3] in ("Sync", "Query"))


def test_a_given_pool_stays_open(postgres_url: str, pg_schema: str) -> None:
    pool: ConnectionPool[psycopg.Connection[tuple[object, ...]]] = ConnectionPool(
        postgres_url, min_size=1, max_size=2, open=True
    )
    with PostgresStore(pool, schema=pg_schema) as store:  # connections not in autocommit: still works
        store.create_session("s")
        store.append_messages("s", [Message.user("x", message_id="a")])
        assert store.count_messages("s") == 1
    with pool.connection() as conn:
        assert conn.execute(f'SELECT count(*) FROM "{pg_schema}".cw_messages').fetchone() == (1,)
    pool.close()


def test_advisory_lock_spans_processes_and_dies_with_its_connection(postgres_url: str, pg_schema: str) -> None:
    holder = PostgresStore.connect(postgres_url, schema=pg_schema)
    other = PostgresStore.connect(postgres_url, schema=pg_schema)
    holder.create_session("s")
    held = holder.lock("s")
    held.__enter__()
    with pytest.raises(LockTimeout):
        with other.lock("s", timeout=0.1):
            pass
    # The holder "dies": its connection goes away, and Postgres releases the lock with it.
    _sql(
        postgres_url,
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted "
        f"AND objid = {holder._lock_key('s') & 0xFFFFFFFF}",
    )
    with other.lock("s", timeout=5):
        pass
    held.__exit__(None, None, None)  # releasing on the dead connection is harmless
    holder.close()
    other.close()


def test_racing_duplicate_appends_store_each_message_once(postgres_url: str, pg_schema: str) -> None:
    stores = [PostgresStore.connect(postgres_url, schema=pg_schema) for _ in range(4)]
    stores[0].create_session("s")
    batches = [[Message.user(f"{b}.{k}", message_id=f"b{b}-{k}") for k in range(3)] for b in range(30)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(stores))

    def work(store: PostgresStore) -> None:
        barrier.wait()
        try:
            for batch in batches:
                store.append_messages("s", batch)
        except BaseException as exc:  # pragma: no cover - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    loaded = stores[0].load_messages("s")
    assert [m.message_id for m in loaded] == [m.message_id for batch in batches for m in batch]
    rows = _sql(postgres_url, f'SELECT min(seq), max(seq), count(*) FROM "{pg_schema}".cw_messages')
    assert rows == [(0, 89, 90)]
    for store in stores:
        store.close()


def test_corrupted_rows_and_newer_formats(store: PostgresStore, postgres_url: str, pg_schema: str) -> None:
    store.create_session("victim")
    store.append_messages("victim", [Message.user(f"m{i}", message_id=f"m{i}") for i in range(3)])
    _sql(postgres_url, f"""UPDATE "{pg_schema}".cw_messages SET body = '{{"role": 1}}' WHERE seq = 2""")
    with pytest.raises(SchemaError, match="position 2") as info:
        store.load_messages("victim")
    assert info.value.session_id == "victim"
    _sql(postgres_url, f'UPDATE "{pg_schema}".cw_sessions SET format = 3')
    with pytest.raises(SchemaError, match="format 3"):
        store.append_messages("victim", [Message.user("x", message_id="new")])
    assert _sql(postgres_url, f'SELECT count(*) FROM "{pg_schema}".cw_messages') == [(3,)]


def test_a_database_from_a_newer_release_is_refused(store: PostgresStore, postgres_url: str, pg_schema: str) -> None:
    store.create_session("s")
    _sql(postgres_url, f'INSERT INTO "{pg_schema}".cw_migrations (version, applied_at) VALUES (9, 0)')
    with PostgresStore.from_url(postgres_url, schema=pg_schema) as fresh:
        with pytest.raises(SchemaError, match="schema version 9") as info:
            fresh.get_session("s")
    assert "upgrade contextwarden" in str(info.value)


def test_dropped_tables_point_at_setup(store: PostgresStore, postgres_url: str, pg_schema: str) -> None:
    store.create_session("s")
    _sql(postgres_url, f'DROP TABLE "{pg_schema}".cw_messages')
    with pytest.raises(SchemaError, match="setup"):
        store.append_messages("s", [Message.user("x")])


def test_an_unreachable_server_is_store_unavailable() -> None:
    started = time.monotonic()
    with PostgresStore.from_url("postgresql://postgres@127.0.0.1:1/test", timeout=0.5) as store:
        with pytest.raises(StoreUnavailable, match="127.0.0.1:1"):
            store.create_session("s")
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("schema", ["", "has space", 'q"uote', "1digit", "x" * 64])
def test_unsafe_schema_names_are_refused(postgres_url: str, schema: str) -> None:
    with pytest.raises(ConfigError, match="schema"):
        PostgresStore.connect(postgres_url, schema=schema)


def test_open_store_resolves_postgres_urls(postgres_url: str, pg_schema: str) -> None:
    with open_store(f"{postgres_url}?schema={pg_schema}") as store:
        assert isinstance(store, PostgresStore)
        store.create_session("s")
    with open_store(f"{postgres_url.replace('postgresql://', 'postgres://')}?schema={pg_schema}") as store:
        assert store.get_session("s").session_id == "s"


@pytest.mark.anyio
async def test_async_twin(postgres_url: str, pg_schema: str) -> None:
    async with AsyncPostgresStore.from_url(postgres_url, schema=pg_schema) as store:
        await store.create_session("s")
        assert await store.append_messages("s", [Message.user("x", message_id="a")]) == 1
        async with store.lock("s", timeout=1):
            other = open_async_store(f"{postgres_url}?schema={pg_schema}")
            with pytest.raises(LockTimeout):
                async with other.lock("s", timeout=0.1):
                    pass
            await other.aclose()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_server_fails_fast_naming_the_url_without_its_password() -> None:
    port = _closed_port()
    url = f"postgresql://cw:hunter2@127.0.0.1:{port}/test"
    started = time.monotonic()
    with PostgresStore.from_url(url, timeout=60) as store:  # the pool's own wait is not what ends it
        with pytest.raises(StoreUnavailable) as raised:
            store.create_session("s")
    assert time.monotonic() - started < 30
    message = str(raised.value)
    assert f"postgresql://cw@127.0.0.1:{port}/test" in message and "hunter2" not in message
    assert "connect_timeout" in message and "Start the server" in message


@pytest.mark.anyio
async def test_an_unreachable_server_fails_fast_in_the_async_twin() -> None:
    port = _closed_port()
    started = time.monotonic()
    async with AsyncPostgresStore.from_url(f"postgresql://cw:hunter2@127.0.0.1:{port}/test", timeout=60) as store:
        with pytest.raises(StoreUnavailable, match=f"cw@127.0.0.1:{port}/test") as raised:
            await store.create_session("s")
    assert time.monotonic() - started < 30 and "hunter2" not in str(raised.value)


def test_a_server_that_does_not_answer_fails_after_the_connect_timeout() -> None:
    with socket.socket() as listener:  # accepts the TCP connection, never speaks Postgres
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        started = time.monotonic()
        url = f"postgresql://cw@127.0.0.1:{port}/test?connect_timeout=2"
        with PostgresStore.from_url(url, timeout=60) as store:
            with pytest.raises(StoreUnavailable, match=r"connect timeout 2 s"):
                store.create_session("s")
        assert time.monotonic() - started < 30  # not the pool's wait


def test_a_reachable_server_is_used_after_its_first_connection(postgres_url: str, pg_schema: str) -> None:
    with PostgresStore.from_url(postgres_url, schema=pg_schema, connect_timeout=2) as store:
        store.create_session("s")
        store.append_messages("s", [Message.user("x")])
        assert store.count_messages("s") == 1

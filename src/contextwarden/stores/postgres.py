"""Postgres session store (psycopg 3 + psycopg_pool; extra ``[postgres]``).

Tables live in one schema (``public`` unless told otherwise) with the ``cw_`` prefix and are
created and migrated by the store itself (a ``cw_migrations`` version table, guarded by an
advisory lock so replicas starting together migrate once). Each operation is one transaction on
a pooled connection; concurrent writers to one session queue on the session's row lock, and
state is saved with a version compare-and-set (``UPDATE ... WHERE version = expected``).

The hot writes are single statements run without BEGIN/COMMIT and prepared on the server at
their first use: a state save or an append is one round trip (a stale save adds one more, to
read the version it lost against). What remains of a save's latency is mostly the commit's WAL
flush; ``?synchronous_commit=off`` in the URL stops waiting for it (see `PostgresStore.connect`
for what that trades).

The session lock is a session-level advisory lock held on a dedicated pooled connection: if the
holder's process dies, Postgres drops the connection and the lock with it.

A store that owns its pool opens one connection of its own before its first operation, with a
short connect timeout (``connect_timeout``, 5 s unless the URL or the call says otherwise): a
server that refuses the connection or does not answer is a `StoreUnavailable` naming the URL (without
its password) at once, instead of after the pool's wait for a connection.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from typing import Any, Self
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import anyio
import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from ..exceptions import ConfigError, LockTimeout, SchemaError, StoreError, StoreUnavailable
from ..messages import Message
from ._sql import MIGRATIONS, Dialect, Sql, SqlOps
from .base import BaseAsyncStore, BaseStore
from .locks import DEFAULT_LOCK_LEASE, lock_timeout
from .ops import Op, T, aresume, resume
from .protocols import StateWrite
from .values import check_id

__all__ = ["AsyncPostgresStore", "PostgresStore"]

_SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def _check_schema(schema: str) -> str:
    if not isinstance(schema, str) or not _SCHEMA_RE.match(schema):
        raise ConfigError(
            f"Postgres `schema` {schema!r} must be a plain identifier (letters, digits, underscores; at most 63 "
            "characters, not starting with a digit).",
            key="schema",
        )
    return schema


_SWITCH = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}


def split_url(url: str) -> tuple[str, dict[str, Any]]:
    """Remove our own options (schema, synchronous_commit) from a Postgres URL's query; libpq gets the rest."""
    parts = urlsplit(url)
    ours: dict[str, Any] = {}
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "schema":
            ours["schema"] = value
        elif key == "synchronous_commit":
            if value.lower() not in _SWITCH:
                raise ConfigError(
                    f"Postgres URL option `synchronous_commit={value}` must be `on` or `off` (leave it out to keep "
                    "the server's setting).",
                    key="synchronous_commit",
                )
            ours["synchronous_commit"] = _SWITCH[value.lower()]
        else:
            rest.append((key, value))
    return urlunsplit(parts._replace(query=urlencode(rest, quote_via=quote))), ours


def _describe(conninfo: object) -> str:
    if not isinstance(conninfo, str):
        return "Postgres"
    try:
        info = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "Postgres"
    return f"Postgres {info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '?')}"


def _connection_options(conninfo: str, synchronous_commit: bool | None) -> dict[str, Any]:
    """Connection settings of an owned pool.

    Generic plans: the store's statements are keyed lookups whose best plan never depends on the
    parameter values, and re-planning the append statement each time (the default for the first
    executions and whenever custom plans look cheaper) costs more than executing it.
    """
    settings = ["-c plan_cache_mode=force_generic_plan"]
    if synchronous_commit is not None:
        settings.append(f"-c synchronous_commit={'on' if synchronous_commit else 'off'}")
    existing = psycopg.conninfo.conninfo_to_dict(conninfo).get("options")
    # Options in the URL stay; ours follow them.
    options = " ".join([*([str(existing)] if existing else []), *settings])
    return {"autocommit": True, "options": options}


def shown_url(url: str) -> str:
    """``url`` without its password (a keyword conninfo string is shown as host, port and database)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return _describe(url)
    if parts.scheme not in ("postgresql", "postgres"):
        return _describe(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    netloc = f"{user}@{hostport}" if at and user else hostport
    return urlunsplit(parts._replace(netloc=netloc))


class _FirstConnect:
    """The connection an owned pool's store opens before its first operation, to fail fast."""

    def __init__(self, url: str, conninfo: str, connect_timeout: float) -> None:
        self.shown = shown_url(url)
        self.conninfo = conninfo
        given = psycopg.conninfo.conninfo_to_dict(conninfo).get("connect_timeout")
        # libpq's convention: whole seconds, at least 2 (psycopg follows it)
        self.seconds = psycopg.conninfo.timeout_from_conninfo(
            {"connect_timeout": given if given is not None else max(1, round(connect_timeout))}
        )

    def unreachable(self, exc: psycopg.Error) -> StoreUnavailable:
        reason = " ".join(str(exc).split())
        return StoreUnavailable(
            f"Postgres at {self.shown} cannot be reached (connect timeout {self.seconds} s): {reason}. Start the "
            "server or correct the URL (host, port, user, database); `connect_timeout` in the URL query sets how "
            "many seconds the first connection may take."
        )


def _connection_lost(exc: psycopg.OperationalError) -> bool:
    """Whether the error means the server went away (vs. a statement-level failure)."""
    state = exc.sqlstate
    # No SQLSTATE: libpq could not talk to the server. 08: connection exception. 57P: shutdown.
    return state is None or state.startswith(("08", "57P"))


def _lock_key(schema: str, session_id: str) -> int:
    digest = hashlib.blake2b(f"cw-lock\x00{schema}\x00{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


# pg_locks shows a bigint advisory key as two oids (high and low 32 bits) with objsubid 1.
_LOCK_HOLDER = """
    SELECT a.pid, host(a.client_addr), a.application_name, extract(epoch FROM a.backend_start)
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.classid = %s AND l.objid = %s
    LIMIT 1"""


def _lock_holder_params(key: int) -> tuple[int, int]:
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


def _holder_text(row: Sequence[Any] | None) -> tuple[str | None, float | None]:
    """Who holds an advisory lock, from `_LOCK_HOLDER` (the backend and where it connects from)."""
    if row is None:
        return None, None
    pid, client, application, started = row
    holder = f"Postgres backend pid {pid}"
    where = ", ".join(part for part in (f"client {client}" if client else "", application or "") if part)
    if where:
        holder += f" ({where})"
    return holder, None if started is None else float(started)


def _advisory_timeout(session_id: str, timeout: float, row: Sequence[Any] | None) -> LockTimeout:
    holder, connected = _holder_text(row)
    if holder is not None and connected is not None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(connected))
        holder += f", connected since {stamp}"
    return lock_timeout(
        session_id,
        timeout,
        holder=holder,
        since=None,
        expires_in=None,
        released=holder is None,
    )


_DUPLICATE_RETRIES = 3


class _DuplicateRace(StoreError):
    """Two writers appended the same message id at once; the loser retries and then skips it."""


def _prepare(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any], command: Sql) -> bool | None:
    """Whether to prepare the statement now: True for a hot one, None to leave it to psycopg.

    psycopg by itself prepares a statement once it ran a few times on a connection. Connections
    that turned preparing off (``prepare_threshold=None``, as behind a transaction-pooling
    PgBouncer) keep it off.
    """
    if command.prepare and cursor.connection.prepare_threshold is not None:
        return True
    return None


def _execute(cursor: psycopg.Cursor[Any], command: Sql) -> list[tuple[Any, ...]]:
    if command.many:
        cursor.executemany(command.text, command.params)
        return []
    cursor.execute(command.text, command.params, prepare=_prepare(cursor, command))
    return cursor.fetchall() if cursor.description is not None else []


async def _aexecute(cursor: psycopg.AsyncCursor[Any], command: Sql) -> list[tuple[Any, ...]]:
    if command.many:
        await cursor.executemany(command.text, command.params)
        return []
    await cursor.execute(command.text, command.params, prepare=_prepare(cursor, command))
    return await cursor.fetchall() if cursor.description is not None else []


class _PostgresCommon:
    _where: str
    _schema: str
    _first: _FirstConnect | None = None
    """Set on a store that owns its pool until a first connection of its own succeeded."""

    def _translate(self, exc: Exception) -> StoreError:
        if isinstance(exc, psycopg.errors.UniqueViolation):
            return _DuplicateRace(f"{self._where}: concurrent append of the same message id ({exc}); retry.")
        if isinstance(exc, PoolTimeout) or (isinstance(exc, psycopg.OperationalError) and _connection_lost(exc)):
            return StoreUnavailable(
                f"{self._where} is unreachable ({type(exc).__name__}: {exc}); the operation was not confirmed. "
                "Check the server and retry; appends are idempotent by message id."
            )
        if isinstance(exc, psycopg.errors.UndefinedTable):
            return SchemaError(
                f"{self._where}: contextwarden tables are missing from schema {self._schema!r} ({exc}); call "
                "`store.setup()` to create them."
            )
        return StoreError(f"{self._where} failed: {type(exc).__name__}: {exc}")

    def _lock_key(self, session_id: str) -> int:
        return _lock_key(self._schema, session_id)


class PostgresStore(_PostgresCommon, BaseStore):
    """`SessionStore` on Postgres.

    Args:
        pool: A ``psycopg_pool.ConnectionPool`` of at least 2 connections (a held session lock occupies
            one); the store does not close it. Autocommit connections save a round trip per append;
            others work too, every operation then runs in an explicit transaction.
        schema: Schema holding the ``cw_*`` tables (created if missing).
        clock: Source of timestamps (tests inject a fake one).
        lock_lease: Unused by Postgres (an advisory lock ends with its holder's connection, so a dead
            holder's lock is gone as soon as Postgres sees the connection close); accepted for symmetry.
    """

    def __init__(
        self,
        pool: ConnectionPool[Any],
        *,
        schema: str = "public",
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
    ) -> None:
        super().__init__(clock=clock, lock_lease=lock_lease)
        self._pool = pool
        self._schema = _check_schema(schema)
        self._where = _describe(pool.conninfo)
        self._ops: SqlOps = SqlOps(Dialect.postgres(self._schema), schema=self._schema, where=self._where)
        self._owns = False
        self._ready = False

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        schema: str = "public",
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 10.0,
        connect_timeout: float = 5.0,
        synchronous_commit: bool | None = None,
    ) -> Self:
        """A store owning a new pool for ``url`` (``?schema=`` and ``?synchronous_commit=`` in the query are ours).

        Args:
            url: ``postgresql://user@host:port/dbname``; ``?synchronous_commit=off`` in the query is the
                same as ``synchronous_commit=False`` (and wins over it).
            schema: Schema of the tables.
            clock: Source of timestamps.
            lock_lease: Unused (see the class).
            min_size: Connections kept open.
            max_size: Most connections opened (a held session lock occupies one).
            timeout: Seconds to wait for a connection before `StoreUnavailable`.
            connect_timeout: Seconds the connection opened before the first operation may take (whole
                seconds, at least 2, as libpq counts them; ``connect_timeout`` in the URL query wins):
                a server that cannot be reached is a `StoreUnavailable` naming the URL this soon.
            synchronous_commit: False commits without waiting for the WAL flush to disk: every write
                (appends, state saves) returns about one disk flush sooner, and a crash of the Postgres
                server or its machine may lose the commits of the last ~0.6 s (3 x ``wal_writer_delay``),
                never half a transaction; a killed client loses nothing. The SQLite store (WAL,
                ``synchronous=NORMAL``) does not flush at commit either: it may lose its last commits
                on an OS crash or power loss. None keeps the server's setting (``on`` by default).
        """
        conninfo, ours = split_url(url)
        pool: ConnectionPool[Any] = ConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            kwargs=_connection_options(conninfo, ours.get("synchronous_commit", synchronous_commit)),
            open=True,
        )
        store = cls(pool, schema=ours.get("schema", schema), clock=clock, lock_lease=lock_lease)
        store._owns = True
        store._first = _FirstConnect(url, conninfo, connect_timeout)
        return store

    @classmethod
    @contextmanager
    def from_url(cls, url: str, **kwargs: Any) -> Iterator[Self]:
        """Open the store for ``url`` and close its pool when the block ends."""
        store = cls.connect(url, **kwargs)
        try:
            yield store
        finally:
            store.close()

    def close(self) -> None:
        if self._owns:
            self._pool.close()

    def _transaction(self, conn: psycopg.Connection[Any], op: Op[T]) -> T:
        with conn.cursor() as cursor:
            try:
                command = next(op)
            except StopIteration as stop:
                result: T = stop.value
                return result
            if command.autocommit and conn.autocommit:
                return resume(op, command, lambda next_command: _execute(cursor, next_command))
            with conn.transaction():
                return resume(op, command, lambda next_command: _execute(cursor, next_command))

    def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        tenant: str | None = None,
        expected_count: int | None = None,
        state: StateWrite | None = None,
    ) -> int:
        for attempt in range(_DUPLICATE_RETRIES):
            try:
                return super().append_messages(
                    session_id, messages, tenant=tenant, expected_count=expected_count, state=state
                )
            except _DuplicateRace:
                if attempt == _DUPLICATE_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def _reach(self, first: _FirstConnect) -> None:
        try:
            psycopg.connect(first.conninfo, connect_timeout=first.seconds).close()
        except psycopg.OperationalError as exc:
            raise first.unreachable(exc) from exc
        self._first = None

    def _run(self, op: Op[T], *, write: bool) -> T:
        try:
            if self._first is not None:
                self._reach(self._first)
            with self._pool.connection() as conn:
                if not self._ready:
                    if self._transaction(conn, self._ops.installed_version()) < len(MIGRATIONS):
                        self._transaction(conn, self._ops.setup())
                    self._ready = True
                return self._transaction(conn, op)
        except (psycopg.Error, PoolTimeout) as exc:
            op.close()
            raise self._translate(exc) from exc
        except StoreUnavailable:  # the first connection failed
            op.close()
            raise

    @contextmanager
    def lock(self, session_id: str, *, timeout: float = 10.0, tenant: str | None = None) -> Iterator[None]:
        check_id(session_id)
        self.count_messages(session_id, tenant=tenant)  # SessionNotFound before waiting
        key = self._lock_key(session_id)
        with ExitStack() as stack:
            try:
                conn = stack.enter_context(self._pool.connection())
                deadline = time.monotonic() + timeout
                delay = 0.002
                while not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        row = conn.execute(_LOCK_HOLDER, _lock_holder_params(key)).fetchone()
                        raise _advisory_timeout(session_id, timeout, row)
                    time.sleep(min(delay, remaining))
                    delay = min(delay * 2, 0.05)
            except (psycopg.Error, PoolTimeout) as exc:
                raise self._translate(exc) from exc
            try:
                yield
            finally:
                try:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
                except psycopg.Error:
                    # The connection broke; the server released the lock when it did.
                    pass


class AsyncPostgresStore(_PostgresCommon, BaseAsyncStore):
    """The async twin of `PostgresStore`, on ``psycopg_pool.AsyncConnectionPool``.

    Args:
        pool: An ``AsyncConnectionPool`` (opened by the store on first use if it is not open yet);
            the store does not close it.
        schema: Schema holding the ``cw_*`` tables (created if missing).
        clock: Source of timestamps.
        lock_lease: Unused by Postgres; accepted for symmetry.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        schema: str = "public",
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
    ) -> None:
        super().__init__(clock=clock, lock_lease=lock_lease)
        self._pool = pool
        self._schema = _check_schema(schema)
        self._where = _describe(pool.conninfo)
        self._ops: SqlOps = SqlOps(Dialect.postgres(self._schema), schema=self._schema, where=self._where)
        self._owns = False
        self._ready = False
        self._opened = False

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        schema: str = "public",
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 10.0,
        connect_timeout: float = 5.0,
        synchronous_commit: bool | None = None,
    ) -> Self:
        """A store owning a new pool for ``url``; the pool opens on first use (see `PostgresStore.connect`)."""
        conninfo, ours = split_url(url)
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            kwargs=_connection_options(conninfo, ours.get("synchronous_commit", synchronous_commit)),
            open=False,
        )
        store = cls(pool, schema=ours.get("schema", schema), clock=clock, lock_lease=lock_lease)
        store._owns = True
        store._first = _FirstConnect(url, conninfo, connect_timeout)
        return store

    @classmethod
    @asynccontextmanager
    async def from_url(cls, url: str, **kwargs: Any) -> AsyncIterator[Self]:
        """Open the store for ``url`` and close its pool when the block ends."""
        store = cls.connect(url, **kwargs)
        try:
            yield store
        finally:
            await store.aclose()

    async def aclose(self) -> None:
        if self._owns:
            await self._pool.close()

    async def _open(self) -> None:
        if not self._opened:
            # open() is a no-op on an open pool, so a caller's ready pool is fine too.
            await self._pool.open()
            self._opened = True

    async def _transaction(self, conn: psycopg.AsyncConnection[Any], op: Op[T]) -> T:
        async with conn.cursor() as cursor:
            try:
                command = next(op)
            except StopIteration as stop:
                result: T = stop.value
                return result
            if command.autocommit and conn.autocommit:
                return await aresume(op, command, lambda next_command: _aexecute(cursor, next_command))
            async with conn.transaction():
                return await aresume(op, command, lambda next_command: _aexecute(cursor, next_command))

    async def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        tenant: str | None = None,
        expected_count: int | None = None,
        state: StateWrite | None = None,
    ) -> int:
        for attempt in range(_DUPLICATE_RETRIES):
            try:
                return await super().append_messages(
                    session_id, messages, tenant=tenant, expected_count=expected_count, state=state
                )
            except _DuplicateRace:
                if attempt == _DUPLICATE_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    async def _reach(self, first: _FirstConnect) -> None:
        try:
            conn = await psycopg.AsyncConnection.connect(first.conninfo, connect_timeout=first.seconds)
        except psycopg.OperationalError as exc:
            raise first.unreachable(exc) from exc
        await conn.close()
        self._first = None

    async def _run(self, op: Op[T], *, write: bool) -> T:
        try:
            if self._first is not None:
                await self._reach(self._first)
            await self._open()
            async with self._pool.connection() as conn:
                if not self._ready:
                    if await self._transaction(conn, self._ops.installed_version()) < len(MIGRATIONS):
                        await self._transaction(conn, self._ops.setup())
                    self._ready = True
                return await self._transaction(conn, op)
        except (psycopg.Error, PoolTimeout) as exc:
            op.close()
            raise self._translate(exc) from exc
        except StoreUnavailable:  # the first connection failed
            op.close()
            raise

    @asynccontextmanager
    async def lock(self, session_id: str, *, timeout: float = 10.0, tenant: str | None = None) -> AsyncIterator[None]:
        check_id(session_id)
        await self.count_messages(session_id, tenant=tenant)
        key = self._lock_key(session_id)
        async with AsyncExitStack() as stack:
            try:
                conn = await stack.enter_async_context(self._pool.connection())
                deadline = time.monotonic() + timeout
                delay = 0.002
                while True:
                    cursor = await conn.execute("SELECT pg_try_advisory_lock(%s)", (key,))
                    row = await cursor.fetchone()
                    if row is not None and row[0]:
                        break
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        cursor = await conn.execute(_LOCK_HOLDER, _lock_holder_params(key))
                        raise _advisory_timeout(session_id, timeout, await cursor.fetchone())
                    await anyio.sleep(min(delay, remaining))
                    delay = min(delay * 2, 0.05)
            except (psycopg.Error, PoolTimeout) as exc:
                raise self._translate(exc) from exc
            try:
                yield
            finally:
                with anyio.CancelScope(shield=True):
                    try:
                        await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
                    except psycopg.Error:
                        pass

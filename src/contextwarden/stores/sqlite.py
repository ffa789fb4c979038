"""SQLite session store: the embedded default (stdlib ``sqlite3``, WAL, busy timeout, migrations).

One connection per store, guarded by a lock, in autocommit mode with explicit transactions:
writes use ``BEGIN IMMEDIATE`` so two processes never deadlock upgrading a read lock, and WAL
lets readers run while one writer commits. ``synchronous=NORMAL`` is durable against a killed
process (the fault suite kills writers mid-append); a power loss can drop the last commits but
never corrupts the file. `AsyncSqliteStore` runs the same code on the event loop when it need not
wait (for a worker thread holding the connection, or another process's write lock), else in a
worker thread.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import anyio.to_thread

from ..exceptions import ConfigError, SchemaError, StoreError, StoreUnavailable
from ._sql import MIGRATIONS, Dialect, Sql, SqlOps
from .base import BaseAsyncStore, BaseStore
from .locks import DEFAULT_LOCK_LEASE
from .ops import Op, T, drive

__all__ = ["AsyncSqliteStore", "SqliteStore", "sqlite_path_from_url"]


def sqlite_path_from_url(url: str) -> tuple[str, dict[str, str]]:
    """The database path and options of a ``sqlite:///relative.db`` or ``sqlite:////absolute.db`` URL.

    ``sqlite:///:memory:`` gives a private in-memory database. Options come from the query string
    (``?busy_timeout=10``).
    """
    if not url.startswith("sqlite:///"):
        raise ConfigError(
            f"SQLite store URL {url!r} must start with `sqlite:///` (three slashes, then the path; four for an "
            "absolute path: `sqlite:////var/lib/cw.db`).",
            key="store_url",
        )
    parts = urlsplit(url)
    path = url[len("sqlite:///") :].split("?", 1)[0]
    if not path:
        raise ConfigError(f"SQLite store URL {url!r} has no path; use e.g. `sqlite:///cw.db`.", key="store_url")
    options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    return path, options


def _decode_text(value: bytes) -> str:
    # Lossless: an invalid byte becomes a lone surrogate, which the store's decoding then reports
    # as a SchemaError naming the session and the field (never a silent U+FFFD).
    return value.decode("utf-8", "surrogateescape")


def connect_options(options: dict[str, str]) -> dict[str, Any]:
    """The `SqliteStore.connect` keywords a ``sqlite://`` URL's query gives (``busy_timeout``, ...)."""
    known: dict[str, Any] = {}
    for key, value in options.items():
        if key == "busy_timeout":
            known[key] = float(value)
        else:
            raise ConfigError(f"unknown SQLite store URL option {key!r}; the known one is `busy_timeout`.", key=key)
    return known


class _Busy:
    """`SqliteStore._run_now` could not start without waiting."""


BUSY = _Busy()


class SqliteStore(BaseStore):
    """`SessionStore` on a SQLite database file.

    Args:
        conn: An open connection. The store switches it to autocommit mode (it manages transactions
            itself) and decodes text losslessly. Open it with ``check_same_thread=False``: a held
            lock renews its lease from a background thread, and the async twin runs in a worker thread.
        busy_timeout: Seconds a writer waits for another process's write lock.
        clock: Source of timestamps (tests inject a fake one).
        lock_lease: Seconds a lock outlives its holder's last heartbeat (a live holder renews it).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        busy_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
    ) -> None:
        super().__init__(clock=clock, lock_lease=lock_lease)
        conn.isolation_level = None
        # Invalid UTF-8 in a row (corruption) reaches the store's decoding, which names the session
        # and the field, instead of failing inside sqlite3 with an error that cannot.
        conn.text_factory = _decode_text
        self._conn = conn
        self._busy_timeout = busy_timeout
        self._mutex = threading.RLock()
        self._owns = False
        self._ready = False
        self._closed = False
        self._waits = True
        """The connection's statements wait ``busy_timeout`` for another connection's lock (False: not at all)."""
        self._wal = False
        """The database is in WAL mode (`_prepare` asks for it; a file system may refuse it)."""
        self._where = f"SQLite database {self._database_path()!r}"
        self._ops: SqlOps = SqlOps(Dialect.sqlite(), where=self._where)

    @classmethod
    def connect(
        cls,
        path: str | Path,
        *,
        busy_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
    ) -> Self:
        """Open (creating if needed) the database at ``path``; the store owns the connection."""
        try:
            conn = sqlite3.connect(str(path), timeout=busy_timeout, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open SQLite database {str(path)!r} ({exc}); check the path.") from exc
        store = cls(conn, busy_timeout=busy_timeout, clock=clock, lock_lease=lock_lease)
        store._owns = True
        return store

    @classmethod
    @contextmanager
    def from_url(cls, url: str, **kwargs: Any) -> Iterator[Self]:
        """Open the store for ``sqlite:///path`` and close it when the block ends."""
        path, options = sqlite_path_from_url(url)
        store = cls.connect(path, **{**connect_options(options), **kwargs})
        try:
            yield store
        finally:
            store.close()

    def close(self) -> None:
        with self._mutex:
            if self._owns and not self._closed:
                self._conn.close()
            self._closed = True

    # driver
    def _database_path(self) -> str:
        try:
            rows = self._conn.execute("PRAGMA database_list").fetchall()
        except sqlite3.Error:
            return "?"
        path = next((row[2] for row in rows if row[1] == "main"), "")
        return path or ":memory:"

    def _execute(self, command: Sql) -> list[tuple[Any, ...]]:
        if command.many:
            self._conn.executemany(command.text, command.params)
            return []
        return self._conn.execute(command.text, command.params).fetchall()

    def _transaction(self, op: Op[T], *, write: bool, begun: bool = False) -> T:
        conn = self._conn
        try:
            if not begun:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                result = drive(op, self._execute)
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    def _run(self, op: Op[T], *, write: bool) -> T:
        with self._mutex:
            if self._closed:
                op.close()
                raise StoreError(f"{self._where}: the store is closed; open a new one.")
            if not self._ready:
                self._prepare()
            try:
                self._wait_for_locks(True)
            except sqlite3.Error as exc:
                op.close()
                raise self._translate(exc) from exc
            return self._transaction(op, write=write)

    def _run_now(self, op: Op[T], *, write: bool) -> T | _Busy:
        """`_run` without waiting: `BUSY` (``op`` not started) when another thread holds the connection
        or, for a write, another connection holds the database's write lock."""
        if not self._mutex.acquire(blocking=False):
            return BUSY
        try:
            if not self._ready:
                return BUSY  # the first call may migrate the schema, waiting for other processes: not here
            if self._closed or not write:
                return self._run(op, write=write)
            try:
                self._wait_for_locks(False)
                try:
                    self._conn.execute("BEGIN IMMEDIATE")
                finally:
                    if not self._wal:  # outside WAL a commit waits for readers: as long as `_run`'s would
                        self._wait_for_locks(True)
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    return BUSY
                raise self._translate(exc) from exc
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc
            return self._transaction(op, write=True, begun=True)
        finally:
            self._mutex.release()

    def _wait_for_locks(self, wait: bool) -> None:
        """Make statements wait ``busy_timeout`` for another connection's lock, or fail at once.

        Only a change is sent: the two pragmas around every inline write cost about a tenth of it. In
        WAL mode a write left at no wait stays correct: once ``BEGIN IMMEDIATE`` holds the write lock,
        none of the transaction's statements (its commit included) waits for another connection.
        """
        if wait != self._waits:
            self._conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000) if wait else 0}")
            self._waits = wait

    def _prepare(self) -> None:
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            self._waits = True
            # WAL is a property of the file: it persists and lets readers run beside a writer.
            mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchall()
            self._wal = bool(mode) and str(mode[0][0]).lower() == "wal"
            self._conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc
        # Check first without the write lock, so opening a store never waits for another writer.
        if self._transaction(self._ops.installed_version(), write=False) < len(MIGRATIONS):
            self._transaction(self._ops.setup(), write=True)
        self._ready = True

    def _translate(self, exc: sqlite3.Error) -> StoreError:
        text = str(exc)
        if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
            return StoreUnavailable(
                f"{self._where} stayed locked by another writer for longer than busy_timeout={self._busy_timeout} s "
                f"({text}); raise `busy_timeout` or keep transactions short."
            )
        if "unable to open" in text or "disk I/O" in text:
            return StoreUnavailable(f"{self._where} cannot be read or written ({text}); check the path and disk.")
        if isinstance(exc, sqlite3.DatabaseError) and (
            "not a database" in text or "malformed" in text or "decode to UTF-8" in text
        ):
            return SchemaError(
                f"{self._where} is corrupted ({text}); restore it from a backup or an export, or use another file."
            )
        return StoreError(f"{self._where}: {type(exc).__name__}: {text}")


class AsyncSqliteStore(BaseAsyncStore):
    """The async twin of `SqliteStore`: the same code, run on the event loop when it cannot wait, else
    in a worker thread.

    A call runs at once on the event loop (``inline``) when no worker thread holds the connection
    and, for a write, no other process holds the database's write lock: a SQLite call on a WAL
    database takes tens of microseconds, less than a trip to a worker thread and back. A call that
    would wait for either goes to a worker thread, as every call does with ``inline=False``.

    Args:
        conn: An open connection made with ``check_same_thread=False``.
        busy_timeout: Seconds a writer waits for another process's write lock.
        clock: Source of timestamps.
        lock_lease: Seconds a lock outlives its holder's last heartbeat (a live holder renews it).
        inline: Run calls that need not wait on the event loop.
    """

    def __init__(
        self,
        conn: sqlite3.Connection | SqliteStore,
        *,
        busy_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
        inline: bool = True,
    ) -> None:
        super().__init__(clock=clock, lock_lease=lock_lease)
        self._sync = (
            conn
            if isinstance(conn, SqliteStore)
            else SqliteStore(conn, busy_timeout=busy_timeout, clock=clock, lock_lease=lock_lease)
        )
        self._ops = self._sync._ops
        self._inline = inline

    @classmethod
    def connect(
        cls,
        path: str | Path,
        *,
        busy_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
        lock_lease: float = DEFAULT_LOCK_LEASE,
        inline: bool = True,
    ) -> Self:
        """Open (creating if needed) the database at ``path``; the store owns the connection."""
        sync = SqliteStore.connect(path, busy_timeout=busy_timeout, clock=clock, lock_lease=lock_lease)
        return cls(sync, clock=clock, lock_lease=lock_lease, inline=inline)

    @classmethod
    @asynccontextmanager
    async def from_url(cls, url: str, **kwargs: Any) -> AsyncIterator[Self]:
        """Open the store for ``sqlite:///path`` and close it when the block ends."""
        path, options = sqlite_path_from_url(url)
        store = cls.connect(path, **{**connect_options(options), **kwargs})
        try:
            yield store
        finally:
            await store.aclose()

    async def _run(self, op: Op[T], *, write: bool) -> T:
        if self._inline:
            # A call takes tens of microseconds; handing it to a worker thread and back costs more,
            # and far more on a busy machine, where the two threads queue for the GIL.
            done = self._sync._run_now(op, write=write)
            if not isinstance(done, _Busy):
                return done
        return await anyio.to_thread.run_sync(functools.partial(self._sync._run, op, write=write))

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._sync.close)

"""SQL schema, migrations and operations shared by the SQLite and Postgres stores.

Statements are written once with ``?`` placeholders and ``{t}`` (table prefix) markers; a
`Dialect` renders them for each database. Operations are sans-IO generators (see `ops`): they
yield `Sql` commands and receive the fetched rows. The module is one concept over 600 lines: the
store's operations in SQL, each next to the statements it runs.

Concurrency: every write starts by updating the session's row (``last_active``), which takes
its row lock in Postgres and the database write lock in SQLite (``BEGIN IMMEDIATE``). Writers to
one session are therefore serialized, so sequence numbers are contiguous and the duplicate check
of an append cannot race. State compare-and-set is a conditional ``UPDATE ... WHERE version = ?``.

Tenants: each statement that finds a session by id also requires ``tenant = COALESCE(?, tenant)``,
so a call naming another tenant finds no row, exactly as for a missing session, in the same
statement that reads or writes.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..exceptions import SchemaError
from .ops import Op, append_then_save
from .protocols import SessionInfo, session_info
from .values import FORMAT_VERSION, check_format, not_found, stored_int, transcript_moved

__all__ = ["MIGRATIONS", "Dialect", "Sql", "SqlOps"]


@dataclass(frozen=True, slots=True)
class Sql:
    """One statement to execute; with ``many`` the params are a sequence of rows (executemany)."""

    text: str
    params: Sequence[Any] = ()
    many: bool = False
    autocommit: bool = False
    """On an operation's first statement: every statement of it is atomic alone, so a driver
    may run them without an explicit transaction (one round trip fewer each way)."""
    prepare: bool = False
    """A hot statement: a driver that can should prepare it on the server at its first use
    (psycopg by itself prepares a statement only at its sixth execution on a connection)."""


@dataclass(frozen=True, kw_only=True)
class Dialect:
    """What differs between SQLite and Postgres."""

    name: Literal["sqlite", "postgres"]
    tables: str
    """Prefix of table names (``cw_`` or ``"schema".cw_``)."""
    placeholder: str
    types: dict[str, str]

    @classmethod
    def sqlite(cls) -> Dialect:
        """The SQLite dialect."""
        return cls(
            name="sqlite",
            tables="cw_",
            placeholder="?",
            types={"key": "TEXT", "real": "REAL", "int": "INTEGER", "blob": "BLOB", "greatest": "max"},
        )

    @classmethod
    def postgres(cls, schema: str) -> Dialect:
        """The Postgres dialect, with every table in ``schema``."""
        return cls(
            name="postgres",
            tables=f'"{schema}".cw_',
            placeholder="%s",
            # "C" collation: ids sort by code point, as in SQLite and Redis, and cursors agree with ORDER BY.
            types={
                "key": 'TEXT COLLATE "C"',
                "real": "DOUBLE PRECISION",
                "int": "BIGINT",
                "blob": "BYTEA",
                "greatest": "GREATEST",
            },
        )

    def render(self, template: str) -> str:
        """The statement for this database."""
        text = template.format(t=self.tables, i="cw_", **self.types)
        return text.replace("?", self.placeholder) if self.placeholder != "?" else text

    def any_of(self, column: str) -> str:
        """A condition ``column`` is one of a list given as one parameter (see `list_param`)."""
        if self.name == "postgres":
            return f"{column} = ANY(?)"
        return f"{column} IN (SELECT value FROM json_each(?))"

    def list_param(self, values: Sequence[str]) -> Any:
        """The parameter for `any_of`."""
        return list(values) if self.name == "postgres" else json.dumps(list(values))


MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (  # 1: the initial schema
        """CREATE TABLE IF NOT EXISTS {t}sessions (
            session_id {key} PRIMARY KEY,
            tenant {key} NOT NULL,
            created_at {real} NOT NULL,
            last_active {real} NOT NULL,
            model TEXT,
            context_window {int},
            metadata TEXT NOT NULL,
            archived_at {real},
            message_count {int} NOT NULL DEFAULT 0,
            audit_count {int} NOT NULL DEFAULT 0,
            format INTEGER NOT NULL DEFAULT 1)""",
        "CREATE INDEX IF NOT EXISTS {i}sessions_tenant ON {t}sessions (tenant, session_id)",
        """CREATE TABLE IF NOT EXISTS {t}messages (
            session_id {key} NOT NULL,
            seq {int} NOT NULL,
            message_id {key} NOT NULL,
            body TEXT NOT NULL,
            created_at {real} NOT NULL,
            PRIMARY KEY (session_id, seq),
            UNIQUE (session_id, message_id))""",
        """CREATE TABLE IF NOT EXISTS {t}state (
            session_id {key} NOT NULL,
            slot {key} NOT NULL,
            body TEXT NOT NULL,
            version {int} NOT NULL,
            updated_at {real} NOT NULL,
            PRIMARY KEY (session_id, slot))""",
        """CREATE TABLE IF NOT EXISTS {t}snapshots (
            session_id {key} NOT NULL,
            snapshot_id {key} NOT NULL,
            data {blob} NOT NULL,
            metadata TEXT NOT NULL,
            created_at {real} NOT NULL,
            PRIMARY KEY (session_id, snapshot_id))""",
        """CREATE TABLE IF NOT EXISTS {t}audit (
            session_id {key} NOT NULL,
            seq {int} NOT NULL,
            event TEXT NOT NULL,
            created_at {real} NOT NULL,
            PRIMARY KEY (session_id, seq))""",
        """CREATE TABLE IF NOT EXISTS {t}locks (
            session_id {key} PRIMARY KEY,
            owner TEXT NOT NULL,
            expires_at {real} NOT NULL)""",
    ),
)
"""Schema migrations in order; the ``cw_migrations`` table records which ones a database has."""

_TENANT = "tenant = COALESCE(?, tenant)"
"""The tenant condition: a NULL parameter (no tenant named) matches every tenant."""
_COLUMNS = (
    "session_id, tenant, created_at, last_active, model, context_window, metadata, archived_at, message_count, format"
)
_CONTENT_TABLES = ("messages", "state", "snapshots", "audit", "locks")


def _info(row: Sequence[Any]) -> SessionInfo:
    return session_info(
        row[0],
        tenant=row[1],
        created_at=row[2],
        last_active=row[3],
        model=row[4],
        window=row[5],
        metadata=row[6],
        archived_at=row[7],
        message_count=row[8],
        fmt=row[9],
    )


class _Queries:
    """Every statement, rendered once per dialect."""

    def __init__(self, d: Dialect) -> None:
        r = d.render
        self.select_session = r(f"SELECT {_COLUMNS} FROM {{t}}sessions WHERE session_id = ? AND {_TENANT}")
        self.insert_session = r(
            "INSERT INTO {t}sessions (session_id, tenant, created_at, last_active, model, context_window, metadata, "
            "message_count, audit_count, format) VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, ?) "
            "ON CONFLICT (session_id) DO NOTHING"
        )
        # Updating the row first locks it (Postgres) so concurrent writers to one session queue up.
        self.bump = r(
            "UPDATE {t}sessions SET last_active = {greatest}(last_active, ?) WHERE session_id = ? AND " + _TENANT + " "
            "RETURNING message_count, format"
        )
        self.peek = r("SELECT message_count, format FROM {t}sessions WHERE session_id = ? AND " + _TENANT)
        self.archive = r(
            "UPDATE {t}sessions SET archived_at = COALESCE(archived_at, ?) WHERE session_id = ? AND "
            + _TENANT
            + " RETURNING format"
        )
        self.delete_session = r("DELETE FROM {t}sessions WHERE session_id = ? AND " + _TENANT + " RETURNING session_id")
        self.delete_content = [r(f"DELETE FROM {{t}}{table} WHERE session_id = ?") for table in _CONTENT_TABLES]
        self.delete_many = [r(f"DELETE FROM {{t}}{table} WHERE {d.any_of('session_id')}") for table in _CONTENT_TABLES]
        # The idle test sits in the DELETE itself, so a session touched meanwhile is not removed.
        self.delete_idle = r(
            "DELETE FROM {t}sessions WHERE last_active < ? AND archived_at IS NULL RETURNING session_id"
        )
        self.existing_ids = r(f"SELECT message_id FROM {{t}}messages WHERE session_id = ? AND {d.any_of('message_id')}")
        self.insert_message = r(
            "INSERT INTO {t}messages (session_id, seq, message_id, body, created_at) VALUES (?, ?, ?, ?, ?)"
        )
        self.add_count = r("UPDATE {t}sessions SET message_count = message_count + ? WHERE session_id = ?")
        self.load = r("SELECT seq, body FROM {t}messages WHERE session_id = ? AND seq >= ? AND seq < ? ORDER BY seq")
        self.get_message = r("SELECT seq, body FROM {t}messages WHERE session_id = ? AND message_id = ?")
        self.load_state = r("SELECT body, version FROM {t}state WHERE session_id = ? AND slot = ?")
        self.insert_state = r(
            "INSERT INTO {t}state (session_id, slot, body, version, updated_at) VALUES (?, ?, ?, 1, ?) "
            "ON CONFLICT (session_id, slot) DO NOTHING RETURNING version"
        )
        self.update_state = r(
            "UPDATE {t}state SET body = ?, version = version + 1, updated_at = ? "
            "WHERE session_id = ? AND slot = ? AND version = ? RETURNING version"
        )
        self.state_version = r("SELECT version FROM {t}state WHERE session_id = ? AND slot = ?")
        # Postgres saves state in one statement too: bump the session (its row lock orders writers),
        # then the conditional write. A conflict is reported after a fresh read of the version.
        cas_tail = (
            """
            SELECT (SELECT version FROM written), (SELECT format FROM {t}sessions WHERE session_id = ? AND """
            + _TENANT
            + ")"
        )
        session_cte = (
            """WITH s AS (
                UPDATE {t}sessions SET last_active = GREATEST(last_active, ?)
                WHERE session_id = ? AND format <= ? AND """
            + _TENANT
            + """
                RETURNING 1
            ), """
        )
        self.cas_insert_one_statement = r(
            session_cte
            + """written AS (
                INSERT INTO {t}state (session_id, slot, body, version, updated_at)
                SELECT ?, ?, ?, 1, ? WHERE EXISTS (SELECT 1 FROM s)
                ON CONFLICT (session_id, slot) DO NOTHING RETURNING version
            )"""
            + cas_tail
        )
        self.cas_update_one_statement = r(
            session_cte
            + """written AS (
                UPDATE {t}state SET body = ?, version = version + 1, updated_at = ?
                WHERE session_id = ? AND slot = ? AND version = ? AND EXISTS (SELECT 1 FROM s)
                RETURNING version
            )"""
            + cas_tail
        )
        self.restore_state = r(
            "INSERT INTO {t}state (session_id, slot, body, version, updated_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (session_id, slot) DO UPDATE SET body = excluded.body, version = excluded.version, "
            "updated_at = excluded.updated_at"
        )
        self.list_states = r("SELECT slot, body, version FROM {t}state WHERE session_id = ? ORDER BY slot")
        self.put_snapshot = r(
            "INSERT INTO {t}snapshots (session_id, snapshot_id, data, metadata, created_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (session_id, snapshot_id) DO UPDATE SET data = excluded.data, "
            "metadata = excluded.metadata, created_at = excluded.created_at"
        )
        self.get_snapshot = r("SELECT data, metadata FROM {t}snapshots WHERE session_id = ? AND snapshot_id = ?")
        self.list_snapshots = r("SELECT snapshot_id FROM {t}snapshots WHERE session_id = ? ORDER BY snapshot_id")
        self.next_audit = r(
            "UPDATE {t}sessions SET audit_count = audit_count + 1, last_active = {greatest}(last_active, ?) "
            "WHERE session_id = ? AND " + _TENANT + " RETURNING audit_count, format"
        )
        self.insert_audit = r("INSERT INTO {t}audit (session_id, seq, event, created_at) VALUES (?, ?, ?, ?)")
        self.read_audit = r("SELECT event FROM {t}audit WHERE session_id = ? AND seq >= ? AND seq < ? ORDER BY seq")
        self.expire_lock = r("DELETE FROM {t}locks WHERE session_id = ? AND expires_at <= ?")
        self.take_lock = r(
            "INSERT INTO {t}locks (session_id, owner, expires_at) VALUES (?, ?, ?) "
            "ON CONFLICT (session_id) DO NOTHING RETURNING owner"
        )
        self.release_lock = r("DELETE FROM {t}locks WHERE session_id = ? AND owner = ?")
        self.renew_lock = r("UPDATE {t}locks SET expires_at = ? WHERE session_id = ? AND owner = ? RETURNING owner")
        self.lock_holder = r("SELECT owner, expires_at FROM {t}locks WHERE session_id = ?")
        self.migrations_table = r(
            "CREATE TABLE IF NOT EXISTS {t}migrations (version INTEGER PRIMARY KEY, applied_at {real} NOT NULL)"
        )
        self.schema_version = r("SELECT COALESCE(MAX(version), 0) FROM {t}migrations")
        self.record_migration = r("INSERT INTO {t}migrations (version, applied_at) VALUES (?, ?)")
        self.migrations = [[r(statement) for statement in step] for step in MIGRATIONS]
        # Postgres appends in one statement (one round trip, no explicit transaction). The UPDATE
        # waits for the session's row lock and then sees the newest message_count, so positions
        # stay contiguous under concurrent appends. The duplicate check reads the statement's
        # snapshot: two writers racing with the same message id make the later one fail on the
        # unique index, and the store retries it (then it sees the id and skips it). The lateral
        # LIMIT 1 keeps the duplicate check at one index probe per message (an anti-join would
        # read the whole transcript). Arrays go in binary (%b): no quoting of JSON bodies.
        self.append_one_statement = r(
            """WITH fresh AS (
                SELECT u.message_id, u.body, row_number() OVER (ORDER BY u.ord) AS ord
                FROM unnest(%b::text[], %b::text[]) WITH ORDINALITY AS u(message_id, body, ord)
                LEFT JOIN LATERAL (
                    SELECT 1 AS hit FROM {t}messages m WHERE m.session_id = ? AND m.message_id = u.message_id LIMIT 1
                ) stored ON true
                WHERE stored.hit IS NULL
            ), s AS (
                UPDATE {t}sessions SET message_count = message_count + (SELECT count(*) FROM fresh),
                    last_active = GREATEST(last_active, ?)
                WHERE session_id = ? AND format <= ? AND tenant = COALESCE(?, tenant) AND message_count >= 0
                    AND (? < 0 OR message_count = ?)
                RETURNING message_count - (SELECT count(*) FROM fresh) AS base
            ), ins AS (
                INSERT INTO {t}messages (session_id, seq, message_id, body, created_at)
                SELECT ?, s.base + f.ord - 1, f.message_id, f.body, ? FROM s, fresh f
                RETURNING seq
            )
            SELECT (SELECT count(*) FROM ins), (SELECT base FROM s), c.format, c.message_count
            FROM (SELECT 1) AS one LEFT JOIN (
                SELECT format, message_count FROM {t}sessions WHERE session_id = ? AND tenant = COALESCE(?, tenant)
            ) AS c ON true"""
        )


_NO_LIMIT = 2**62


class SqlOps:
    """The store operations in SQL (see `base.StoreOps`)."""

    def __init__(self, dialect: Dialect, *, schema: str | None = None, where: str = "the database") -> None:
        self.dialect = dialect
        self.q = _Queries(dialect)
        self._schema = schema
        self._where = where

    # helpers
    def _guard(self, session_id: str, rows: list[tuple[Any, ...]], tenant: str | None = None) -> tuple[Any, ...]:
        """The first row, after checking the session exists and its format is readable (format is last)."""
        if not rows:
            raise not_found(session_id, tenant)
        row = rows[0]
        check_format(session_id, stored_int(row[-1], session_id=session_id, what="`format`"))
        return row

    def _bump(self, session_id: str, now: float, tenant: str | None = None) -> Op[int]:
        rows = yield Sql(self.q.bump, (now, session_id, tenant))
        count = self._guard(session_id, rows, tenant)[0]
        return stored_int(count, session_id=session_id, what="`message_count`", minimum=0)

    def _peek(self, session_id: str, tenant: str | None = None) -> Op[int]:
        rows = yield Sql(self.q.peek, (session_id, tenant))
        count = self._guard(session_id, rows, tenant)[0]
        return stored_int(count, session_id=session_id, what="`message_count`", minimum=0)

    # schema
    def _known(self, version: int) -> int:
        if version > len(MIGRATIONS):
            raise SchemaError(
                f"{self._where} has contextwarden schema version {version}, but this release knows versions up to "
                f"{len(MIGRATIONS)}; upgrade contextwarden (`pip install -U contextwarden`) or point the store at "
                "another database."
            )
        return version

    def installed_version(self) -> Op[int]:
        """The schema version the database has (0 when empty), read without taking a write lock."""
        if self.dialect.name == "postgres":
            rows = yield Sql(
                self.dialect.render("SELECT to_regclass(?) IS NOT NULL"), (f"{self.dialect.tables}migrations",)
            )
        else:
            rows = yield Sql("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'cw_migrations'")
        if not rows[0][0]:
            return 0
        rows = yield Sql(self.q.schema_version)
        return self._known(int(rows[0][0]))

    def setup(self) -> Op[int]:
        if self.dialect.name == "postgres":
            assert self._schema is not None
            # One migrator at a time per schema; CREATE SCHEMA IF NOT EXISTS itself races otherwise.
            key = int.from_bytes(hashlib.blake2b(f"cw-migrate:{self._schema}".encode(), digest_size=8).digest(), "big")
            yield Sql(self.dialect.render("SELECT pg_advisory_xact_lock(?)"), (key - 2**63,))
            yield Sql(f'CREATE SCHEMA IF NOT EXISTS "{self._schema}"')
        yield Sql(self.q.migrations_table)
        rows = yield Sql(self.q.schema_version)
        current = self._known(int(rows[0][0]))
        for version in range(current + 1, len(MIGRATIONS) + 1):
            for statement in self.q.migrations[version - 1]:
                yield Sql(statement)
            yield Sql(self.q.record_migration, (version, time.time()))
        return len(MIGRATIONS)

    # lifecycle
    def create_session(
        self,
        session_id: str,
        *,
        tenant: str,
        model: str | None,
        window: int | None,
        metadata: str,
        created_at: float,
        last_active: float,
    ) -> Op[SessionInfo]:
        yield Sql(
            self.q.insert_session,
            (session_id, tenant, created_at, last_active, model, window, metadata, FORMAT_VERSION),
        )
        rows = yield Sql(self.q.select_session, (session_id, None))
        return _info(rows[0])

    def get_session(self, session_id: str, *, tenant: str | None = None) -> Op[SessionInfo | None]:
        rows = yield Sql(self.q.select_session, (session_id, tenant))
        return _info(rows[0]) if rows else None

    def touch(self, session_id: str, *, now: float, tenant: str | None = None) -> Op[None]:
        yield from self._bump(session_id, now, tenant)

    def list_sessions(
        self, *, tenant: str | None, limit: int, after: str | None, include_archived: bool
    ) -> Op[list[SessionInfo]]:
        conditions: list[str] = []
        params: list[Any] = []
        if after is not None:
            conditions.append("session_id > ?")
            params.append(after)
        if tenant is not None:
            conditions.append("tenant = ?")
            params.append(tenant)
        if not include_archived:
            conditions.append("archived_at IS NULL")
        where = (" WHERE " + " AND ".join(conditions)) if conditions else ""
        text = self.dialect.render(f"SELECT {_COLUMNS} FROM {{t}}sessions{where} ORDER BY session_id LIMIT ?")
        rows = yield Sql(text, (*params, limit))
        return [_info(row) for row in rows]

    def archive(self, session_id: str, *, now: float, tenant: str | None = None) -> Op[None]:
        rows = yield Sql(self.q.archive, (now, session_id, tenant))
        self._guard(session_id, rows, tenant)

    def delete_session(self, session_id: str, *, tenant: str | None = None) -> Op[None]:
        rows = yield Sql(self.q.delete_session, (session_id, tenant))
        if not rows:
            raise not_found(session_id, tenant)
        for statement in self.q.delete_content:
            yield Sql(statement, (session_id,))

    def expire_idle(self, *, cutoff: float) -> Op[list[str]]:
        rows = yield Sql(self.q.delete_idle, (cutoff,))
        expired = sorted(row[0] for row in rows)
        for start in range(0, len(expired), 500):
            chunk = self.dialect.list_param(expired[start : start + 500])
            for statement in self.q.delete_many:
                yield Sql(statement, (chunk,))
        return expired

    # transcript
    def append_messages(
        self,
        session_id: str,
        items: Sequence[tuple[str, str]],
        *,
        now: float,
        tenant: str | None = None,
        expected: int | None = None,
    ) -> Op[int]:
        if self.dialect.name == "postgres":
            return (yield from self._append_one_statement(session_id, items, now=now, tenant=tenant, expected=expected))
        count = yield from self._bump(session_id, now, tenant)
        if expected is not None and count != expected:
            raise transcript_moved(session_id, expected, count)  # the transaction rolls the bump back
        if not items:
            return 0
        rows = yield Sql(self.q.existing_ids, (session_id, self.dialect.list_param([mid for mid, _ in items])))
        stored = {row[0] for row in rows}
        new = [
            (session_id, count + offset, message_id, body, now)
            for offset, (message_id, body) in enumerate(item for item in items if item[0] not in stored)
        ]
        if new:
            yield Sql(self.q.insert_message, new, many=True)
            yield Sql(self.q.add_count, (len(new), session_id))
        return len(new)

    def _append_one_statement(
        self, session_id: str, items: Sequence[tuple[str, str]], *, now: float, tenant: str | None, expected: int | None
    ) -> Op[int]:
        ids = [message_id for message_id, _ in items]
        bodies = [body for _, body in items]
        wanted = -1 if expected is None else expected
        params = (
            ids,
            bodies,
            session_id,
            now,
            session_id,
            FORMAT_VERSION,
            tenant,
            wanted,
            wanted,
            session_id,
            now,
            session_id,
            tenant,
        )
        rows = yield Sql(self.q.append_one_statement, params, autocommit=True, prepare=True)
        added, base, fmt, count = rows[0]
        if base is None:
            # Nothing was written: the session is missing (or another tenant's, or gone meanwhile), too new,
            # its count corrupted, or (with an expected count) its transcript moved. The count is the
            # statement's snapshot: a writer that committed while this one waited for the row makes it
            # stale, never wrong to report.
            if fmt is not None:
                check_format(session_id, stored_int(fmt, session_id=session_id, what="`format`"))
                actual = stored_int(count, session_id=session_id, what="`message_count`", minimum=0)
                if expected is not None:
                    raise transcript_moved(session_id, expected, actual)
            raise not_found(session_id, tenant)
        return int(added)

    def load_messages(
        self, session_id: str, *, start: int, limit: int | None, tenant: str | None = None
    ) -> Op[list[tuple[int, str]]]:
        count = yield from self._peek(session_id, tenant)
        end = count if limit is None else min(count, start + limit)
        if end <= start:
            return []
        rows = yield Sql(self.q.load, (session_id, start, end))
        return [(stored_int(seq, session_id=session_id, what="message `seq`", minimum=0), body) for seq, body in rows]

    def count_messages(self, session_id: str, *, tenant: str | None = None) -> Op[int]:
        return (yield from self._peek(session_id, tenant))

    def get_message(self, session_id: str, message_id: str, *, tenant: str | None = None) -> Op[tuple[int, str] | None]:
        yield from self._peek(session_id, tenant)
        rows = yield Sql(self.q.get_message, (session_id, message_id))
        if not rows:
            return None
        return stored_int(rows[0][0], session_id=session_id, what="message `seq`", minimum=0), rows[0][1]

    # state
    @staticmethod
    def _version(session_id: str, slot: str, value: object) -> int:
        return stored_int(value, session_id=session_id, what=f"version of state {slot!r}", minimum=0)

    def load_state(self, session_id: str, slot: str, *, tenant: str | None = None) -> Op[tuple[str | None, int]]:
        yield from self._peek(session_id, tenant)
        rows = yield Sql(self.q.load_state, (session_id, slot))
        return (rows[0][0], self._version(session_id, slot, rows[0][1])) if rows else (None, 0)

    def append_with_state(
        self,
        session_id: str,
        items: Sequence[tuple[str, str]],
        slot: str,
        body: str,
        *,
        version: int,
        token: str,
        now: float,
        tenant: str | None = None,
        expected: int | None = None,
    ) -> Op[int]:
        return append_then_save(
            self, session_id, items, slot, body, version=version, token=token, now=now, tenant=tenant, expected=expected
        )

    def save_state(
        self, session_id: str, slot: str, body: str, *, expected: int, now: float, token: str, tenant: str | None = None
    ) -> Op[tuple[bool, int]]:
        if self.dialect.name == "postgres":
            return (
                yield from self._save_state_one_statement(
                    session_id, slot, body, expected=expected, now=now, tenant=tenant
                )
            )
        yield from self._bump(session_id, now, tenant)
        if expected == 0:
            rows = yield Sql(self.q.insert_state, (session_id, slot, body, now))
        else:
            rows = yield Sql(self.q.update_state, (body, now, session_id, slot, expected))
        if rows:
            return True, self._version(session_id, slot, rows[0][0])
        rows = yield Sql(self.q.state_version, (session_id, slot))
        return False, self._version(session_id, slot, rows[0][0]) if rows else 0

    def _save_state_one_statement(
        self, session_id: str, slot: str, body: str, *, expected: int, now: float, tenant: str | None
    ) -> Op[tuple[bool, int]]:
        guard = (now, session_id, FORMAT_VERSION, tenant)
        if expected == 0:
            params: tuple[Any, ...] = (*guard, session_id, slot, body, now, session_id, tenant)
            rows = yield Sql(self.q.cas_insert_one_statement, params, autocommit=True, prepare=True)
        else:
            params = (*guard, body, now, session_id, slot, expected, session_id, tenant)
            rows = yield Sql(self.q.cas_update_one_statement, params, autocommit=True, prepare=True)
        version, fmt = rows[0]
        if fmt is None:
            raise not_found(session_id, tenant)
        check_format(session_id, stored_int(fmt, session_id=session_id, what="`format`"))
        if version is not None:
            return True, self._version(session_id, slot, version)
        rows = yield Sql(self.q.state_version, (session_id, slot))
        return False, self._version(session_id, slot, rows[0][0]) if rows else 0

    def restore_state(self, session_id: str, slot: str, body: str, *, version: int, now: float) -> Op[None]:
        yield from self._bump(session_id, now)
        yield Sql(self.q.restore_state, (session_id, slot, body, version, now))

    def list_states(self, session_id: str, *, tenant: str | None = None) -> Op[list[tuple[str, str, int]]]:
        yield from self._peek(session_id, tenant)
        rows = yield Sql(self.q.list_states, (session_id,))
        return [(slot, body, self._version(session_id, slot, version)) for slot, body, version in rows]

    # snapshots
    def put_snapshot(
        self, session_id: str, snapshot_id: str, data: bytes, metadata: str, *, now: float, tenant: str | None = None
    ) -> Op[None]:
        yield from self._bump(session_id, now, tenant)
        yield Sql(self.q.put_snapshot, (session_id, snapshot_id, data, metadata, now))

    def get_snapshot(
        self, session_id: str, snapshot_id: str, *, tenant: str | None = None
    ) -> Op[tuple[bytes, str] | None]:
        yield from self._peek(session_id, tenant)
        rows = yield Sql(self.q.get_snapshot, (session_id, snapshot_id))
        if not rows:
            return None
        data, metadata = rows[0]
        if not isinstance(data, bytes | bytearray | memoryview):
            # SQLite stores whatever it is given: a text value here is a corrupted row.
            raise SchemaError(
                f"Session {session_id!r}: the stored data of snapshot {snapshot_id!r} is {type(data).__name__}, not "
                "bytes; the row is corrupted; restore the session from an export, or delete the snapshot's session.",
                session_id=session_id,
            )
        return bytes(data), metadata

    def list_snapshots(self, session_id: str, *, tenant: str | None = None) -> Op[list[str]]:
        yield from self._peek(session_id, tenant)
        rows = yield Sql(self.q.list_snapshots, (session_id,))
        return [row[0] for row in rows]

    # audit
    def append_audit(self, session_id: str, event: str, *, now: float, tenant: str | None = None) -> Op[None]:
        rows = yield Sql(self.q.next_audit, (now, session_id, tenant))
        count = self._guard(session_id, rows, tenant)[0]
        seq = stored_int(count, session_id=session_id, what="`audit_count`", minimum=1) - 1
        yield Sql(self.q.insert_audit, (session_id, seq, event, now))

    def read_audit(self, session_id: str, *, since: int, limit: int | None, tenant: str | None = None) -> Op[list[str]]:
        yield from self._peek(session_id, tenant)
        end = _NO_LIMIT if limit is None else since + limit
        rows = yield Sql(self.q.read_audit, (session_id, since, end))
        return [row[0] for row in rows]

    # locks (SQLite; Postgres uses advisory locks instead)
    def try_lock(self, session_id: str, owner: str, *, lease: float, now: float, tenant: str | None = None) -> Op[bool]:
        yield from self._peek(session_id, tenant)
        yield Sql(self.q.expire_lock, (session_id, now))
        rows = yield Sql(self.q.take_lock, (session_id, owner, now + lease))
        return bool(rows)

    def renew_lock(self, session_id: str, owner: str, *, lease: float, now: float) -> Op[bool]:
        rows = yield Sql(self.q.renew_lock, (now + lease, session_id, owner))
        return bool(rows)

    def lock_holder(self, session_id: str, *, now: float) -> Op[tuple[str, float] | None]:
        rows = yield Sql(self.q.lock_holder, (session_id,))
        if not rows:
            return None
        owner, expires_at = rows[0]
        try:
            left = float(expires_at) - now
        except (TypeError, ValueError):
            return str(owner), 0.0
        return (str(owner), left) if left > 0 else None

    def unlock(self, session_id: str, owner: str) -> Op[None]:
        yield Sql(self.q.release_lock, (session_id, owner))

"""Long-term memory in an SQLite file: records as JSON rows, keyword search by FTS5, vectors as blobs.

Each tenant has an FTS5 table of its own (``memory_fts_<n>``, listed in ``memory_tenants``), so
BM25's term statistics, the common-term rule below and the newest-memories window are computed
over that tenant's memories only: what one tenant writes never changes what another recalls. The
tables hold the library's own tokens (CJK bigrams included) joined by spaces, so SQLite's
``unicode61`` tokenizer only splits them again; ranking is FTS5's built-in BM25. The file can be
the session store's: the tables are prefixed ``memory_``. A file written with one shared FTS
table is moved to per-tenant tables when it is opened.

A query term found in more than `COMMON_SHARE` of all memories (and in more than 1,000) is left out
of the match when rarer terms remain: FTS5 scores every row a term matches, so one very common
term made a query over 100,000 memories take 400 ms instead of under 5 ms, while its BM25 weight
(its IDF) is close to zero anyway. A query made only of common terms searches the tenant's newest
`COMMON_WINDOW` memories (of the session, when the query names one).
"""

from __future__ import annotations

import math
import sqlite3
import struct
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

from .._codec import decode_record, encode_record
from ..records import MemoryRecord

__all__ = ["COMMON_SHARE", "SQLiteMemoryBackend"]

COMMON_SHARE = 0.02
"""A query term in more than this share of the memories only selects when no rarer term is left."""
COMMON_WINDOW = 5000
"""A query of common terms only searches this many of the newest memories."""
_K1, _B = 1.2, 0.75  # FTS5's BM25 parameters, for recalls scored per session

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    session_id TEXT,
    position INTEGER NOT NULL,
    subject TEXT,
    data TEXT NOT NULL,
    UNIQUE (tenant, memory_id)
);
CREATE INDEX IF NOT EXISTS memory_records_subject ON memory_records (tenant, subject);
CREATE INDEX IF NOT EXISTS memory_records_position ON memory_records (tenant, session_id, position);
CREATE INDEX IF NOT EXISTS memory_records_order ON memory_records (tenant, session_id, seq);
CREATE INDEX IF NOT EXISTS memory_records_tenant_order ON memory_records (tenant, seq);
CREATE TABLE IF NOT EXISTS memory_tenants (
    tag INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS memory_vectors (
    tenant TEXT NOT NULL,
    model TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (tenant, model, memory_id)
);
"""


def _fts_term(token: str) -> str:
    return '"' + token.replace('"', '""') + '"'


class SQLiteMemoryBackend:
    """Memories in an SQLite file (WAL), tenant-scoped.

    Args:
        path: The database file (``":memory:"`` for a private in-memory database).
        connection: An existing connection to use instead (not closed by `close`).
    """

    def __init__(self, path: str | Path = ":memory:", *, connection: sqlite3.Connection | None = None) -> None:
        self._owns = connection is None
        self._conn = connection or sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._lock = threading.RLock()
        self._sizes: dict[str, int] = {}
        self._session_stats: dict[tuple[str, str], tuple[int, int, dict[str, int]]] = {}
        self._tables: dict[str, str] = {}
        with self._lock:
            if str(path) != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.executescript(_SCHEMA)
            self._move_shared_index()

    def _table(self, tenant: str, *, create: bool) -> str | None:
        """The tenant's FTS table (created when ``create``); None when it has none yet."""
        table = self._tables.get(tenant)
        if table is not None:
            return table
        row = self._conn.execute("SELECT tag FROM memory_tenants WHERE tenant = ?", (tenant,)).fetchone()
        if row is None:
            if not create:
                return None
            row = (self._conn.execute("INSERT INTO memory_tenants (tenant) VALUES (?)", (tenant,)).lastrowid,)
        table = f"memory_fts_{int(row[0])}"
        if create:
            self._conn.execute(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5 (tokens, tokenize = 'unicode61')"
            )
            self._conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {table}_vocab USING fts5vocab ({table}, 'row')")
        self._tables[tenant] = table
        return table

    def _move_shared_index(self) -> None:
        """Move the rows of a shared FTS table (one for all tenants) into per-tenant tables."""
        shared = self._conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'memory_fts' AND type = 'table'"
        ).fetchone()
        if shared is None:
            return
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            tenants = [t for (t,) in self._conn.execute("SELECT DISTINCT tenant FROM memory_fts").fetchall()]
            for tenant in tenants:
                table = self._table(tenant, create=True)
                self._conn.execute(
                    f"INSERT INTO {table} (rowid, tokens) SELECT rowid, tokens FROM memory_fts WHERE tenant = ?",
                    (tenant,),
                )
            self._conn.execute("DROP TABLE IF EXISTS memory_fts_vocab")
            self._conn.execute("DROP TABLE memory_fts")
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            self._tables.clear()
            raise

    def put(self, records: Sequence[MemoryRecord], *, tokens: Sequence[Sequence[str]]) -> None:
        with self._lock:
            self._sizes.clear()
            for record in records:
                self._session_stats.pop((record.tenant, record.session_id or ""), None)
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for record, terms in zip(records, tokens, strict=True):
                    table = self._table(record.tenant, create=True)
                    row = self._conn.execute(
                        "SELECT seq FROM memory_records WHERE tenant = ? AND memory_id = ?",
                        (record.tenant, record.memory_id),
                    ).fetchone()
                    values = (record.session_id, record.position, record.subject, encode_record(record))
                    if row is None:
                        cur = self._conn.execute(
                            "INSERT INTO memory_records (tenant, memory_id, session_id, position, subject, data)"
                            " VALUES (?, ?, ?, ?, ?, ?)",
                            (record.tenant, record.memory_id, *values),
                        )
                        seq = cur.lastrowid
                    else:
                        seq = row[0]
                        self._conn.execute(
                            "UPDATE memory_records SET session_id = ?, position = ?, subject = ?, data = ?"
                            " WHERE seq = ?",
                            (*values, seq),
                        )
                        self._conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (seq,))
                    self._conn.execute(f"INSERT INTO {table} (rowid, tokens) VALUES (?, ?)", (seq, " ".join(terms)))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                self._tables.clear()  # a table created in the rolled-back transaction is gone
                raise

    def get(self, tenant: str, memory_ids: Sequence[str]) -> list[MemoryRecord]:
        if not memory_ids:
            return []
        found: dict[str, MemoryRecord] = {}
        with self._lock:
            for start in range(0, len(memory_ids), 500):
                chunk = list(memory_ids[start : start + 500])
                marks = ",".join("?" * len(chunk))
                for memory_id, data in self._conn.execute(
                    f"SELECT memory_id, data FROM memory_records WHERE tenant = ? AND memory_id IN ({marks})",
                    (tenant, *chunk),
                ):
                    found[memory_id] = decode_record(data)
        return [found[i] for i in memory_ids if i in found]

    def scan(self, tenant: str) -> Iterator[MemoryRecord]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT data FROM memory_records WHERE tenant = ? ORDER BY seq", (tenant,)
            ).fetchall()
        return (decode_record(data) for (data,) in rows)

    def count(self, tenant: str) -> int:
        with self._lock:
            (n,) = self._conn.execute("SELECT count(*) FROM memory_records WHERE tenant = ?", (tenant,)).fetchone()
        return int(n)

    def delete(self, tenant: str, memory_ids: Sequence[str]) -> int:
        removed = 0
        with self._lock:
            self._sizes.clear()
            self._session_stats.clear()
            table = self._table(tenant, create=False)
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for memory_id in memory_ids:
                    row = self._conn.execute(
                        "SELECT seq FROM memory_records WHERE tenant = ? AND memory_id = ?", (tenant, memory_id)
                    ).fetchone()
                    if row is None:
                        continue
                    if table is not None:
                        self._conn.execute(f"DELETE FROM {table} WHERE rowid = ?", row)
                    self._conn.execute("DELETE FROM memory_records WHERE seq = ?", row)
                    self._conn.execute(
                        "DELETE FROM memory_vectors WHERE tenant = ? AND memory_id = ?", (tenant, memory_id)
                    )
                    removed += 1
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return removed

    def by_subject(self, tenant: str, subject: str) -> list[MemoryRecord]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT data FROM memory_records WHERE tenant = ? AND subject = ? ORDER BY seq", (tenant, subject)
            ).fetchall()
        return [decode_record(data) for (data,) in rows]

    def neighbours(self, tenant: str, record: MemoryRecord, *, span: int) -> list[MemoryRecord]:
        if record.session_id is None:
            return []
        with self._lock:
            rows = self._conn.execute(
                "SELECT data FROM memory_records WHERE tenant = ? AND session_id = ? AND position BETWEEN ? AND ?"
                " AND position != ? ORDER BY position",
                (tenant, record.session_id, record.position - span, record.position + span, record.position),
            ).fetchall()
        return [decode_record(data) for (data,) in rows]

    def keyword_search(
        self, tenant: str, tokens: Sequence[str], *, limit: int, session_id: str | None = None
    ) -> list[tuple[str, float]]:
        with self._lock:
            table = self._table(tenant, create=False)
            if table is None:
                return []
            if session_id is not None:
                return self._session_search(tenant, session_id, table, list(dict.fromkeys(tokens)), limit)
            terms, common = self._selective(tenant, table, list(dict.fromkeys(tokens)))
            if not terms:
                return []
            query = " OR ".join(_fts_term(t) for t in terms)
            sql = (
                f"SELECT r.memory_id, -bm25({table}) AS score FROM {table}"
                f" JOIN memory_records r ON r.seq = {table}.rowid WHERE {table} MATCH ?"
            )
            params: list[object] = [query]
            if common:
                # the window's first row: the COMMON_WINDOW-th newest of the tenant (or of the session)
                scope = "tenant = ?" + (" AND session_id = ?" if session_id is not None else "")
                sql += (
                    f" AND {table}.rowid >= COALESCE((SELECT seq FROM memory_records WHERE {scope}"
                    " ORDER BY seq DESC LIMIT 1 OFFSET ?), 0)"
                )
                params += [tenant, *([session_id] if session_id is not None else []), COMMON_WINDOW - 1]
            if session_id is not None:
                sql += " AND r.session_id = ?"
                params.append(session_id)
            sql += f" ORDER BY bm25({table}) LIMIT ?"
            params.append(limit)
            return [(memory_id, float(score)) for memory_id, score in self._conn.execute(sql, params)]

    def _session_search(
        self, tenant: str, session_id: str, table: str, terms: list[str], limit: int
    ) -> list[tuple[str, float]]:
        """BM25 over one session's memories, with that session's term statistics.

        FTS5's own ``bm25()`` weighs terms by the whole table (the tenant), so what other sessions
        say would change how this session's memories rank; a recall scoped to a session is scored
        here instead, with FTS5's formula (k1 1.2, b 0.75) and the session's counts.
        """
        if not terms:
            return []
        count, total, df = self._session_counts(tenant, session_id, table)
        if not count:
            return []
        average = total / count
        idf = {t: max(math.log((count - df.get(t, 0) + 0.5) / (df.get(t, 0) + 0.5)), 1e-6) for t in terms}
        rows = self._conn.execute(
            f"SELECT r.memory_id, f.tokens FROM {table} f JOIN memory_records r ON r.seq = f.rowid"
            " WHERE f.tokens MATCH ? AND r.tenant = ? AND r.session_id = ? ORDER BY r.seq",
            (" OR ".join(_fts_term(t) for t in terms), tenant, session_id),
        ).fetchall()
        scored: list[tuple[str, float]] = []
        for memory_id, text in rows:
            words = text.split()
            frequency = Counter(w for w in words if w in idf)
            norm = _K1 * (1 - _B + _B * len(words) / average)
            score = sum(idf[t] * f * (_K1 + 1) / (f + norm) for t, f in frequency.items())
            if score > 0:
                scored.append((memory_id, score))
        scored.sort(key=lambda pair: -pair[1])  # stable: equal scores stay in the order they were written
        return scored[:limit]

    def _session_counts(self, tenant: str, session_id: str, table: str) -> tuple[int, int, dict[str, int]]:
        """Memories of the session, their total token count, and each token's document frequency."""
        key = (tenant, session_id)
        counts = self._session_stats.get(key)
        if counts is None:
            documents = 0
            total = 0
            df: Counter[str] = Counter()
            for (text,) in self._conn.execute(
                f"SELECT f.tokens FROM {table} f JOIN memory_records r ON r.seq = f.rowid"
                " WHERE r.tenant = ? AND r.session_id = ?",
                key,
            ):
                words = text.split()
                documents += 1
                total += len(words)
                df.update(set(words))
            counts = self._session_stats[key] = (documents, total, dict(df))
        return counts

    def _selective(self, tenant: str, table: str, terms: list[str]) -> tuple[list[str], bool]:
        """The terms worth matching in the tenant's memories, and whether they are all common."""
        if not terms:
            return terms, False
        with self._lock:
            size = self._sizes.get(tenant)
            if size is None:
                (size,) = self._conn.execute(
                    "SELECT count(*) FROM memory_records WHERE tenant = ?", (tenant,)
                ).fetchone()
                self._sizes[tenant] = size = int(size)
            marks = ",".join("?" * len(terms))
            df = dict(self._conn.execute(f"SELECT term, doc FROM {table}_vocab WHERE term IN ({marks})", terms))
        known = sorted((t for t in terms if t in df), key=lambda t: df[t])
        limit = max(1000, COMMON_SHARE * size)
        rare = [t for t in known if df[t] <= limit]
        return (rare, False) if rare else (known[:2], True)

    def put_vectors(self, tenant: str, model: str, vectors: dict[str, list[float]]) -> None:
        with self._lock:
            self._conn.executemany(
                "INSERT OR REPLACE INTO memory_vectors (tenant, model, memory_id, vector) VALUES (?, ?, ?, ?)",
                [(tenant, model, i, struct.pack(f"<{len(v)}f", *v)) for i, v in vectors.items()],
            )

    def vectors(self, tenant: str, model: str) -> dict[str, list[float]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT memory_id, vector FROM memory_vectors WHERE tenant = ? AND model = ?", (tenant, model)
            ).fetchall()
        return {i: list(struct.unpack(f"<{len(blob) // 4}f", blob)) for i, blob in rows}

    @property
    def ranks_vectors(self) -> bool:
        return False

    def vector_search(
        self, tenant: str, model: str, vector: Sequence[float], *, limit: int, session_id: str | None = None
    ) -> list[tuple[str, float]]:
        raise NotImplementedError("SQLiteMemoryBackend ranks no vectors itself; LongTermMemory scans them.")

    def close(self) -> None:
        if self._owns:
            with self._lock:
                self._conn.close()

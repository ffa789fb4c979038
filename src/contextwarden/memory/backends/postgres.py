"""Long-term memory in Postgres: records as JSONB rows, keyword search by full-text search, vectors as arrays.

The tsvector is built from the library's own tokens (CJK bigrams included) with the ``simple``
configuration, so Postgres neither stems nor drops them again; ranking is ``ts_rank`` (a tsvector
made from an array has no positions, and ``ts_rank_cd`` ranks every match of one at 0).
Vectors are ``real[]`` columns scanned in this process; where the server has the pgvector
extension (``pgvector=True``, or ``None``: use it when ``CREATE EXTENSION vector`` succeeds) they
are also kept in a ``vector`` column and `vector_search` ranks them in the database, so recall
reads only the nearest rows. Every row carries its tenant, and every statement filters by it.
Extra ``postgres``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from .._codec import decode_record, encode_record
from ..records import MemoryRecord

__all__ = ["PostgresMemoryBackend"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS {p}records (
    seq BIGSERIAL,
    tenant TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    session_id TEXT,
    position INTEGER NOT NULL,
    subject TEXT,
    data JSONB NOT NULL,
    tokens TSVECTOR NOT NULL,
    PRIMARY KEY (tenant, memory_id)
);
CREATE INDEX IF NOT EXISTS {i}records_tokens ON {p}records USING GIN (tokens);
CREATE INDEX IF NOT EXISTS {i}records_subject ON {p}records (tenant, subject);
CREATE INDEX IF NOT EXISTS {i}records_position ON {p}records (tenant, session_id, position);
CREATE TABLE IF NOT EXISTS {p}vectors (
    tenant TEXT NOT NULL,
    model TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    vector REAL[] NOT NULL,
    PRIMARY KEY (tenant, model, memory_id)
);
"""
_PGVECTOR_SCHEMA = """
CREATE TABLE IF NOT EXISTS {p}embeddings (
    tenant TEXT NOT NULL,
    model TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (tenant, model, memory_id)
);
"""


class PostgresMemoryBackend:
    """Memories in Postgres, tenant-scoped, with full-text keyword search.

    Args:
        conninfo: A libpq connection string or URL (ignored when ``connection`` is given).
        connection: An existing psycopg connection (autocommit) to use; not closed by `close`.
        prefix: Table name prefix (a schema-qualified prefix such as ``"app.memory_"`` works too).
        pgvector: Search vectors in the database with pgvector: True requires the extension
            (`ConfigError` without it), None uses it when the server has it, False never does.
    """

    def __init__(
        self, conninfo: str = "", *, connection: Any = None, prefix: str = "memory_", pgvector: bool | None = None
    ) -> None:
        try:
            import psycopg
        except ImportError as exc:
            raise ImportError("PostgresMemoryBackend needs psycopg: pip install 'contextwarden[postgres]'") from exc
        self._owns = connection is None
        self._conn = connection or psycopg.connect(conninfo, autocommit=True)
        self._p = prefix
        self._lock = threading.RLock()
        with self._lock:
            self._conn.execute(self._sql(_SCHEMA))
        self.pgvector = pgvector is not False and self._enable_pgvector(required=pgvector is True)
        """True when vectors are searched in the database (pgvector)."""

    def _enable_pgvector(self, *, required: bool) -> bool:
        import psycopg

        try:
            with self._lock, self._conn.transaction():
                self._conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                self._conn.execute(self._sql(_PGVECTOR_SCHEMA))
        except psycopg.Error as exc:
            if required:
                from ...exceptions import ConfigError

                raise ConfigError(
                    f"pgvector=True but the Postgres server cannot enable the `vector` extension ({exc}); install "
                    "pgvector on the server (or run the `pgserver` package's Postgres), or pass pgvector=None.",
                    key="pgvector",
                ) from exc
            return False
        return True

    def _sql(self, text: str) -> Any:
        # Index names cannot be schema-qualified: they live in their table's schema anyway.
        return text.format(p=self._p, i=self._p.rsplit(".", 1)[-1])

    def put(self, records: Sequence[MemoryRecord], *, tokens: Sequence[Sequence[str]]) -> None:
        rows = [
            (
                r.tenant,
                r.memory_id,
                r.session_id,
                r.position,
                r.subject,
                encode_record(r),
                list(dict.fromkeys(t)),
            )
            for r, t in zip(records, tokens, strict=True)
        ]
        with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
            cur.executemany(
                self._sql(
                    "INSERT INTO {p}records (tenant, memory_id, session_id, position, subject, data, tokens)"
                    " VALUES (%s, %s, %s, %s, %s, %s::jsonb, array_to_tsvector(%s::text[]))"
                    " ON CONFLICT (tenant, memory_id) DO UPDATE SET session_id = EXCLUDED.session_id,"
                    " position = EXCLUDED.position, subject = EXCLUDED.subject, data = EXCLUDED.data,"
                    " tokens = EXCLUDED.tokens"
                ),
                rows,
            )

    def get(self, tenant: str, memory_ids: Sequence[str]) -> list[MemoryRecord]:
        if not memory_ids:
            return []
        with self._lock:
            rows = self._conn.execute(
                self._sql("SELECT memory_id, data::text FROM {p}records WHERE tenant = %s AND memory_id = ANY(%s)"),
                (tenant, list(memory_ids)),
            ).fetchall()
        found = {memory_id: decode_record(data) for memory_id, data in rows}
        return [found[i] for i in memory_ids if i in found]

    def scan(self, tenant: str) -> Iterator[MemoryRecord]:
        with self._lock:
            rows = self._conn.execute(
                self._sql("SELECT data::text FROM {p}records WHERE tenant = %s ORDER BY seq"), (tenant,)
            ).fetchall()
        return (decode_record(data) for (data,) in rows)

    def count(self, tenant: str) -> int:
        with self._lock:
            row = self._conn.execute(
                self._sql("SELECT count(*) FROM {p}records WHERE tenant = %s"), (tenant,)
            ).fetchone()
        return int(row[0]) if row else 0

    def delete(self, tenant: str, memory_ids: Sequence[str]) -> int:
        ids = list(memory_ids)
        with self._lock, self._conn.transaction():
            cur = self._conn.execute(
                self._sql("DELETE FROM {p}records WHERE tenant = %s AND memory_id = ANY(%s)"), (tenant, ids)
            )
            self._conn.execute(
                self._sql("DELETE FROM {p}vectors WHERE tenant = %s AND memory_id = ANY(%s)"), (tenant, ids)
            )
            if self.pgvector:
                self._conn.execute(
                    self._sql("DELETE FROM {p}embeddings WHERE tenant = %s AND memory_id = ANY(%s)"), (tenant, ids)
                )
            return int(cur.rowcount)

    def by_subject(self, tenant: str, subject: str) -> list[MemoryRecord]:
        with self._lock:
            rows = self._conn.execute(
                self._sql("SELECT data::text FROM {p}records WHERE tenant = %s AND subject = %s ORDER BY seq"),
                (tenant, subject),
            ).fetchall()
        return [decode_record(data) for (data,) in rows]

    def neighbours(self, tenant: str, record: MemoryRecord, *, span: int) -> list[MemoryRecord]:
        if record.session_id is None:
            return []
        with self._lock:
            rows = self._conn.execute(
                self._sql(
                    "SELECT data::text FROM {p}records WHERE tenant = %s AND session_id = %s"
                    " AND position BETWEEN %s AND %s AND position <> %s ORDER BY position"
                ),
                (tenant, record.session_id, record.position - span, record.position + span, record.position),
            ).fetchall()
        return [decode_record(data) for (data,) in rows]

    def keyword_search(
        self, tenant: str, tokens: Sequence[str], *, limit: int, session_id: str | None = None
    ) -> list[tuple[str, float]]:
        terms = list(dict.fromkeys(tokens))
        if not terms:
            return []
        query = " | ".join("'" + t.replace("'", "''").replace("\\", "\\\\") + "'" for t in terms)
        sql = (
            "SELECT memory_id, ts_rank(tokens, q) AS score FROM {p}records, to_tsquery('simple', %s) q"
            " WHERE tenant = %s AND tokens @@ q"
        )
        params: list[object] = [query, tenant]
        if session_id is not None:
            sql += " AND session_id = %s"
            params.append(session_id)
        sql += " ORDER BY score DESC, seq LIMIT %s"
        params.append(limit)
        with self._lock:
            rows = self._conn.execute(self._sql(sql), params).fetchall()
        return [(memory_id, float(score)) for memory_id, score in rows]

    def put_vectors(self, tenant: str, model: str, vectors: dict[str, list[float]]) -> None:
        with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
            cur.executemany(
                self._sql(
                    "INSERT INTO {p}vectors (tenant, model, memory_id, vector) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (tenant, model, memory_id) DO UPDATE SET vector = EXCLUDED.vector"
                ),
                [(tenant, model, i, v) for i, v in vectors.items()],
            )
            if self.pgvector:
                cur.executemany(
                    self._sql(
                        "INSERT INTO {p}embeddings (tenant, model, memory_id, embedding)"
                        " VALUES (%s, %s, %s, %s::vector)"
                        " ON CONFLICT (tenant, model, memory_id) DO UPDATE SET embedding = EXCLUDED.embedding"
                    ),
                    [(tenant, model, i, _literal(v)) for i, v in vectors.items()],
                )

    @property
    def ranks_vectors(self) -> bool:
        return self.pgvector

    def vector_search(
        self, tenant: str, model: str, vector: Sequence[float], *, limit: int, session_id: str | None = None
    ) -> list[tuple[str, float]]:
        if not self.pgvector:
            raise NotImplementedError("this Postgres server has no pgvector; LongTermMemory scans vectors in process.")
        sql = "SELECT e.memory_id, 1 - (e.embedding <=> %s::vector) AS similarity FROM {p}embeddings e"
        params: list[object] = [_literal(vector)]
        if session_id is not None:
            sql += " JOIN {p}records r ON r.tenant = e.tenant AND r.memory_id = e.memory_id AND r.session_id = %s"
            params.append(session_id)
        sql += " WHERE e.tenant = %s AND e.model = %s ORDER BY e.embedding <=> %s::vector LIMIT %s"
        params += [tenant, model, _literal(vector), limit]
        with self._lock:
            rows = self._conn.execute(self._sql(sql), params).fetchall()
        return [(memory_id, float(similarity)) for memory_id, similarity in rows]

    def vectors(self, tenant: str, model: str) -> dict[str, list[float]]:
        with self._lock:
            rows = self._conn.execute(
                self._sql("SELECT memory_id, vector FROM {p}vectors WHERE tenant = %s AND model = %s"),
                (tenant, model),
            ).fetchall()
        return {memory_id: [float(x) for x in vector] for memory_id, vector in rows}

    def close(self) -> None:
        if self._owns:
            with self._lock:
                self._conn.close()


def _literal(vector: Sequence[float]) -> str:
    """A vector as pgvector's text form, ``[x,y,...]``."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"

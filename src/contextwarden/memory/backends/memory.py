"""Long-term memory held in this process (keyword search with bm25s); lost when the process ends."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from ..keyword import KeywordIndex
from ..records import MemoryRecord

__all__ = ["InMemoryBackend"]


class InMemoryBackend:
    """Records in dicts, one BM25 index per tenant."""

    def __init__(self) -> None:
        self._records: dict[str, dict[str, MemoryRecord]] = {}
        self._indexes: dict[str, KeywordIndex] = {}
        self._vectors: dict[tuple[str, str], dict[str, list[float]]] = {}
        self._positions: dict[tuple[str, str], dict[int, set[str]]] = {}
        self._lock = threading.RLock()

    def put(self, records: Sequence[MemoryRecord], *, tokens: Sequence[Sequence[str]]) -> None:
        with self._lock:
            for record, terms in zip(records, tokens, strict=True):
                old = self._records.setdefault(record.tenant, {}).get(record.memory_id)
                if old is not None:
                    self._unplace(old)
                self._records[record.tenant][record.memory_id] = record
                if record.session_id is not None:
                    key = (record.tenant, record.session_id)
                    self._positions.setdefault(key, {}).setdefault(record.position, set()).add(record.memory_id)
                index = self._indexes.get(record.tenant)
                if index is None:
                    index = self._indexes[record.tenant] = KeywordIndex()
                index.add(record.memory_id, terms, session_id=record.session_id)

    def _unplace(self, record: MemoryRecord) -> None:
        if record.session_id is not None:
            self._positions.get((record.tenant, record.session_id), {}).get(record.position, set()).discard(
                record.memory_id
            )

    def get(self, tenant: str, memory_ids: Sequence[str]) -> list[MemoryRecord]:
        with self._lock:
            table = self._records.get(tenant, {})
            return [table[i] for i in memory_ids if i in table]

    def scan(self, tenant: str) -> Iterator[MemoryRecord]:
        with self._lock:
            records = list(self._records.get(tenant, {}).values())
        return iter(records)

    def count(self, tenant: str) -> int:
        with self._lock:
            return len(self._records.get(tenant, {}))

    def delete(self, tenant: str, memory_ids: Sequence[str]) -> int:
        with self._lock:
            table = self._records.get(tenant, {})
            gone = []
            for memory_id in memory_ids:
                record = table.pop(memory_id, None)
                if record is not None:
                    self._unplace(record)
                    gone.append(memory_id)
            if tenant in self._indexes:
                self._indexes[tenant].remove(gone)
            for (owner, _model), vectors in self._vectors.items():
                if owner == tenant:
                    for i in gone:
                        vectors.pop(i, None)
            return len(gone)

    def by_subject(self, tenant: str, subject: str) -> list[MemoryRecord]:
        with self._lock:
            return [r for r in self._records.get(tenant, {}).values() if r.subject == subject]

    def neighbours(self, tenant: str, record: MemoryRecord, *, span: int) -> list[MemoryRecord]:
        if record.session_id is None:
            return []
        with self._lock:
            places = self._positions.get((tenant, record.session_id), {})
            table = self._records.get(tenant, {})
            return [
                table[i]
                for position in range(record.position - span, record.position + span + 1)
                if position != record.position
                for i in sorted(places.get(position, ()))
                if i in table
            ]

    def keyword_search(
        self, tenant: str, tokens: Sequence[str], *, limit: int, session_id: str | None = None
    ) -> list[tuple[str, float]]:
        with self._lock:
            index = self._indexes.get(tenant)
        if index is None:
            return []
        return index.search(tokens, limit=limit, session_id=session_id)

    def put_vectors(self, tenant: str, model: str, vectors: dict[str, list[float]]) -> None:
        with self._lock:
            self._vectors.setdefault((tenant, model), {}).update(vectors)

    def vectors(self, tenant: str, model: str) -> dict[str, list[float]]:
        with self._lock:
            return dict(self._vectors.get((tenant, model), {}))

    @property
    def ranks_vectors(self) -> bool:
        return False

    def vector_search(
        self, tenant: str, model: str, vector: Sequence[float], *, limit: int, session_id: str | None = None
    ) -> list[tuple[str, float]]:
        raise NotImplementedError("InMemoryBackend ranks no vectors itself; LongTermMemory scans them.")

    def close(self) -> None:
        return None

"""The contract every memory backend meets: `MemoryBackend`.

A backend persists `MemoryRecord` values and their vectors, scoped by tenant, and answers keyword
queries over them (given as already tokenized terms, so every backend sees the same CJK-aware
tokens). Ranking, fusion and scoring happen above it, in `LongTermMemory`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from ..records import MemoryRecord

__all__ = ["MemoryBackend"]


class MemoryBackend(Protocol):
    """Persistence and keyword search for long-term memory, tenant-scoped.

    Implementations must be safe to call from several threads.
    """

    def put(self, records: Sequence[MemoryRecord], *, tokens: Sequence[Sequence[str]]) -> None:
        """Insert or replace ``records`` (by tenant and memory id); ``tokens`` are their keyword tokens."""
        ...

    def get(self, tenant: str, memory_ids: Sequence[str]) -> list[MemoryRecord]:
        """The records with these ids that exist, in the order asked."""
        ...

    def scan(self, tenant: str) -> Iterator[MemoryRecord]:
        """Every record of the tenant, in insertion order."""
        ...

    def count(self, tenant: str) -> int:
        """How many records the tenant has."""
        ...

    def delete(self, tenant: str, memory_ids: Sequence[str]) -> int:
        """Remove these records and their vectors; returns how many existed."""
        ...

    def by_subject(self, tenant: str, subject: str) -> list[MemoryRecord]:
        """The tenant's records with this subject key, oldest first."""
        ...

    def neighbours(self, tenant: str, record: MemoryRecord, *, span: int) -> list[MemoryRecord]:
        """Records of the record's session (none without one) at another position within ``span`` of its."""
        ...

    def keyword_search(
        self, tenant: str, tokens: Sequence[str], *, limit: int, session_id: str | None = None
    ) -> list[tuple[str, float]]:
        """The best ``limit`` (memory id, BM25 score) pairs for the query tokens, best first."""
        ...

    def put_vectors(self, tenant: str, model: str, vectors: dict[str, list[float]]) -> None:
        """Store vectors of memories made by embedder ``model``."""
        ...

    def vectors(self, tenant: str, model: str) -> dict[str, list[float]]:
        """Every stored vector of the tenant made by ``model``."""
        ...

    @property
    def ranks_vectors(self) -> bool:
        """True when `vector_search` ranks vectors in the backend; otherwise `LongTermMemory` scans
        the vectors of `vectors` in this process."""
        ...

    def vector_search(
        self, tenant: str, model: str, vector: Sequence[float], *, limit: int, session_id: str | None = None
    ) -> list[tuple[str, float]]:
        """The ``limit`` stored vectors of ``model`` nearest to ``vector``: (memory id, cosine similarity), best first.

        Only for a backend whose `ranks_vectors` is True; the others raise `NotImplementedError`.
        """
        ...

    def close(self) -> None:
        """Release connections (a no-op for in-process backends)."""
        ...

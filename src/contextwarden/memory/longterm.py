"""Long-term memory: persistent records, hybrid retrieval (BM25 + dense, fused by RRF), scored recall."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from ..exceptions import EmbedderError, MemoryQueryError
from ._text import tokenize
from .backends.base import MemoryBackend
from .checks import check_limit, check_now, check_record
from .embedders import Embedder, check_vectors
from .fusion import dedup_key, reciprocal_rank_fusion, score_fusion
from .importance import HeuristicImportance, ImportanceScorer
from .priors import relevance_priors
from .records import Hit, MemoryRecord, Source
from .scoring import ScoreWeights
from .status import MemoryStatus, RetrievalMode

if TYPE_CHECKING:
    import numpy as np

__all__ = ["MAX_QUERY_CHARS", "TASK_GROUP_WEIGHT", "LongTermMemory"]

logger = logging.getLogger(__name__)

TASK_GROUP_WEIGHT = 1.5
"""`LongTermMemory.group_weight` of a session's default memory. Its groups are tasks, and a request
about a task ("the fix from the beginning of this session") needs the task's outputs, which share few
words with it: on the demo this lifts the planted facts in view from 70 to 72 of 80 (8 seeds)."""

MAX_QUERY_CHARS = 16_000
"""The longest recall query accepted; longer ones are a `MemoryQueryError` (recall the last part instead)."""


class LongTermMemory:
    """Persistent memories of one tenant with scored hybrid recall.

    Args:
        backend: Where records live; in this process by default.
        tenant: The tenant every read and write is scoped to.
        embedder: Dense retrieval; ``None`` for keyword-only recall.
        weights: α, β, γ of the score and the recency half-life.
        importance: Rates each new memory that does not bring its own importance.
        neighbours: Adjacent positions of the same session added after each hit (0: none).
        neighbour_factor: A neighbour's score as a share of its hit's score.
        candidates: How many ids each retriever contributes to fusion.
        fusion: ``score``: each retriever's scores divided by its best, averaged with weights;
            ``rrf``: reciprocal rank fusion.
        dense_weight: The dense retriever's weight in score fusion (keyword: 1).
        group_weight: Memories of a group (a conversation session, a compaction round) whose best
            members are relevant gain this share of their group's relevance (0: off).
        speaker_weight: When the query names exactly one speaker of the candidates ("What did Ann
            adopt?"), that speaker's memories gain this share of their relevance (0: off).
        question_weight: A memory whose text only asks (ends with a question mark) loses this
            share of its relevance: the answer beside it states the facts (0: off).
        rrf_k: The RRF constant.
        clock: Seconds since the epoch (for ``now`` and new records).
    """

    def __init__(
        self,
        backend: MemoryBackend | None = None,
        *,
        tenant: str = "default",
        embedder: Embedder | None = None,
        weights: ScoreWeights | None = None,
        importance: ImportanceScorer | None = None,
        neighbours: int = 1,
        neighbour_factor: float = 0.5,
        candidates: int = 100,
        fusion: Literal["score", "rrf"] = "score",
        dense_weight: float = 1.0,
        group_weight: float = 0.6,
        speaker_weight: float = 0.25,
        question_weight: float = 0.1,
        rrf_k: int = 60,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if backend is None:
            from .backends.memory import InMemoryBackend

            backend = InMemoryBackend()
        self.backend = backend
        self.tenant = tenant
        self.embedder = embedder
        self.weights = weights or ScoreWeights()
        self.importance: ImportanceScorer = importance or HeuristicImportance()
        self.neighbours = neighbours
        self.neighbour_factor = neighbour_factor
        self.candidates = candidates
        self.rrf_k = rrf_k
        self.fusion = fusion
        self.dense_weight = dense_weight
        self.group_weight = group_weight
        self.speaker_weight = speaker_weight
        self.question_weight = question_weight
        self.clock = clock
        self._lock = threading.RLock()
        self._matrix: np.ndarray | None = None
        self._matrix_ids: list[str] = []
        self._vectors: dict[str, list[float]] | None = None
        self._pending: list[MemoryRecord] = []
        self._speakers: set[str] = set()
        self._name_tokens: set[str] = set()
        self._mode: RetrievalMode = "hybrid" if embedder is not None else "keyword"
        self._reason: str | None = None if embedder is not None else "no embedder configured"

    # --- writes ------------------------------------------------------------------------
    def add(self, record: MemoryRecord | str, **fields: object) -> MemoryRecord:
        """Store one memory (a record, or text plus `MemoryRecord` fields) and return it as stored.

        A memory with a ``subject`` supersedes the tenant's current memories with that subject;
        ``supersedes`` names others explicitly. Superseded memories are kept and marked.
        """
        return self.add_many([record if isinstance(record, MemoryRecord) else MemoryRecord(text=record, **fields)])[0]  # type: ignore[arg-type]

    def add_many(self, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
        """Store several memories in one write (one embedding batch)."""
        now = self.clock()
        prepared: list[MemoryRecord] = []
        for record in records:
            check_record(record)
            changes: dict[str, object] = {"tenant": self.tenant}
            if record.created_at == 0.0:
                changes["created_at"] = now
            if record.importance is None:
                changes["importance"] = self.importance(record.text, role=record.role)
            prepared.append(dataclasses.replace(record, **changes))  # type: ignore[arg-type]
        with self._lock:
            self._learn_speakers(prepared)
            self.backend.put(prepared, tokens=[self._index_tokens(r) for r in prepared])
            for record in prepared:
                self._supersede(record)
            self._embed([*self._pending, *prepared])
        return prepared

    def _supersede(self, record: MemoryRecord) -> None:
        older: list[MemoryRecord] = []
        if record.subject is not None:
            older += [
                r for r in self.backend.by_subject(self.tenant, record.subject) if r.memory_id != record.memory_id
            ]
        if record.supersedes:
            older += self.backend.get(self.tenant, list(record.supersedes))
        marked = [dataclasses.replace(r, superseded_by=record.memory_id) for r in older if r.superseded_by is None]
        if marked:
            self.backend.put(marked, tokens=[self._index_tokens(r) for r in marked])

    def _learn_speakers(self, records: Sequence[MemoryRecord]) -> None:
        # A tool's name is a word of its outputs ("search", "bash"), not someone they address.
        for record in records:
            if record.speaker and record.role != "tool" and record.speaker not in self._speakers:
                self._speakers.add(record.speaker)
                self._name_tokens.update(tokenize(record.speaker))

    def _index_tokens(self, record: MemoryRecord) -> list[str]:
        # Who said it and when are searched with the words: "What did Ann do in May 2023?" A speaker's
        # name within the words mostly addresses them ("Thanks, Ann!", in the turn or its neighbours'
        # context): searched, Bob's short replies to Ann would match "What does Ann do?" better than
        # her own turns. Who a memory is about is the speaker's field and the speaker prior's job.
        meta = record.metadata
        words = [t for t in tokenize(f"{record.text} {meta.get('keywords', '')}") if t not in self._name_tokens]
        return [*tokenize(record.speaker or ""), *words, *tokenize(meta.get("date", ""))]

    def _embed(self, records: Sequence[MemoryRecord]) -> None:
        if self.embedder is None or not records:
            return
        try:
            vectors = check_vectors(
                self.embedder.embed([_embed_text(r) for r in records]),
                count=len(records),
                dimension=self.embedder.dimension,
                name=self.embedder.name,
            )
        except EmbedderError as exc:
            self._pending = list({r.memory_id: r for r in records}.values())
            self._degrade(str(exc))
            return
        self._pending = []
        fresh = {r.memory_id: v for r, v in zip(records, vectors, strict=True)}
        self.backend.put_vectors(self.tenant, self.embedder.name, fresh)
        if self._vectors is not None:
            self._vectors.update(fresh)
            self._matrix = None

    def forget(self, memory_ids: Sequence[str]) -> int:
        """Delete these memories (and their vectors) for good; returns how many existed."""
        with self._lock:
            removed = self.backend.delete(self.tenant, list(memory_ids))
            if self._vectors is not None:
                for memory_id in memory_ids:
                    self._vectors.pop(memory_id, None)
                self._matrix = None
            self._pending = [r for r in self._pending if r.memory_id not in set(memory_ids)]
            return removed

    def forget_session(self, session_id: str) -> int:
        """Delete every memory of one session (when the session itself is deleted); returns how many."""
        with self._lock:
            ids = [r.memory_id for r in self.backend.scan(self.tenant) if r.session_id == session_id]
        return self.forget(ids) if ids else 0

    # --- reads -------------------------------------------------------------------------
    def recall(
        self,
        query: str,
        *,
        limit: int = 10,
        now: float | None = None,
        session_id: str | None = None,
        touch: bool = True,
    ) -> list[Hit]:
        """The best memories for ``query``: ``limit`` hits and their neighbours, best first.

        Args:
            query: The request to answer (text).
            limit: Hits found by retrieval (neighbours come on top of these).
            now: The query time for recency; the clock by default.
            session_id: Only memories of this session.
            touch: Record this recall as the hits' last access.

        Raises:
            MemoryQueryError: The query is not text, is empty, or is longer than `MAX_QUERY_CHARS`.
        """
        tokens = _check_query(query)
        limit = check_limit(limit)
        checked_now = check_now(now)
        now = self.clock() if checked_now is None else checked_now
        if session_id is not None and not isinstance(session_id, str):
            raise MemoryQueryError(
                f"recall session_id={session_id!r} is not valid: give a str or None.", field="session_id"
            )
        with self._lock:
            keyword = self.backend.keyword_search(self.tenant, tokens, limit=self.candidates, session_id=session_id)
            dense = self._dense_scores(query, session_id=session_id)
            if self.fusion == "rrf":
                rankings = [[i for i, _ in keyword]] + ([list(dense)] if dense is not None else [])
                fused = reciprocal_rank_fusion(rankings, k=self.rrf_k)
            else:
                fused = score_fusion(
                    [dict(keyword), *([dense] if dense is not None else [])], weights=[1.0, self.dense_weight]
                )
            keyword_ids = {i for i, _ in keyword}
            dense_ids = set(dense or ())
            records = self.backend.get(self.tenant, list(fused))
            self._learn_speakers(records)  # a memory opened on a stored tenant re-indexes touched hits alike
            fused = relevance_priors(
                records, fused, query, speaker_weight=self.speaker_weight, question_weight=self.question_weight
            )
            relevance = _group_boost(records, fused, self.group_weight)
            hits = [
                self._hit(r, relevance[r.memory_id], now, _source(r.memory_id, keyword_ids, dense_ids)) for r in records
            ]
            hits.sort(key=lambda h: -h.score)
            hits = _dedup(hits)[:limit]
            hits = self._expand(hits, now)
            if touch and hits:
                self.backend.put(
                    [dataclasses.replace(h.memory, last_access=now) for h in hits],
                    tokens=[self._index_tokens(h.memory) for h in hits],
                )
        return hits

    def _hit(self, record: MemoryRecord, relevance: float, now: float, source: Source) -> Hit:
        score, rec = self.weights.score(record, relevance=relevance, now=now)
        return Hit(
            memory=record,
            score=score,
            relevance=relevance,
            recency=rec,
            importance=record.importance or 0.0,
            source=source,
        )

    def _expand(self, hits: list[Hit], now: float) -> list[Hit]:
        """The hits plus their neighbours; a neighbour keeps the better of its own and its inherited score."""
        best = {h.memory.memory_id: h for h in hits}
        if self.neighbours <= 0:
            return hits
        for hit in hits:
            for record in self.backend.neighbours(self.tenant, hit.memory, span=self.neighbours):
                distance = abs(record.position - hit.memory.position)
                relevance = hit.relevance * self.neighbour_factor**distance
                current = best.get(record.memory_id)
                if current is not None and current.relevance >= relevance:
                    continue
                best[record.memory_id] = self._hit(record, relevance, now, "neighbour")
        return sorted(best.values(), key=lambda h: -h.score)

    def _dense_scores(self, query: str, *, session_id: str | None) -> dict[str, float] | None:
        import numpy as np

        if self.embedder is None:
            return None
        try:
            if self._pending:
                self._embed(self._pending)
            vector = check_vectors(
                self.embedder.embed([query]), count=1, dimension=self.embedder.dimension, name=self.embedder.name
            )[0]
        except EmbedderError as exc:
            self._degrade(str(exc))
            return None
        if self.backend.ranks_vectors:  # pgvector: the backend reads only the nearest rows
            found = self.backend.vector_search(
                self.tenant, self.embedder.name, vector, limit=self.candidates, session_id=session_id
            )
            self._mode, self._reason = ("keyword", "memories await embedding") if self._pending else ("hybrid", None)
            return dict(found)
        matrix, ids = self._load_matrix()
        if not ids:
            return {}
        q = np.asarray(vector, dtype=np.float32)
        q /= float(np.linalg.norm(q)) or 1.0
        sims = matrix @ q
        if session_id is not None:
            wanted = {r.memory_id for r in self.backend.get(self.tenant, ids) if r.session_id == session_id}
            sims = np.where(np.fromiter((i in wanted for i in ids), dtype=bool, count=len(ids)), sims, -2.0)
        k = min(self.candidates, len(ids))
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top], kind="stable")]
        self._mode, self._reason = ("keyword", "memories await embedding") if self._pending else ("hybrid", None)
        return {ids[i]: float(sims[i]) for i in top if sims[i] > -2.0}

    def _load_matrix(self) -> tuple[np.ndarray, list[str]]:
        import numpy as np

        assert self.embedder is not None
        if self._vectors is None:
            self._vectors = self.backend.vectors(self.tenant, self.embedder.name)
            self._matrix = None
        if self._matrix is None:
            ids = list(self._vectors)
            # an empty tenant has no rows to infer the width from: reshape(0, -1) would raise
            width = self.embedder.dimension if not ids else -1
            matrix = np.asarray([self._vectors[i] for i in ids], dtype=np.float32).reshape(len(ids), width)
            if ids:
                norms = np.linalg.norm(matrix, axis=1, keepdims=True)
                matrix /= np.where(norms == 0, 1.0, norms)
            self._matrix, self._matrix_ids = matrix, ids
        return self._matrix, self._matrix_ids

    def _degrade(self, reason: str) -> None:
        logger.warning("memory: dense retrieval unavailable, recalling by keywords: %s", reason)
        self._mode, self._reason = "keyword", reason

    @property
    def retrieval(self) -> tuple[RetrievalMode, str | None]:
        """How the last recall ranked, and why it was keyword-only if it was (no backend call, unlike `status`)."""
        return self._mode, self._reason

    def status(self) -> MemoryStatus:
        """How the last recall ranked, and why it was keyword-only if it was."""
        return MemoryStatus(
            retrieval=self._mode,
            reason=self._reason,
            memories=self.backend.count(self.tenant),
            embedder=self.embedder.name if self.embedder is not None else None,
            pending_vectors=len(self._pending),
        )

    # --- async twins -------------------------------------------------------------------
    async def aadd(self, record: MemoryRecord | str, **fields: object) -> MemoryRecord:
        """`add` without blocking the event loop."""
        return await asyncio.to_thread(self.add, record, **fields)

    async def arecall(self, query: str, **kwargs: object) -> list[Hit]:
        """`recall` without blocking the event loop."""
        return await asyncio.to_thread(lambda: self.recall(query, **kwargs))  # type: ignore[arg-type]

    async def aforget(self, memory_ids: Sequence[str]) -> int:
        """`forget` without blocking the event loop."""
        return await asyncio.to_thread(self.forget, memory_ids)


def _embed_text(record: MemoryRecord) -> str:
    # Who said it is part of the meaning ("What did Ann adopt?" matches "Ann: I adopted a cat").
    text = f"{record.speaker}: {record.text}" if record.speaker else record.text
    keywords = record.metadata.get("keywords")
    return f"{text} {keywords}" if keywords else text


def _group_boost(records: Sequence[MemoryRecord], relevance: dict[str, float], weight: float) -> dict[str, float]:
    """Relevance raised by the relevance of the record's group: the mean of its three best candidates."""
    if weight <= 0:
        return relevance
    members: dict[tuple[str | None, str], list[float]] = {}
    for record in records:
        if record.group is not None:
            members.setdefault((record.session_id, record.group), []).append(relevance[record.memory_id])
    group_score = {key: sum(sorted(values)[-3:]) / len(sorted(values)[-3:]) for key, values in members.items()}
    out = dict(relevance)
    for record in records:
        if record.group is not None:
            boost = group_score[(record.session_id, record.group)]
            out[record.memory_id] = (relevance[record.memory_id] + weight * boost) / (1 + weight)
    return out


def _source(memory_id: str, keyword: set[str], dense: set[str]) -> Source:
    if memory_id in keyword and memory_id in dense:
        return "both"
    return "keyword" if memory_id in keyword else "dense"


def _dedup(hits: list[Hit]) -> list[Hit]:
    seen: set[str] = set()
    out: list[Hit] = []
    for hit in hits:
        key = dedup_key(hit.memory.text)
        if key in seen:
            continue
        seen.add(key)
        out.append(hit)
    return out


def _check_query(query: object) -> list[str]:
    if not isinstance(query, str):
        raise MemoryQueryError(
            f"A recall query must be text (str), got {type(query).__name__}; pass the request's text.", field="query"
        )
    if not query.strip():
        raise MemoryQueryError("The recall query is empty; pass the request's text.", field="query")
    if len(query) > MAX_QUERY_CHARS:
        raise MemoryQueryError(
            f"The recall query has {len(query)} characters, more than {MAX_QUERY_CHARS}; recall with the last"
            " part of the request instead.",
            field="query",
        )
    return tokenize(query)

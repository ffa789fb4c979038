"""An in-process BM25 index over tokenized memories, built with ``bm25s`` (extra ``memory``)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

__all__ = ["KeywordIndex"]


class KeywordIndex:
    """BM25 over documents given as token lists; rebuilt lazily on the first query after a change.

    bm25s builds an immutable sparse matrix, so additions and removals mark the index stale and
    the next query rebuilds it (a few milliseconds for a session's thousand turns).

    Args:
        k1: BM25 term-frequency saturation.
        b: BM25 length normalization.
    """

    def __init__(self, *, k1: float = 1.2, b: float = 0.75) -> None:
        try:
            import bm25s  # noqa: F401
        except ImportError as exc:
            raise ImportError("Keyword recall needs bm25s: pip install 'contextwarden[memory]'") from exc
        self.k1, self.b = k1, b
        self._docs: dict[str, tuple[str, ...]] = {}
        self._sessions: dict[str, str | None] = {}
        self._lock = threading.RLock()
        self._built: object | None = None
        self._ids: list[str] = []

    def __len__(self) -> int:
        return len(self._docs)

    def add(self, memory_id: str, tokens: Sequence[str], *, session_id: str | None = None) -> None:
        """Index (or re-index) one document."""
        terms = tuple(tokens)
        with self._lock:
            if (
                self._docs.get(memory_id) == terms
                and memory_id in self._sessions
                and self._sessions[memory_id] == session_id
            ):
                return  # unchanged (a recall touching its hits): the built index stays valid
            self._docs[memory_id] = terms
            self._sessions[memory_id] = session_id
            self._built = None

    def remove(self, memory_ids: Sequence[str]) -> None:
        """Drop documents (unknown ids are ignored)."""
        with self._lock:
            for memory_id in memory_ids:
                if self._docs.pop(memory_id, None) is not None:
                    self._sessions.pop(memory_id, None)
                    self._built = None

    def _build(self) -> tuple[object, list[str]]:
        import bm25s
        from bm25s.tokenization import Tokenized

        ids = list(self._docs)
        vocab: dict[str, int] = {}
        encoded = [[vocab.setdefault(t, len(vocab)) for t in self._docs[i]] for i in ids]
        retriever = bm25s.BM25(k1=self.k1, b=self.b)
        if ids:
            retriever.index(Tokenized(ids=encoded, vocab=vocab), show_progress=False)
        self._built, self._ids = retriever, ids
        return retriever, ids

    def search(self, tokens: Sequence[str], *, limit: int, session_id: str | None = None) -> list[tuple[str, float]]:
        """The best ``limit`` (id, score) pairs with a positive score, best first."""
        import numpy as np

        with self._lock:
            # bm25s divides by the mean document length: a corpus without a single token has none.
            if not tokens or not any(self._docs.values()):
                return []
            retriever, ids = (self._built, self._ids) if self._built is not None else self._build()
            known = [t for t in tokens if t in retriever.vocab_dict]  # type: ignore[attr-defined]
            if not known:
                return []
            scores = np.asarray(retriever.get_scores(known))  # type: ignore[attr-defined]
            if session_id is not None:
                mask = np.fromiter((self._sessions[i] == session_id for i in ids), dtype=bool, count=len(ids))
                scores = np.where(mask, scores, 0.0)
        k = min(limit, len(ids))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(ids[i], float(scores[i])) for i in top if scores[i] > 0]

"""What memory reports about itself: `MemoryStatus`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["MemoryStatus", "RetrievalMode"]

RetrievalMode = Literal["hybrid", "keyword"]
"""hybrid: keyword and dense retrieval fused; keyword: BM25 alone (no embedder, or it failed)."""


@dataclass(frozen=True, kw_only=True)
class MemoryStatus:
    """The state of a long-term memory after its last operation."""

    retrieval: RetrievalMode
    """How the last recall ranked (``keyword`` when the dense path was missing or failed)."""
    reason: str | None
    """Why retrieval is keyword-only, when it is (no embedder, the embedder's error)."""
    memories: int
    """Memories of the tenant."""
    embedder: str | None
    """The embedder's name, if one is configured."""
    pending_vectors: int
    """Memories stored without a vector because the embedder failed; embedded on a later write or recall."""

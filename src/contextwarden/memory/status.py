"""What memory reports about itself: `MemoryStatus`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["MemoryStatus", "RecallStatus", "RetrievalMode"]

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


@dataclass(frozen=True, kw_only=True)
class RecallStatus:
    """What a session's long-term memory did for the current view (`contextwarden.recall.SessionMemory`)."""

    retrieval: RetrievalMode
    """How the last recall ranked (``keyword`` when the dense path is missing or failed)."""
    reason: str | None
    """Why retrieval is keyword-only, when it is."""
    hits: int
    """Memories shown in the view."""
    tokens: int
    """Tokens of the recalled blocks in the view (the counter's)."""
    room: int
    """Tokens the memory may take for one request (its share of the effective budget)."""
    written: int
    """Memories written from this session so far."""
    pending: int
    """Memories waiting for a write that failed (tried again at the next compaction)."""
    error: str | None = None
    """The last failure of a recall or a write (the turn went on without it), or None."""

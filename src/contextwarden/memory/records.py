"""What memory holds: `MemoryRecord` (one memory with its provenance) and `Hit` (one recalled memory, scored)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Hit", "MemoryRecord", "Source", "new_memory_id"]

Source = Literal["keyword", "dense", "both", "neighbour", "short-term", "sensory"]
"""How a hit was found: by a retriever, both, as the neighbour of another hit, or in a recent tier."""


def new_memory_id() -> str:
    """A fresh memory id."""
    return f"mem_{uuid.uuid4().hex[:20]}"


@dataclass(frozen=True, kw_only=True)
class MemoryRecord:
    """One memory: a piece of text with where it came from and how much it matters."""

    text: str
    """The remembered text, as it is rendered back."""
    memory_id: str = field(default_factory=new_memory_id)
    """Unique within the tenant."""
    tenant: str = "default"
    """The tenant that owns the memory; no query crosses tenants."""
    session_id: str | None = None
    """The session the memory came from."""
    message_ids: tuple[str, ...] = ()
    """Provenance: the transcript messages the memory was made from."""
    created_at: float = 0.0
    """When the source was said (seconds since the epoch)."""
    last_access: float | None = None
    """When the memory was last recalled; ``None`` means never (recency then runs from `created_at`)."""
    importance: float | None = None
    """How much the memory matters, 0..1; ``None``: the memory's importance scorer rates it when it is added."""
    role: str | None = None
    """The role of the source message (user, assistant, tool)."""
    speaker: str | None = None
    """A display name for the source (a person's name, a tool's name)."""
    position: int = 0
    """Order within the session: adjacent positions are adjacent turns (used for neighbour expansion)."""
    group: str | None = None
    """A label shared by memories said together (a conversation session, a compaction round)."""
    subject: str | None = None
    """A key such as ``"user.city"``: a newer memory with the same subject supersedes the older one."""
    supersedes: tuple[str, ...] = ()
    """Ids of memories this one replaces."""
    superseded_by: str | None = None
    """Set when a newer memory replaced this one; it is kept, marked, and ranked below current memories."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """Free-form string metadata (a date, a dialogue id, a tool name).

    ``keywords`` is searched, not rendered; ``date`` (when it was said, as text) is searched and heads
    the memory's rendering in place of its creation time."""

    @property
    def current(self) -> bool:
        """True while no newer memory supersedes this one."""
        return self.superseded_by is None


@dataclass(frozen=True, kw_only=True)
class Hit:
    """A recalled memory with its score and the parts of that score."""

    memory: MemoryRecord
    """The memory."""
    score: float
    """α·relevance + β·recency + γ·importance (times the supersession penalty)."""
    relevance: float
    """Fused retrieval relevance, 0..1."""
    recency: float
    """exp(-age/τ) from the last access (or creation) to the query time, 0..1."""
    importance: float
    """The memory's importance, 0..1."""
    source: Source
    """How the hit was found."""

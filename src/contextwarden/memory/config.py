"""Long-term memory built from configuration: the ``[memory]`` section of a settings file.

``url`` says where memories live: ``store`` (the default) puts them beside the sessions, in the
session store's SQLite file (an in-process index when the store is not SQLite, Postgres when it
is Postgres); ``sqlite:///path``, ``postgresql://…`` and ``memory://`` name a place of their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from .._store_url import sqlite_file
from ..exceptions import ConfigError
from .backends.base import MemoryBackend
from .embedders import Embedder, HashingEmbedder
from .longterm import TASK_GROUP_WEIGHT, LongTermMemory
from .scoring import ScoreWeights

__all__ = ["PLACES_HINT", "EmbedderName", "MemoryOptions", "is_memory_place", "open_memory_backend"]

PLACES_HINT = "use 'store' (beside the sessions), 'memory://', 'sqlite:///path.db' or 'postgresql://host/db'"
"""What a memory ``url`` may be, as an error message says it."""


def is_memory_place(url: str) -> bool:
    """Whether ``url`` names a place memory can live (see the module)."""
    return url in ("store", "memory://") or url.startswith(("sqlite:///", "postgresql://", "postgres://"))


EmbedderName = Literal["none", "hashing", "minilm"]
"""``none``: keyword recall only; ``hashing``: a dependency-free hashed bag of words; ``minilm``:
the packaged all-MiniLM-L6-v2 (extra ``embeddings``)."""


@dataclass(frozen=True, kw_only=True)
class MemoryOptions:
    """What a session's long-term memory is made of (the ``[memory]`` section, validated)."""

    url: str = "store"
    embedder: EmbedderName = "none"
    across_sessions: bool = True
    share: float = 0.08
    limit: int = 40
    chunk_chars: int = 480
    min_score: float = 0.4
    weights: ScoreWeights = field(default_factory=ScoreWeights)

    def long_term(
        self, *, store_url: str, tenant: str = "default", clock: Callable[[], float] = time.time
    ) -> LongTermMemory:
        """A `LongTermMemory` of ``tenant`` over the configured backend and embedder."""
        return LongTermMemory(
            open_memory_backend(self.url, store_url=store_url),
            clock=clock,
            tenant=tenant,
            embedder=_embedder(self.embedder),
            weights=self.weights,
            group_weight=TASK_GROUP_WEIGHT,  # a session's memory groups by task, as its default memory does
        )


def _embedder(name: EmbedderName) -> Embedder | None:
    if name == "none":
        return None
    if name == "hashing":
        return HashingEmbedder()
    from .embedders import SentenceTransformerEmbedder

    try:
        return SentenceTransformerEmbedder()
    except ImportError as exc:
        raise ConfigError(
            f"[memory] embedder = 'minilm' needs the embeddings extra ({exc}); install"
            " 'contextwarden[embeddings]' or set embedder = 'none'.",
            key="memory.embedder",
        ) from None


def open_memory_backend(url: str, *, store_url: str) -> MemoryBackend:
    """The backend ``url`` names; ``store`` follows the session store at ``store_url``."""
    if not is_memory_place(url):
        raise ConfigError(f"[memory] url = {url!r} is not a memory place: {PLACES_HINT}.", key="memory.url")
    if url == "store":
        if store_url.startswith(("postgresql://", "postgres://")):
            url = store_url
        else:
            path = sqlite_file(store_url)
            url = f"sqlite:///{path}" if path is not None else "memory://"
    if url == "memory://":
        from .backends.memory import InMemoryBackend

        return InMemoryBackend()
    path = sqlite_file(url)
    if path is not None:
        from .backends.sqlite import SQLiteMemoryBackend

        path.parent.mkdir(parents=True, exist_ok=True)
        return SQLiteMemoryBackend(path)
    if url.startswith(("postgresql://", "postgres://")):
        from .backends.postgres import PostgresMemoryBackend

        return PostgresMemoryBackend(url.split("?", 1)[0])
    raise ConfigError(f"[memory] url = {url!r} names no database file: {PLACES_HINT}.", key="memory.url")

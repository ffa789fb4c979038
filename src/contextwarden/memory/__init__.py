"""Long-term memory: what left the view, recalled by relevance, recency and importance.

Tiers: `SensoryMemory` (latest inputs), `ShortTermMemory` (recent fragments, bounded),
`LongTermMemory` (persistent, scored hybrid retrieval) and `HybridMemory` (the three composed).
Retrieval fuses BM25 (``bm25s``, or SQLite FTS5) and an optional dense `Embedder` by reciprocal
rank fusion, adds neighbouring turns and drops duplicates; the score is
α·relevance + β·recency + γ·importance (`ScoreWeights`). Install with ``contextwarden[memory]``;
the local embedder needs ``contextwarden[embeddings]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .backends.base import MemoryBackend
from .backends.memory import InMemoryBackend
from .backends.sqlite import SQLiteMemoryBackend
from .checks import check_record, clean_text
from .embedders import Embedder, HashingEmbedder, OpenAIEmbedder, SentenceTransformerEmbedder, packaged_minilm_path
from .importance import HeuristicImportance, ImportanceScorer, LLMImportance
from .longterm import MAX_QUERY_CHARS, LongTermMemory
from .records import Hit, MemoryRecord, new_memory_id
from .render import pack_hits, render_hits
from .scoring import ScoreWeights, recency
from .status import MemoryStatus
from .tiers import HybridMemory, SensoryMemory, ShortTermMemory, from_messages

if TYPE_CHECKING:
    from .backends.postgres import PostgresMemoryBackend

__all__ = [
    "MAX_QUERY_CHARS",
    "Embedder",
    "HashingEmbedder",
    "HeuristicImportance",
    "Hit",
    "HybridMemory",
    "ImportanceScorer",
    "InMemoryBackend",
    "LLMImportance",
    "LongTermMemory",
    "MemoryBackend",
    "MemoryRecord",
    "MemoryStatus",
    "OpenAIEmbedder",
    "PostgresMemoryBackend",
    "SQLiteMemoryBackend",
    "ScoreWeights",
    "SensoryMemory",
    "SentenceTransformerEmbedder",
    "ShortTermMemory",
    "check_record",
    "clean_text",
    "from_messages",
    "new_memory_id",
    "pack_hits",
    "packaged_minilm_path",
    "recency",
    "render_hits",
]


def __getattr__(name: str) -> object:
    # psycopg is an optional extra: the Postgres backend loads on first use.
    if name == "PostgresMemoryBackend":
        from .backends.postgres import PostgresMemoryBackend

        return PostgresMemoryBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

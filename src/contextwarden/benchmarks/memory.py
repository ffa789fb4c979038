"""The memory benchmark: latency of recalling the top 10 over many memories on the embedded backend.

Memories are synthetic agent notes (tickets, paths, errors, decisions) drawn from a fixed seed, so
every run measures the same data. The keyword path is BM25 through SQLite FTS5; the dense path adds
a `HashingEmbedder` query and a brute-force cosine scan over every stored vector, fused by RRF.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..memory.backends.sqlite import SQLiteMemoryBackend
from ..memory.embedders import HashingEmbedder
from ..memory.longterm import LongTermMemory
from ..memory.records import MemoryRecord

__all__ = ["run_memory_bench", "synthetic_memories"]

_SUBJECTS = "deploy billing parser cache scheduler auth upload search export login webhook migration".split()
_VERBS = "fails passes times out crashes returns retries blocks leaks rejects accepts renames drops".split()
_OBJECTS = "token request config header payload index queue session cursor lock row snapshot".split()


def synthetic_memories(count: int, *, seed: int = 7) -> list[MemoryRecord]:
    """``count`` distinct agent-style notes with identifiers, in sessions of 200."""
    rng = random.Random(seed)
    records = []
    for i in range(count):
        subject, verb, obj = rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS)
        text = (
            f"{subject} {verb} on {obj} in src/{subject}/{obj}_{rng.randrange(500)}.py "
            f"(ticket {subject.upper()[:4]}-{rng.randrange(10000)}, commit {rng.getrandbits(28):07x}); "
            f"word{rng.randrange(20000)} word{rng.randrange(20000)}"
        )
        records.append(
            MemoryRecord(
                text=text,
                memory_id=f"m{i}",
                session_id=f"s{i // 200}",
                position=i % 200,
                created_at=1_700_000_000 + i,
                importance=0.5,
            )
        )
    return records


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "p50_ms": round(pick(0.50) * 1000, 3),
        "p99_ms": round(pick(0.99) * 1000, 3),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 3),
    }


def run_memory_bench(
    *,
    memories: int = 100_000,
    queries: int = 300,
    path: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Fill an SQLite memory file with ``memories`` notes and time ``queries`` recalls per path."""
    records = synthetic_memories(memories)
    rng = random.Random(11)
    with tempfile.TemporaryDirectory() as tmp:
        db = path or Path(tmp) / "memory.db"
        backend = SQLiteMemoryBackend(db)
        embedder = HashingEmbedder(dimension=256)
        started = time.perf_counter()
        writer = LongTermMemory(backend, embedder=embedder)
        for start in range(0, len(records), 5000):
            writer.add_many(records[start : start + 5000])
            if progress is not None:
                progress(f"memory: {min(start + 5000, len(records)):,} memories written")
        fill_seconds = time.perf_counter() - started
        texts = [records[rng.randrange(len(records))].text for _ in range(queries)]
        picked = [" ".join(t.split()[:3] + t.split()[-1:]) for t in texts]
        result: dict[str, Any] = {"memories": memories, "queries": queries, "fill_seconds": round(fill_seconds, 2)}
        for name, memory in (
            ("keyword", LongTermMemory(backend, neighbours=0)),
            ("dense", LongTermMemory(backend, embedder=embedder, neighbours=0)),
        ):
            memory.recall(picked[0], limit=10, touch=False)  # loads vectors / warms caches
            samples, found = [], 0
            for query, text in zip(picked, texts, strict=True):
                t0 = time.perf_counter()
                hits = memory.recall(query, limit=10, touch=False)
                samples.append(time.perf_counter() - t0)
                found += any(h.memory.text == text for h in hits)
            result[name] = {**_percentiles(samples), "hit_at_10": round(found / len(picked), 3)}
            if progress is not None:
                progress(f"memory: {name} path timed")
        backend.close()
    return result

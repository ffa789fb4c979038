"""Eviction policies: in which order old rounds leave the view (the evict layer).

Each policy orders the candidate rounds, first-to-evict first; the evict layer then evicts greedily
until its target is met. Candidates never include protected rounds (system, pinned, the
current request, calls in flight, the newest rounds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .config import CompactionConfig

__all__ = ["Candidate", "order_for_eviction"]


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """What a policy may know about a round."""

    ordinal: int
    """Position of the round in the transcript (0 = oldest)."""
    age: int
    """Rounds newer than this one."""
    kind: str
    """The round's kind: ``tool-call``, ``exchange`` or ``message`` (see `contextwarden.rounds`)."""
    role: str
    """Role of the round's first message."""
    importance: float
    """From message ``extra['importance']`` (default 1.0); errors count double."""
    has_thinking: bool
    identifiers: frozenset[str]
    words: frozenset[str]
    last_reference: int
    """Ordinal of the newest later round that mentions one of this round's identifiers (-1: none)."""


def _content_type(c: Candidate) -> str:
    if c.has_thinking:
        return "thinking"
    return "tool" if c.kind == "tool-call" else "message"


def _expired(c: Candidate, config: CompactionConfig) -> bool:
    ttl = config.type_ttl.get(_content_type(c))
    return ttl is not None and c.age >= ttl


def _priority(c: Candidate, config: CompactionConfig) -> float:
    return config.source_weights.get(c.role, 0.5) * c.importance


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def _near_duplicates(cands: Sequence[Candidate], threshold: float) -> set[int]:
    """Ordinals of rounds that a newer candidate nearly repeats (the older copy goes first)."""
    dup: set[int] = set()
    by_age = sorted(cands, key=lambda c: c.ordinal)
    for i, older in enumerate(by_age):
        for newer in by_age[i + 1 : i + 40]:  # bounded window: repeats happen close together
            same_kind = older.kind == newer.kind and older.role == newer.role
            if same_kind and _jaccard(older.words, newer.words) >= threshold:
                dup.add(older.ordinal)
                break
    return dup


def order_for_eviction(candidates: Sequence[Candidate], config: CompactionConfig) -> list[Candidate]:
    """Candidates in the order the configured policy evicts them."""
    policy = config.eviction_policy
    fifo: Callable[[Candidate], tuple[float, ...]] = lambda c: (c.ordinal,)  # noqa: E731
    if policy == "fifo":
        key = fifo
    elif policy == "lru":
        key = lambda c: (c.last_reference if c.last_reference >= 0 else c.ordinal, c.ordinal)  # noqa: E731
    elif policy == "priority":
        key = lambda c: (_priority(c, config), c.ordinal)  # noqa: E731
    elif policy == "type-ttl":
        key = lambda c: (0 if _expired(c, config) else 1, c.ordinal)  # noqa: E731
    elif policy == "semantic-merge":
        dup = _near_duplicates(candidates, config.merge_similarity)
        key = lambda c: (0 if c.ordinal in dup else 1, c.ordinal)  # noqa: E731
    elif policy == "hybrid":
        key = _hybrid_key(candidates, config)
    else:  # pragma: no cover - CompactionConfig validates the name
        raise AssertionError(policy)
    return sorted(candidates, key=key)


def _hybrid_key(candidates: Sequence[Candidate], config: CompactionConfig) -> Callable[[Candidate], tuple[float, ...]]:
    w = config.hybrid_weights
    max_age = max((c.age for c in candidates), default=1) or 1
    newest = max((c.ordinal for c in candidates), default=1) or 1
    priorities: Mapping[int, float] = {c.ordinal: _priority(c, config) for c in candidates}
    top_priority = max(priorities.values(), default=1.0) or 1.0

    def score(c: Candidate) -> tuple[float, ...]:
        freshness = 1.0 - c.age / max_age
        priority = priorities[c.ordinal] / top_priority
        alive = 0.0 if _expired(c, config) else 1.0
        referenced = max(c.last_reference, 0) / newest
        keep = w.freshness * freshness + w.priority * priority + w.type * alive + w.references * referenced
        return (keep, c.ordinal)  # lowest keep-score leaves first

    return score

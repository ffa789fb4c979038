"""The evict layer: whole rounds leave the view, in policy order, until the view is at its target.

An evicted round is listed in the progress ledger (its step, tool, outcome and identifiers,
with its snapshot id), which the context block shows in its place. The order comes from the
eviction policy (`policies`: fifo, lru, priority, type-ttl, semantic-merge, hybrid), except
that rounds older than ``progressive_line_after`` leave first whatever the policy prefers.
Rounds are atomic: a tool call never leaves without all its results.
"""

from __future__ import annotations

from collections.abc import Set

from ..keyinfo import salient_facts
from ..messages import ThinkingPart
from .base import Change
from .book import RoundBook
from .config import CompactionConfig
from .policies import Candidate, order_for_eviction

__all__ = ["candidates", "run"]


def run(book: RoundBook, target: int, config: CompactionConfig, *, protected: Set[int]) -> Change:
    """Evict whole rounds in policy order until the view is under ``target`` (context block included)."""
    before = total = book.total()
    evicted = 0
    if config.eviction_policy == "fifo":  # no scoring needed: walk the rounds oldest first
        for r in book.live():
            if total <= target:
                break
            if r.kind == "system" or r.state == "evicted" or r.ordinal in protected:
                continue
            book.evict(r)
            total = book.total()
            evicted += 1
        return Change(layer="evict", tokens_before=before, tokens_after=total, items=evicted)
    ordered = order_for_eviction(candidates(book, protected, config), config)
    # progressive tiers: rounds past the one-line age leave first, whatever the policy prefers
    ordered.sort(key=lambda c: 0 if c.age > config.progressive_line_after else 1)
    for cand in ordered:
        if total <= target:
            break
        book.evict(book.rounds[cand.ordinal])
        total = book.total()
        evicted += 1
    return Change(layer="evict", tokens_before=before, tokens_after=total, items=evicted)


def candidates(book: RoundBook, protected: Set[int], config: CompactionConfig) -> list[Candidate]:
    """What the eviction policy may know about each round that may leave the view."""
    conversation = book.conversation()
    transcript = book.transcript
    n = len(conversation)
    cands: list[Candidate] = []
    need_refs = config.eviction_policy in ("lru", "hybrid")
    need_words = config.eviction_policy == "semantic-merge"
    last_seen: dict[str, int] = {}
    if need_refs:
        for r in conversation:
            for f in book.facts(r):
                last_seen[f] = r.ordinal
            for i in r.indices:
                for c in transcript[i].tool_calls:
                    for f in salient_facts(c.arguments, limit=16):
                        last_seen[f] = r.ordinal
    for age_pos, r in enumerate(conversation):
        if r.state == "evicted" or r.ordinal in protected:
            continue
        first = transcript[r.start]
        facts = frozenset(book.facts(r)) if need_refs else frozenset()
        refs = max((last_seen.get(f, -1) for f in facts if last_seen.get(f, -1) > r.ordinal), default=-1)
        words: frozenset[str] = frozenset()
        if need_words:
            words = frozenset(" ".join(transcript[i].text[:2000] for i in r.indices).split())
        importance = float(first.extra.get("importance", 1.0)) if isinstance(first.extra, dict) else 1.0
        if any(transcript[i].is_error for i in r.indices):
            importance *= 2.0
        cands.append(
            Candidate(
                ordinal=r.ordinal,
                age=n - 1 - age_pos,
                kind=r.kind,
                role="tool" if r.kind == "tool-call" else first.role,
                importance=importance,
                has_thinking=any(isinstance(p, ThinkingPart) for i in r.indices for p in transcript[i].parts),
                identifiers=facts,
                words=words,
                last_reference=refs,
            )
        )
    return cands

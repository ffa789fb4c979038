"""Relevance priors: what makes a retrieved memory more or less likely to hold the answer.

Retrieval scores how well a memory's words match the query. Two cues that word matching misses:

- Who said it. "What does Ann do to relax?" is answered by what Ann said; in a two-person chat
  the name is in half the memories, so BM25 gives it almost no weight, and the embedding of a
  short question is pulled by its topic more than by the name. When the query names exactly one
  of the candidates' speakers, that speaker's memories rank as if they had gained a share of their
  relevance (the others are divided by the same factor, so relevance stays within 0..1). A query
  naming both (or none) says nothing about who answers it.
- Whether it states anything. A turn that only asks ("What made you try pottery?") matches the
  query's topic as well as the answer after it, but holds no fact: it loses a share.

Both are shares of the retrieval relevance, so a strong match by the other speaker still ranks
above a weak one by the named speaker.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache

from .records import MemoryRecord

__all__ = ["named_speakers", "relevance_priors"]


@lru_cache(maxsize=4096)
def _name_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(name.casefold())}(?!\w)")


def named_speakers(query: str, speakers: set[str]) -> set[str]:
    """The speakers whose name occurs in ``query`` as a whole word (case-insensitive)."""
    folded = query.casefold()
    return {s for s in speakers if s.strip() and _name_pattern(s.strip()).search(folded)}


def _asks(text: str) -> bool:
    return text.rstrip().endswith(("?", "？"))


def relevance_priors(
    records: Sequence[MemoryRecord],
    relevance: Mapping[str, float],
    query: str,
    *,
    speaker_weight: float,
    question_weight: float,
) -> dict[str, float]:
    """``relevance`` of each record adjusted by the priors above (see the module docstring)."""
    named = named_speakers(query, {r.speaker for r in records if r.speaker}) if speaker_weight > 0 else set()
    speaker = next(iter(named)) if len(named) == 1 else None
    out = dict(relevance)
    for record in records:
        factor = 1.0
        if speaker is not None and record.speaker != speaker:
            factor /= 1 + speaker_weight
        if question_weight > 0 and _asks(record.text):
            factor *= 1 - question_weight
        if factor != 1.0:
            out[record.memory_id] = relevance[record.memory_id] * factor
    return out

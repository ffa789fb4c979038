"""Fusing ranked lists: reciprocal rank fusion, and deduplication of near-identical texts."""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["dedup_key", "reciprocal_rank_fusion"]


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], *, k: int = 60) -> dict[str, float]:
    """Σ 1/(k + rank) over the rankings each id appears in, scaled so that 1.0 is first in every ranking.

    Ids keep no other score: RRF needs no calibration between BM25 scores and cosine similarities.
    """
    if not rankings:
        return {}
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
    best = len(rankings) / (k + 1)
    return {item: score / best for item, score in fused.items()}


_SPACE = re.compile(r"\W+")


def dedup_key(text: str) -> str:
    """A key equal for texts that differ only in case, spacing and punctuation."""
    return _SPACE.sub(" ", text.casefold()).strip()

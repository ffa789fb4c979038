"""Fusing ranked lists: reciprocal rank fusion, and deduplication of near-identical texts."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

__all__ = ["dedup_key", "reciprocal_rank_fusion", "score_fusion"]


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


def score_fusion(retrievers: Sequence[Mapping[str, float]], *, weights: Sequence[float]) -> dict[str, float]:
    """Weighted mean of each retriever's scores divided by its best score (negative scores count 0).

    Dividing by the best puts BM25 scores and cosine similarities on one 0..1 scale while keeping
    how far apart the candidates are (ranks would not); an id a retriever did not return scores
    0 there, as BM25 does for a text without a query term.
    """
    fused: dict[str, float] = {item: 0.0 for scores in retrievers for item in scores}
    total = sum(w for scores, w in zip(retrievers, weights, strict=False) if scores) or 1.0
    for scores, weight in zip(retrievers, weights, strict=False):
        best = max((v for v in scores.values()), default=0.0)
        if best <= 0:
            continue
        for item, value in scores.items():
            fused[item] += weight * max(value, 0.0) / best
    return {item: value / total for item, value in fused.items()}


_SPACE = re.compile(r"\W+")


def dedup_key(text: str) -> str:
    """A key equal for texts that differ only in case, spacing and punctuation."""
    return _SPACE.sub(" ", text.casefold()).strip()

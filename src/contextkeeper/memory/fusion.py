"""Fusing ranked lists: reciprocal rank fusion, and deduplication of near-identical texts."""

from __future__ import annotations

import math
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


def score_fusion(
    retrievers: Sequence[tuple[Mapping[str, float], int | None]], *, weights: Sequence[float]
) -> dict[str, float]:
    """Weighted sum of standardized scores, squashed into 0..1 by a logistic.

    Each retriever gives its candidates' scores and the size of the population they were drawn
    from (``None``: the candidates are the whole population). Ids a retriever did not return score
    0 there (BM25's score for a document without a query term). Standardizing (z-scores) puts BM25
    scores and cosine similarities on one scale, so the weights mean what they say.
    """
    fused: dict[str, float] = {item: 0.0 for scores, _ in retrievers for item in scores}
    for (scores, population), weight in zip(retrievers, weights, strict=False):
        if not scores:
            continue
        n = max(population or len(scores), len(scores))
        mean = sum(scores.values()) / n
        var = max(sum(v * v for v in scores.values()) / n - mean * mean, 0.0)
        std = math.sqrt(var) or 1.0
        floor = (0.0 - mean) / std
        for item in fused:
            fused[item] += weight * ((scores[item] - mean) / std if item in scores else floor)
    return {item: 1.0 / (1.0 + math.exp(-value / 4.0)) for item, value in fused.items()}


_SPACE = re.compile(r"\W+")


def dedup_key(text: str) -> str:
    """A key equal for texts that differ only in case, spacing and punctuation."""
    return _SPACE.sub(" ", text.casefold()).strip()

"""Ranking hits so that together they cover a request that asks for several things.

A request such as "name the ticket, the failing test, the commit and the config value" has one
best memory per part. Ranked by score alone, the top of the list fills with near-copies of one
part (every commit list matches "commit" and "fix"), and the room runs out before the other parts
appear. `cover` re-ranks greedily: each next hit is the one with the best score times a factor
that grows with the share of its matched query terms (weighted by how rare they are among the
candidates) that no hit before it matched. A hit that matched no query term (found by the dense
retriever alone) keeps its score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ._text import tokenize
from .records import Hit

__all__ = ["cover"]


def _terms(hit: Hit, query: set[str]) -> frozenset[str]:
    record = hit.memory
    text = f"{record.speaker or ''} {record.text} {record.metadata.get('keywords', '')}"
    return frozenset(t for t in tokenize(text) if t in query)


def cover(hits: Sequence[Hit], query: str, *, floor: float = 0.35, depth: int = 120) -> list[Hit]:
    """``hits`` re-ranked for coverage of ``query``'s terms (see the module docstring).

    Args:
        hits: Candidates, best first.
        query: The request.
        floor: The factor of a hit whose matched terms are all covered already (1 when all are new).
        depth: Only the first ``depth`` hits are re-ranked (the greedy pass is quadratic); the rest follow.
    """
    terms = set(tokenize(query))
    if not terms or len(hits) < 2:
        return list(hits)
    if len(hits) > depth:
        return [*cover(hits[:depth], query, floor=floor, depth=depth), *hits[depth:]]
    matched = [_terms(h, terms) for h in hits]
    df: dict[str, int] = {}
    for found in matched:
        for t in found:
            df[t] = df.get(t, 0) + 1
    n = len(hits)
    idf = {t: math.log(1 + n / c) for t, c in df.items()}
    total = [sum(idf[t] for t in found) for found in matched]
    new = list(total)  # idf mass of each hit's matched terms that no chosen hit matched yet
    covered: set[str] = set()
    left = list(range(n))
    order: list[int] = []
    while left:
        best, best_value = left[0], -1.0
        for i in left:
            factor = floor + (1 - floor) * (new[i] / total[i]) if total[i] else 1.0
            value = hits[i].score * factor
            if value > best_value:
                best, best_value = i, value
        order.append(best)
        left.remove(best)
        fresh = matched[best] - covered
        if fresh:
            covered |= fresh
            for i in left:
                if matched[i] & fresh:
                    new[i] -= sum(idf[t] for t in matched[i] & fresh)
    return [hits[i] for i in order]

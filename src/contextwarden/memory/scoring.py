"""The recall score: α·relevance + β·recency + γ·importance, with recency computed at query time."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..exceptions import ConfigError
from .records import MemoryRecord

__all__ = ["ScoreWeights", "recency"]


@dataclass(frozen=True, kw_only=True)
class ScoreWeights:
    """Weights of the recall score and the recency time constant.

    Relevance carries the ranking; small recency and importance weights break ties between equally
    relevant memories without pushing an irrelevant recent one above a relevant old one. On the
    locomo benchmark (``contextwarden bench locomo``), where any past session is asked about
    equally, these two weights cost up to 0.002 of evidence recall; in agent sessions the recent and
    the flagged matter more.
    """

    relevance: float = 1.0
    """α: weight of fused retrieval relevance (0..1)."""
    recency: float = 0.05
    """β: weight of recency (0..1)."""
    importance: float = 0.05
    """γ: weight of importance (0..1)."""
    half_life: float = 7 * 24 * 3600.0
    """Seconds after which recency has decayed to one half."""
    superseded_factor: float = 0.5
    """Multiplier for the score of a memory that a newer one superseded."""

    def __post_init__(self) -> None:
        for name in ("relevance", "recency", "importance"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and value >= 0 and math.isfinite(value)):
                raise ConfigError(f"ScoreWeights.{name}={value!r}: give a finite number >= 0.", key=name)
        if not (self.half_life > 0 and math.isfinite(self.half_life)):
            raise ConfigError(f"ScoreWeights.half_life={self.half_life!r}: give seconds > 0.", key="half_life")
        if not 0 <= self.superseded_factor <= 1:
            raise ConfigError(
                f"ScoreWeights.superseded_factor={self.superseded_factor!r}: give a number in 0..1.",
                key="superseded_factor",
            )

    def score(self, record: MemoryRecord, *, relevance: float, now: float) -> tuple[float, float]:
        """The score of ``record`` at time ``now`` and its recency part."""
        rec = recency(record, now=now, half_life=self.half_life)
        total = self.relevance * relevance + self.recency * rec + self.importance * (record.importance or 0.0)
        if record.superseded_by is not None:
            total *= self.superseded_factor
        return total, rec


def recency(record: MemoryRecord, *, now: float, half_life: float) -> float:
    """exp(-ln 2 · age / half_life), the age running from the last access (or creation) to ``now``."""
    start = record.last_access if record.last_access is not None else record.created_at
    age = max(0.0, now - start)
    return math.exp(-math.log(2) * age / half_life)

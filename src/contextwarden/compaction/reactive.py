"""The reactive layer: after a provider says the prompt is too long, compact deeper now.

The view was sent and rejected, so the configured window (or the count) was wrong. The
emergency compaction is the ordinary cascade with a deeper plan: it cuts to
``reactive_low_water`` (0.35 by default) instead of ``low_water``, keeps only the newest
``reactive_keep_rounds`` rounds whole, and may use every layer whatever the cascade table says
(`opens_every_gate`). The failed call does not count as a turn. `Session.complete()` and
`stream()` then retry ``reactive_retries`` times.
"""

from __future__ import annotations

from ..events import Trigger
from .base import Plan
from .config import CompactionConfig

__all__ = ["opens_every_gate", "plan"]


def plan(config: CompactionConfig) -> Plan:
    """The emergency compaction's plan."""
    return Plan(trigger="reactive", low_water=config.reactive_low_water, keep_rounds=config.reactive_keep_rounds)


def opens_every_gate(trigger: Trigger) -> bool:
    """An emergency compaction may use every layer, whatever utilization the cascade table asks for."""
    return trigger == "reactive"

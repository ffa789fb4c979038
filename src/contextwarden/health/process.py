"""Health of the whole process: counters summed over every monitored session, and the live monitors.

`process_health()` is the one instance every `HealthMonitor` reports to unless given another;
the Prometheus exporter reads it at scrape time, so metrics cost nothing between scrapes.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .samples import HealthSnapshot

__all__ = ["MonitorLike", "ProcessHealth", "ProcessTotals", "process_health"]


class MonitorLike(Protocol):
    """What the process reads of a registered monitor (a `HealthMonitor`): its latest snapshot."""

    @property
    def latest(self) -> HealthSnapshot | None: ...


@dataclass(kw_only=True)
class ProcessTotals:
    """Counters summed over every session the process monitored (they only grow)."""

    turns: int = 0
    compactions: Counter[str] = field(default_factory=Counter)
    """Layer runs, by layer."""
    compaction_items: Counter[str] = field(default_factory=Counter)
    """Outputs cleared, rounds evicted, spans summarized, by layer."""
    compaction_tokens_before: int = 0
    compaction_tokens_after: int = 0
    compaction_seconds: float = 0.0
    compaction_count: int = 0
    """Compactions (one per turn that compacted, whatever its layers)."""
    alerts: Counter[str] = field(default_factory=Counter)
    summarizer_failures: int = 0
    fidelity_sum: float = 0.0
    fidelity_count: int = 0


class ProcessHealth:
    """The process-wide side of health: totals and the monitors still attached."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._monitors: weakref.WeakSet[MonitorLike] = weakref.WeakSet()
        self.totals = ProcessTotals()

    def register(self, monitor: MonitorLike) -> None:
        """Count ``monitor``'s session among the live ones (until `unregister` or garbage collection)."""
        with self._lock:
            self._monitors.add(monitor)

    def unregister(self, monitor: MonitorLike) -> None:
        with self._lock:
            self._monitors.discard(monitor)

    def monitors(self) -> list[MonitorLike]:
        """The live monitors."""
        with self._lock:
            return list(self._monitors)

    def snapshots(self) -> list[HealthSnapshot]:
        """The current snapshot of every live monitor that saw at least one turn."""
        return [s for m in self.monitors() if (s := m.latest) is not None]

    # --- what monitors report ---------------------------------------------------------------------
    def turn(self) -> None:
        with self._lock:
            self.totals.turns += 1

    def compaction(self, *, before: int, after: int, seconds: float) -> None:
        with self._lock:
            t = self.totals
            t.compaction_count += 1
            t.compaction_tokens_before += before
            t.compaction_tokens_after += after
            t.compaction_seconds += seconds

    def layer(self, layer: str, items: int) -> None:
        with self._lock:
            self.totals.compactions[layer] += 1
            self.totals.compaction_items[layer] += items

    def alert(self, name: str) -> None:
        with self._lock:
            self.totals.alerts[name] += 1

    def summarizer_failure(self) -> None:
        with self._lock:
            self.totals.summarizer_failures += 1

    def fidelity(self, score: float) -> None:
        with self._lock:
            self.totals.fidelity_sum += score
            self.totals.fidelity_count += 1

    def reset(self) -> None:
        """Forget the totals (the live monitors stay): for tests and benchmarks."""
        with self._lock:
            self.totals = ProcessTotals()


_PROCESS = ProcessHealth()


def process_health() -> ProcessHealth:
    """The process's `ProcessHealth`, which monitors report to by default."""
    return _PROCESS

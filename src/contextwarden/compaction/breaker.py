"""Circuit breaker for the summarize layer: stop calling a summarizer that keeps failing."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["CircuitBreaker"]

BreakerState = Literal["closed", "open", "half-open"]


@dataclass
class CircuitBreaker:
    """Opens after ``max_failures`` consecutive failures; lets one trial through after ``cooldown_s``.

    Only the summarize layer sits behind it: the deterministic layers never stop.
    """

    max_failures: int = 3
    cooldown_s: float = 60.0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    failures: int = 0
    opened_at: float | None = None
    total_failures: int = 0

    @property
    def state(self) -> BreakerState:
        """closed (calls pass), open (calls blocked) or half-open (one trial allowed)."""
        if self.opened_at is None:
            return "closed"
        return "half-open" if self.clock() - self.opened_at >= self.cooldown_s else "open"

    def allow(self) -> bool:
        """True when a call may be attempted now."""
        return self.state != "open"

    def record_success(self) -> None:
        """A call succeeded: close the breaker."""
        self.failures = 0
        self.opened_at = None

    def record_failure(self) -> bool:
        """A call failed; returns True when this failure opened (or re-opened) the breaker."""
        self.failures += 1
        self.total_failures += 1
        if self.state == "half-open" or self.failures >= self.max_failures:
            self.opened_at = self.clock()
            return True
        return False

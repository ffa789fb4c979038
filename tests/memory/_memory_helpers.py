"""Helpers for the memory tests."""

from __future__ import annotations


class Clock:
    """A settable clock."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

"""The layers' shared contract: what a compaction plans, may spend, and what a layer changed.

Every layer is a module with a ``run`` function over the round book (`book.RoundBook`):

* ``clear.run(book, target, config, protected=...) -> Change``
* ``evict.run(book, target, config, protected=...) -> Change``
* ``shrink.run(book, budget, config) -> Change``
* ``SummaryLayer.run(book, target, config)``: a generator that yields one `SummaryRequest` and
  returns a `Change` (the layer's I/O is driven by the session, sans-IO);
* ``reactive.plan(config) -> Plan``: the emergency compaction after a provider's
  context-length error is the same cascade with a deeper plan.

A layer changes round states only through `RoundBook.show` and `RoundBook.evict`, stops as
soon as the view is at its target, and never touches the protected rounds.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..events import LayerName, Trigger
from .config import CompactionConfig

__all__ = ["Change", "Plan", "Room"]


@dataclass(frozen=True, kw_only=True)
class Change:
    """What one layer run changed."""

    layer: LayerName
    tokens_before: int
    """The view's expected size (`RoundBook.total`) before the run."""
    tokens_after: int
    items: int = 0
    """Tool outputs cleared, rounds evicted or shrunk, spans summarized."""

    @property
    def saved(self) -> int:
        """Tokens the run took out of the view."""
        return self.tokens_before - self.tokens_after


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Where one compaction cuts to and what it keeps."""

    trigger: Trigger = "high-water"
    low_water: float
    """Share of the effective budget to cut down to."""
    keep_rounds: int
    """Newest conversation rounds no layer may touch (the current one always stays)."""


@dataclass(frozen=True, kw_only=True)
class Room:
    """What the current compaction may spend (set on the book when a compaction starts)."""

    effective: int
    """The effective budget (window − reserved output − tool schemas)."""
    ledger_cap: int
    """Most tokens the context block may take (``ledger_share`` of the budget, ``ledger_max_tokens`` at most)."""
    tight: bool = False
    """The rounds that must stay plus a minimal context block do not fit under the target."""
    floor: int = 0
    """Tokens of what no layer may remove (system, pinned, the current request, calls in flight)."""
    work_cap: int = 0
    """Most tokens the working set may take in the context block (``working_set_share`` of ``ledger_cap``)."""
    work_need: int = 0
    """Tokens the working set needs in the context block (with its header), measured when a compaction starts."""
    user_cap: int = 0
    """Most tokens the user's instructions may take in the context block (``instructions_share``)."""
    user_need: int = 0
    """Tokens the user's instructions need in the context block, measured when a compaction starts."""
    lean: bool = False
    """A tight budget or a deeper cut than low water: the user's plain requests are left to the ledger."""
    held: int = 0
    """Tokens held back from ``effective`` for another part of each request (recalled memories)."""

    def low_target(self, low_water: float) -> int:
        """The tokens a compaction to ``low_water`` cuts to.

        A share of the whole budget (``effective`` plus ``held``) less what is held back: the band
        from the trigger to the target is as wide as it would be with nothing held back, so holding
        room for recalled memories does not make compactions more frequent.
        """
        return max(0, int(low_water * (self.effective + self.held)) - self.held)

    @classmethod
    def of(
        cls,
        effective: int,
        config: CompactionConfig,
        *,
        tight: bool = False,
        floor: int = 0,
        work_need: int = 0,
        user_need: int = 0,
        held: int = 0,
    ) -> Room:
        """The room of a budget under ``config``."""
        ledger_cap = min(config.ledger_max_tokens, int(config.ledger_share * effective))
        work_cap = int(ledger_cap * config.working_set_share)
        user_cap = min(config.instructions_max_tokens, int(config.instructions_share * effective))
        return cls(
            effective=effective,
            ledger_cap=ledger_cap,
            tight=tight,
            floor=floor,
            work_cap=work_cap,
            work_need=work_need,
            user_cap=user_cap,
            user_need=min(user_need, user_cap),
            held=held,
        )

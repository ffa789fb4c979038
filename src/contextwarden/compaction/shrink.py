"""The shrink layer: when the view would not fit the budget at all, the newest rounds give way too.

It runs only when the other layers left the view above the effective budget (not merely above
the low-water target): a tight budget, or an item larger than the whole budget. In order, until
the view fits:

1. outputs of the rounds still in view, but for the protected ones, get compact stand-ins; an
   output that alone would overflow is offloaded to its snapshot with a head-and-tail preview;
2. rounds leave the view, oldest first, down to the ones no layer may remove (system, pinned,
   the current request, calls in flight, the newest round);
3. the outputs of those protected rounds become previews sized to the room they have.

What still does not fit then is a `BudgetExceeded` for the orchestrator to raise.
"""

from __future__ import annotations

from .base import Change
from .book import RoundBook
from .clear import Cut, clear_round
from .config import CompactionConfig

__all__ = ["run"]


def run(book: RoundBook, budget: int, config: CompactionConfig) -> Change:
    """Shrink the newest rounds' outputs, then drop newest rounds down to the protected ones, to fit ``budget``."""
    before = book.total()
    items = _shrink(book, budget, config)
    return Change(layer="shrink", tokens_before=before, tokens_after=book.total(), items=items)


def _shrink(book: RoundBook, budget: int, config: CompactionConfig) -> int:
    changed = 0
    protected_hard = book.protected(0)
    conversation = book.conversation()
    for r in conversation:  # previews for large outputs, oldest of the kept rounds first
        if book.total() <= budget:
            return changed
        if r.state != "evicted" and r.kind == "tool-call" and r.ordinal not in protected_hard:
            # compact stand-ins (results that arrived late are still full); an output that alone
            # would overflow gets a head + tail preview. The protected rounds (the newest among them:
            # the output the agent is about to read) keep their outputs while older rounds can leave
            room = budget - book.rendered_total() + r.view_tokens
            cut = Cut(mode="offload", limit=max(0, room // 2))
            if clear_round(book, r, config, reason="offloaded", cut=cut) > 0:
                changed += 1
    for r in conversation:
        if book.total() <= budget:
            return changed
        if r.state != "evicted" and r.ordinal not in protected_hard:
            book.evict(r)
            changed += 1
    for r in conversation:  # the protected rounds themselves: offload what is oversized
        if book.total() <= budget:
            return changed
        if r.state != "evicted" and r.kind == "tool-call":
            # previews sized to the room this round has, shared by its outputs
            outputs = sum(1 for i in r.indices if book.transcript[i].role == "tool") or 1
            room = budget - (book.total() - r.view_tokens) - (r.view_tokens - r.view_tool_tokens)
            cut = Cut(mode="preview", limit=max(16, room // outputs))
            if clear_round(book, r, config, reason="offloaded", cut=cut) > 0:
                changed += 1
    return changed

"""Preparing ahead: build stand-ins, snapshots, ledger entries and the user's record on long turns.

A compaction prepares at most ``prepare_after_rounds`` rounds itself (clears them, writes their
snapshots, makes their ledger entries); once more rounds wait, the next long turn (it brought
more tokens than 60% of the last 200 turns, so counting them already took longer than a typical
turn) prepares every one that waits, within ``prepare_slice_ms``. Short turns, the common case,
stay plain: a turn made slower only where turns are already slow leaves the median turn as it
was. Every round but the newest (which may still grow) can be prepared: a compaction clears
large outputs the agent already answered to however recent, and reads the working set up to the
newest message. The view itself does not change (the cached prefix stays valid); the
compaction then only swaps in what is ready.

Every long turn also reads the user's messages that came since the last one into the record of
the user's instructions (`contextwarden.instructions`: each message is read once), so a compaction
renders that section without reading what the user wrote all session. Why on long turns (trim
benchmark, N=1,000, paired with the floor on a shared machine): read by the first compaction, every
message so far made p99 34-90 ms at 128k (24-25 ms on long turns); read as each message arrives,
the median turn was 1.7-1.9x the floor's (0.9-1.0x on long turns).

The decision counts rounds, not milliseconds: the same session prepares on the same turns on any
machine, and the share of turns that prepare stays the same however long the session runs
(deciding by a moving average of measured costs lets it creep up as the ledger and working set
fill).

Why it stays (trim benchmark, N=5,000, an in-process loop timed by wall clock): without it a
compaction turn clears and evicts every round since the last one, and p99 is 11-12.5 ms at a
32k window and 20-24 ms at 128k against a 10 ms target; with it p99 is 5-8 ms. Preparing on any
turn as the compaction neared, instead of on long turns only, put one turn in eight to fifteen
among the slow ones, which alone raised the median turn by 7-10%.
"""

from __future__ import annotations

import bisect
import time
from collections import deque

from .book import RoundBook
from .clear import stand_ins
from .config import CompactionConfig

__all__ = ["PrepareAhead"]

_RECENT_TURNS = 201
"""Turns whose growth tells a long turn from a short one."""
_WARM_UP_TURNS = 20
"""Turns seen before any turn counts as long."""
_LONG_RANK = 0.6
"""A long turn grew more than this share of recent turns (above their median: a turn misjudged as
long against a few recent turns is then still rarely a short one overall)."""


class PrepareAhead:
    """Which turns prepare ahead (recent growth, ranked) and the cursor of rounds prepared."""

    def __init__(self) -> None:
        self.cursor = 0
        self.turn_tokens = 0.0
        """Recent growth of the view per turn (moving average), to see a compaction coming."""
        self.last_rounds_total = 0
        self.recent_growth: deque[int] = deque(maxlen=_RECENT_TURNS)
        """Tokens each of the last turns added to the view."""
        self._ranked_growth: list[int] = []
        """The same, in ascending order (the rank a long turn is measured against)."""

    def newest_preparable(self, book: RoundBook) -> int:
        """Ordinal of the newest round that can be prepared: all but the newest, which may still grow."""
        return len(book.rounds) - 2

    def pending_rounds(self, book: RoundBook) -> int:
        """Rounds that can be prepared and are not prepared yet."""
        self._skip_done(book)
        return max(0, self.newest_preparable(book) + 1 - self.cursor)

    def _skip_done(self, book: RoundBook) -> None:
        """Move the cursor past rounds a compaction already evicted (or that need nothing).

        Without this the rounds a compaction handled itself would count as pending and make the
        next turns prepare for nothing. The cursor only moves forward: O(1) a turn, amortized.
        """
        rounds, i = book.rounds, self.cursor
        while i < len(rounds) and (rounds[i].prepared or rounds[i].state == "evicted" or rounds[i].kind == "system"):
            i += 1
        self.cursor = i

    def turn_done(self, book: RoundBook) -> None:
        """A turn was served: remember the view's size for the growth rate."""
        self.last_rounds_total = book.rounds_total

    def track(self, book: RoundBook, config: CompactionConfig) -> None:
        """A turn only appended: learn the growth; a long turn prepares what the compaction would not fit."""
        grown = book.rounds_total - self.last_rounds_total
        if grown > 0:
            self.turn_tokens = 0.8 * self.turn_tokens + 0.2 * grown if self.turn_tokens else float(grown)
        self._maybe_prepare(book, config, grown=grown)
        if grown > 0:  # after the decision: a turn is long against the turns before it
            self._remember(grown)

    def _remember(self, grown: int) -> None:
        """Add a turn's growth to the recent ones (kept in order too: a long turn is a rank)."""
        recent, ranked = self.recent_growth, self._ranked_growth
        if len(recent) == recent.maxlen:
            del ranked[bisect.bisect_left(ranked, recent[0])]
        recent.append(grown)
        bisect.insort(ranked, grown)

    def _is_long(self, grown: int) -> bool:
        """The turn added more tokens than most recent turns (its own counting already took longer).

        When recent turns all grew alike, a turn as long as the longest of them counts: otherwise
        a workload of even turns would never prepare.
        """
        ranked = self._ranked_growth
        if grown <= 0 or len(ranked) < _WARM_UP_TURNS:
            return False
        bar = ranked[int(len(ranked) * _LONG_RANK)]
        return grown > bar or grown == bar == ranked[-1]

    def _maybe_prepare(self, book: RoundBook, config: CompactionConfig, *, grown: int) -> None:
        if not self._is_long(grown):
            return
        book.read_instructions()  # the user's messages since the last long turn (see the module docstring)
        if self.pending_rounds(book) > config.prepare_after_rounds:
            self._prepare(book, config)

    def _prepare(self, book: RoundBook, config: CompactionConfig) -> None:
        """Prepare every round that waits, oldest first, until ``prepare_slice_ms`` has passed."""
        deadline = time.perf_counter() + config.prepare_slice_ms / 1000
        newest = self.newest_preparable(book)
        i = self.cursor
        while i < len(book.rounds) and i <= newest:
            r = book.rounds[i]
            i += 1
            if r.prepared or r.state == "evicted" or r.kind == "system" or r.pending:
                continue
            # the working set reads the transcript in order: what precedes this round is read now too
            book.working_set.catch_up(book.transcript, upto=r.end)
            book.facts(r)
            if r.kind == "tool-call":
                book.write_snapshot(r)
                if r.state == "full":
                    r.ready = stand_ins(book, r, config)
            r.entry = book.entry(r)
            if r.entry is not None:
                book.ledger.warm(r.entry)  # so the compaction's render finds its sizes known
            r.prepared = True
            if time.perf_counter() >= deadline:
                break
        self.cursor = i

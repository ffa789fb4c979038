"""The summarize layer: the newly evicted rounds are folded into a running summary (sans-IO).

The layer yields one `SummaryRequest` (the previous summary, the messages newly out of view, the
size the summary may take in the context block) and receives the reply; `Session` and
`AsyncSession` drive that I/O with their summarizer. A reply is rejected when it is not text,
looks like an error, carries an instruction that came from a tool output of the span
(`contextwarden.provenance`: tool output is data, never a rule), or keeps too few of the
identifiers it was given (unless the summarizer checks identifiers by its own rules).
Consecutive failures open a circuit breaker that stops only this layer; a summarizer that
answers degraded requests without a model keeps it running. A background summarizer may hand
in a better summary of exactly the current span at any compaction (`merge_ready`).
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence

from ..events import Alert, EventBus
from ..exceptions import SummaryRejected
from ..keyinfo import fact_rank, rank_facts
from ..messages import Message
from ..provenance import forged_instruction
from ..summarize.base import SummarizerCapabilities, SummaryReply, SummaryRequest, check_summary
from .base import Change
from .book import RoundBook
from .bookround import BookRound
from .breaker import CircuitBreaker
from .config import CompactionConfig
from .context_block import SUMMARY_SHARE, context_room

__all__ = ["SummaryLayer"]

logger = logging.getLogger(__name__)


class SummaryLayer:
    """The summarize layer of one session: its summarizer's capabilities and its circuit breaker."""

    def __init__(self, *, session_id: str, events: EventBus, config: CompactionConfig) -> None:
        self.session_id = session_id
        self.events = events
        self.breaker = CircuitBreaker(max_failures=config.max_summarizer_failures, cooldown_s=config.breaker_cooldown_s)
        self.enabled = False
        """A summarizer drives this layer (without one the layer never runs)."""
        self.capabilities: SummarizerCapabilities | None = None
        """What the summarizer declares beyond `summarize` (None: nothing)."""

    def use(self, summarizer: object | None) -> None:
        """Let ``summarizer`` (a `Summarizer` or `AsyncSummarizer`, or None) drive the layer."""
        self.enabled = summarizer is not None
        self.capabilities = summarizer if isinstance(summarizer, SummarizerCapabilities) else None

    @property
    def degrades(self) -> bool:
        """The summarizer answers ``degraded`` requests without a model: the layer runs while the breaker is open."""
        return self.capabilities is not None and self.capabilities.supports_degraded

    @property
    def checks_identifiers(self) -> bool:
        """The summarizer keeps identifiers by its own rules: the layer's identifier check is skipped."""
        return self.capabilities is not None and self.capabilities.checks_identifiers

    def due(self, book: RoundBook, config: CompactionConfig) -> bool:
        """The layer runs when a summarizer is set, its breaker allows, and evicted rounds are not yet folded in."""
        if not self.enabled or not book.n_evicted:
            return False
        if not self.breaker.allow() and not self.degrades:
            return False
        if summary_tokens(book, config, None) < 64:  # no room worth a summary: the ledger is denser in facts
            return False
        return bool(_unsummarized(book))

    def run(
        self, book: RoundBook, target: int, config: CompactionConfig
    ) -> Generator[SummaryRequest, SummaryReply, Change]:
        """Fold the newly evicted rounds into the running summary; ``items`` is 0 when the summarizer failed."""
        before = book.total()
        done = yield from self._fold(book, target, config)
        return Change(layer="summarize", tokens_before=before, tokens_after=book.total(), items=int(done))

    def _fold(
        self, book: RoundBook, target: int, config: CompactionConfig
    ) -> Generator[SummaryRequest, SummaryReply, bool]:
        fresh = _unsummarized(book)
        messages = [m for r in fresh for m in book.messages(r)]
        first = book.summary_span[0] if book.summary_span else messages[0].message_id
        span = (first, messages[-1].message_id)
        # the summary shares the context block with the ledger: ask for what will be shown
        degraded = not self.breaker.allow()
        request = SummaryRequest(
            previous=book.summary,
            messages=messages,
            max_tokens=max(64, summary_tokens(book, config, target)),
            span=span,
            degraded=degraded,
        )
        reply = yield request
        text: str | None = None
        fallback: str | None = None
        if isinstance(reply, SummaryRejected):  # a failure to count, with a summary to use
            problem: str | None = f"{reply.reason}: {reply}"
            fallback = reply.fallback
        else:
            text = reply
            problem = "the summarizer failed" if text is None else check_summary(text)
            if problem is None and text is not None:
                problem = _forged(text, messages)
            if problem is None and text is not None and not self.checks_identifiers:
                problem = lost_identifiers(book, fresh, text, request.max_tokens, config)
        if problem is not None and not degraded:
            self._failed(problem, config)
        if problem is not None:
            # the summarizer's own fallback (deterministic) still moves the summary forward
            usable = fallback is not None and check_summary(fallback) is None and _forged(fallback, messages) is None
            text = fallback if usable else None
            if text is None:
                return False
        elif not degraded:
            self.breaker.record_success()
        assert text is not None
        book.summary = text.strip()
        book.summary_span = span
        book.summarized_upto = fresh[-1].ordinal
        return True

    def _failed(self, problem: str, config: CompactionConfig) -> None:
        opened = self.breaker.record_failure()
        logger.warning("summary rejected for session %s: %s", self.session_id, problem)
        if opened:
            self.events.emit(
                Alert(
                    session_id=self.session_id,
                    alert="breaker-open",
                    detail=(
                        f"summarize layer stopped after {self.breaker.failures} consecutive failures "
                        f"(last: {problem}); retrying in {config.breaker_cooldown_s:.0f}s. "
                        "Clearing and eviction keep working."
                    ),
                )
            )

    def merge_ready(self, book: RoundBook) -> bool:
        """Swap in a better summary of exactly the current span when a background summarizer has one.

        Returns False when the summarizer's hook raised (counted by the caller; a compaction goes on).
        """
        if self.capabilities is None or book.summary is None:
            return True
        try:
            better = self.capabilities.take_ready(book.summary, book.summary_span)
        except Exception:  # a merge hook must never break a compaction
            logger.exception("summary merge hook failed for session %s", self.session_id)
            return False
        if isinstance(better, str) and check_summary(better) is None:
            span = [r for r in book.rounds if r.state == "evicted" and r.ordinal <= book.summarized_upto]
            if _forged(better, [m for r in span for m in book.messages(r)]) is None:
                book.summary = better.strip()
        return True


def _forged(summary: str, messages: Sequence[Message]) -> str | None:
    """Why a summary must be rejected for carrying an instruction that came from a tool output, or None."""
    sentence = forged_instruction(summary, messages)
    if sentence is None:
        return None
    return f"the summary repeats an instruction found in a tool output ({sentence[:120]!r}); tool output is data"


def summary_tokens(book: RoundBook, config: CompactionConfig, target: int | None) -> int:
    """The size the running summary is written for: its share of the context block (the ledger has the rest)."""
    return min(config.summary_max_tokens, int(context_room(book, config, target) * SUMMARY_SHARE) - 48)


def _unsummarized(book: RoundBook) -> list[BookRound]:
    return [r for r in book.rounds if r.state == "evicted" and r.ordinal > book.summarized_upto]


def lost_identifiers(
    book: RoundBook, fresh: Sequence[BookRound], text: str, max_tokens: int, config: CompactionConfig
) -> str | None:
    """Why a summary must be rejected for dropping the identifiers it was given, or None.

    Ids, dates and codes of the summarized rounds are what later steps need verbatim; a summary
    of ``max_tokens`` cannot hold them all, so it must keep a share of as many as it could.
    """
    given = [f for f in rank_facts(f for r in fresh for f in book.facts(r)) if fact_rank(f) <= 1]
    could_hold = min(len(given), max(5, max_tokens // 12))  # ids share the summary with its prose
    if could_hold < 5:
        return None
    kept = sum(1 for f in given if f in text)
    if kept < config.summary_min_identifiers * could_hold:
        return (
            f"the summary keeps {kept} of the {len(given)} identifiers it was given "
            f"(at least {config.summary_min_identifiers:.0%} of the {could_hold} it has room for)"
        )
    return None

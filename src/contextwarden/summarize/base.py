"""The summarizer contract: what the summarize layer asks (`SummaryRequest`) and who answers it.

Every summarizer of this package implements it, and the compaction layer calls it, so the
arrows point one way: `compaction` imports `summarize`, never the reverse.

The layer is written sans-IO: compaction yields a `SummaryRequest` and receives the summary
text (or None on failure). `Session.prepare()` drives it with a `Summarizer`,
`AsyncSession.prepare()` with an `AsyncSummarizer`; the logic exists once. A summarizer may
declare what else it can do (`SummarizerCapabilities`); the built-in summarizers do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..exceptions import SummaryRejected
from ..messages import Message

__all__ = [
    "AsyncSummarizer",
    "Summarizer",
    "SummarizerCapabilities",
    "SummaryReply",
    "SummaryRequest",
    "check_summary",
]


@dataclass(frozen=True, kw_only=True)
class SummaryRequest:
    """Fold ``messages`` into ``previous`` and return one summary of at most ``max_tokens``."""

    previous: str | None
    """The running summary so far (covering ``previous_span``), or None."""
    messages: Sequence[Message]
    """Transcript messages newly leaving the view, in order."""
    max_tokens: int
    span: tuple[str, str]
    """First and last message id the new summary will cover (previous span included)."""
    degraded: bool = False
    """The summarize layer's circuit breaker is open: answer without calling a model (deterministically)."""


SummaryReply = str | SummaryRejected | None
"""What a driver sends back into the flow: the text, a rejection carrying a fallback, or None (failed)."""


@runtime_checkable
class Summarizer(Protocol):
    """Produces a running summary; raising or returning junk counts as a failure."""

    def summarize(self, request: SummaryRequest) -> str:
        """The new running summary text."""
        ...


@runtime_checkable
class AsyncSummarizer(Protocol):
    """Async twin of `Summarizer`."""

    async def summarize(self, request: SummaryRequest) -> str:
        """The new running summary text."""
        ...


@runtime_checkable
class SummarizerCapabilities(Protocol):
    """What a summarizer (sync or async) can do besides `summarize`, all three declared together.

    A summarizer that declares none of them (only ``summarize``) gets the defaults: the layer
    stops while its breaker is open, checks every summary's identifiers itself, and never
    swaps a summary between compactions.
    """

    supports_degraded: bool
    """Answers a ``degraded`` request (the layer's breaker is open) without calling a model, so the
    summarize layer keeps running deterministically meanwhile."""
    checks_identifiers: bool
    """Keeps the identifiers it was given by its own rules: the layer skips its identifier check."""

    def take_ready(self, summary: str | None, span: tuple[str, str] | None = None) -> str | None:
        """A better summary of exactly ``span`` to replace ``summary`` with, or None (none is ready).

        Called at each compaction; a background summarizer hands in what it finished meanwhile,
        the others return None.
        """
        ...


_ERROR_MARKERS = (
    "error:",
    "traceback (most recent call last)",
    "i'm sorry, i can't",
    "i cannot help",
    "as an ai",
    "rate limit",
    "context_length_exceeded",
    "internal server error",
)


def check_summary(text: object) -> str | None:
    """Why a summary must be rejected (empty, not text, an error text), or None when it is usable."""
    if not isinstance(text, str):
        return f"summary is {type(text).__name__}, not text"
    stripped = text.strip()
    if not stripped:
        return "summary is empty"
    head = stripped[:300].lower()
    for marker in _ERROR_MARKERS:
        if head.startswith(marker) or (marker in head and len(stripped) < 400):
            return f"summary looks like an error text ({marker!r})"
    return None

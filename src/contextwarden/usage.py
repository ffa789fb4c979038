"""Token usage: what one request cost (`RequestUsage`) and what a session has cost so far (`SessionUsage`).

``input_tokens`` is always the *whole* prompt the provider processed, cached part included, so
that it can be compared with the library's own count of the view (the token counter is calibrated
against it). Providers that report cache reads and writes apart from the uncached input
(Anthropic) are normalised to this convention by their client.

Usage a provider did not report is not zero usage: some servers send none in streams (the
llama-cpp-python server, for one). Such a request's `RequestUsage` has ``reported=False``; a
`SessionUsage` counts it in ``unreported``, not in its totals, and calibration skips it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["RequestUsage", "SessionUsage"]


def _merge_details(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    merged = dict(a)
    for key, value in b.items():
        merged[key] = merged.get(key, 0) + value
    return merged


@dataclass(frozen=True, kw_only=True)
class RequestUsage:
    """Tokens one model request used, as the provider reported them (or as a test model estimated)."""

    input_tokens: int = 0
    """Prompt tokens, cached ones included."""
    output_tokens: int = 0
    """Completion tokens, reasoning tokens included."""
    cache_read_tokens: int = 0
    """Part of ``input_tokens`` served from the provider's prompt cache."""
    cache_write_tokens: int = 0
    """Part of ``input_tokens`` written to the provider's prompt cache."""
    details: Mapping[str, int] = field(default_factory=dict)
    """Other integer counters the provider reported (``reasoning_tokens``, ...)."""
    reported: bool = True
    """False when the provider reported no usage for the request (the counts are then 0 and mean
    "unknown", not "free"); for a sum, False when any request in it was unreported."""

    @classmethod
    def unreported(cls) -> RequestUsage:
        """The usage of a request whose provider reported none."""
        return cls(reported=False)

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: RequestUsage) -> RequestUsage:
        return RequestUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            details=_merge_details(self.details, other.details),
            reported=self.reported and other.reported,
        )


@dataclass(kw_only=True)
class SessionUsage:
    """Tokens accumulated over the requests of a session (or of any run of requests)."""

    requests: int = 0
    """Number of model requests counted (those whose usage was reported)."""
    input_tokens: int = 0
    """Prompt tokens over all requests, cached ones included."""
    output_tokens: int = 0
    """Completion tokens over all requests."""
    cache_read_tokens: int = 0
    """Prompt tokens served from the provider's cache over all requests."""
    cache_write_tokens: int = 0
    """Prompt tokens written to the provider's cache over all requests."""
    details: dict[str, int] = field(default_factory=dict)
    """Other provider counters, summed."""
    unreported: int = 0
    """Requests whose provider reported no usage: not in ``requests`` nor in the token totals."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def incr(self, usage: RequestUsage) -> None:
        """Add one request's usage in place (an unreported one only counts in ``unreported``)."""
        if not usage.reported:
            self.unreported += 1
            return
        self.requests += 1
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        self.details = _merge_details(self.details, usage.details)

    def __add__(self, other: SessionUsage) -> SessionUsage:
        return SessionUsage(
            requests=self.requests + other.requests,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            details=_merge_details(self.details, other.details),
            unreported=self.unreported + other.unreported,
        )

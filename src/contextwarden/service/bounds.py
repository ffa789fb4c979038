"""How much of an upstream's reply the service holds: a whole body, a stream, one stream event.

An upstream that sends a 400 MB body, an endless stream or an event without its blank line would
otherwise grow the process without bound. Each bound is a setting of ``[service]``; going past it
ends that reply with a 502 that names the setting (inside the stream when it already started).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ServiceError

__all__ = ["ReplyLimits", "event_too_large", "reply_too_large", "stream_too_long"]


@dataclass(frozen=True)
class ReplyLimits:
    """The bounds on what the service reads from the upstream, in bytes."""

    max_reply_bytes: int = 32 * 1024 * 1024
    """A body read whole (a non-streamed reply, an error body)."""
    max_stream_bytes: int = 256 * 1024 * 1024
    """A whole stream."""
    max_event_bytes: int = 8 * 1024 * 1024
    """One event of a stream."""


def reply_too_large(url: str, size: int, limit: int) -> ServiceError:
    """The 502 for a body past `ReplyLimits.max_reply_bytes`."""
    return ServiceError(
        502,
        f"The upstream at {url} sent a reply of {size} bytes or more, over the service's limit of {limit} bytes; "
        "raise `[service] max_reply_bytes` if such replies are expected.",
        code="upstream_reply_too_large",
    )


def stream_too_long(url: str, limit: int) -> ServiceError:
    """The 502 for a stream past `ReplyLimits.max_stream_bytes`."""
    return ServiceError(
        502,
        f"The upstream at {url} streamed more than {limit} bytes, the service's limit; the stream was cut. Raise "
        "`[service] max_stream_bytes` if such replies are expected.",
        code="upstream_stream_too_long",
    )


def event_too_large(limit: int) -> ServiceError:
    """The 502 for one stream event past `ReplyLimits.max_event_bytes`."""
    return ServiceError(
        502,
        f"The upstream sent a stream event of more than {limit} bytes without ending it (no blank line), over the "
        "service's limit; raise `[service] max_event_bytes` if such events are expected.",
        code="upstream_event_too_large",
    )

"""Telling a stream that failed before its first event from a prompt too long for the server.

Servers refuse an over-long *streamed* request in ways that do not look like a refusal:
llama-cpp-python's server answers HTTP 200 and an empty event stream, or resets the connection,
or closes it before any response. Each surfaces as a `StreamInterrupted` before the first event.
The recovery every caller (`Session.stream`, the proxy) follows is the same:

1. `likely_overflow`: is the prompt big enough for that to be the reason? (Larger than any prompt
   the server answered in this conversation, or near the window.)
2. Send the same request once more without streaming: a server that says nothing in a stream
   says "maximum context length is 2048 tokens" in a plain reply (a `ContextOverflowError`).
3. `with_served_limit`: when that error names no window, ask the server's own endpoints for it
   (`contextwarden.llm.served_window.probe`), so the caller can adopt it and compact to fit.
4. Compact with the reactive layer and retry once.

The functions here are the decisions; the sending stays with the caller (a model client, the
proxy's upstream).
"""

from __future__ import annotations

import logging

from ..exceptions import ContextOverflowError, UpstreamError, UsageError
from .served_window import ServedWindow, aprobe, probe

__all__ = [
    "NEAR_WINDOW",
    "awith_served_limit",
    "likely_overflow",
    "overflow_after_cut",
    "overflow_from_window",
    "with_served_limit",
]

logger = logging.getLogger("contextwarden.llm")

NEAR_WINDOW = 0.9
"""Share of the window from which a stream cut before its first event counts as a likely overflow."""


def likely_overflow(
    *, prompt_tokens: int, window: int | None, largest_answered: int, near: float = NEAR_WINDOW
) -> bool:
    """Whether a stream that ended before its first event may be the server refusing a too-long prompt.

    Args:
        prompt_tokens: The request's prompt as counted (the view's tokens).
        window: The known or configured window, in the same tokens; ``None`` when unknown.
        largest_answered: The largest prompt the server answered in this conversation (0: none yet).
        near: Share of ``window`` from which the prompt counts as near it.
    """
    if prompt_tokens > largest_answered:
        return True
    return window is not None and window > 0 and prompt_tokens >= near * window


def overflow_from_window(
    served: ServedWindow, *, url: str | None, prompt_tokens: int | None = None
) -> ContextOverflowError | None:
    """The overflow error a probed window implies, or ``None`` when the server named no window."""
    if served.window is None:
        return None
    size = f" (counted {prompt_tokens} tokens)" if prompt_tokens is not None else ""
    return ContextOverflowError(
        f"{url or served.base_url} cut a streamed reply before its first event and serves a context window of"
        f" {served.window} tokens ({served.source}){size}: the prompt most likely does not fit; compact the"
        " conversation and retry.",
        url=url,
        status_code=None,
        limit=served.window,
        requested=prompt_tokens,
    )


def overflow_after_cut(error: UpstreamError, served: ServedWindow, *, window: int) -> ContextOverflowError:
    """The overflow a cut stream and a failed plain retry amount to, when the server's window is smaller.

    Args:
        error: The plain retry's failure (no HTTP reply).
        served: What the server's endpoints said.
        window: The window the caller held the prompt to.

    Raises:
        UpstreamError: ``error``, when the server names no window smaller than ``window``.
    """
    found = overflow_from_window(served, url=error.url)
    if found is None or found.limit is None or found.limit >= window:
        raise error
    return found


def _merged(error: ContextOverflowError, served: ServedWindow | None) -> ContextOverflowError:
    if served is None or served.window is None:
        return error
    merged = ContextOverflowError(
        f"{error} (the server's {served.source} says its window is {served.window} tokens)",
        url=error.url,
        status_code=error.status_code,
        limit=served.window,
        requested=error.requested,
    )
    merged.__cause__ = error
    return merged


def with_served_limit(
    error: ContextOverflowError, base_url: str | None, *, model: str | None = None
) -> ContextOverflowError:
    """``error`` with the server's window filled in from its own endpoints when the error named none.

    A probe that fails (the server has no such endpoint, or is gone) leaves ``error`` as it was.
    """
    if error.limit is not None or base_url is None:
        return error
    try:
        served = probe(base_url, model=model, overflow_probe=False)
    except (UpstreamError, UsageError) as exc:
        logger.info("probing %s for its window failed: %s", base_url, exc)
        return error
    return _merged(error, served)


async def awith_served_limit(
    error: ContextOverflowError, base_url: str | None, *, model: str | None = None
) -> ContextOverflowError:
    """The async twin of `with_served_limit`."""
    if error.limit is not None or base_url is None:
        return error
    try:
        served = await aprobe(base_url, model=model, overflow_probe=False)
    except (UpstreamError, UsageError) as exc:
        logger.info("probing %s for its window failed: %s", base_url, exc)
        return error
    return _merged(error, served)

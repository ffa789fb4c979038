"""Calibration from the server's own token count, for replies that carry no usage.

Some servers report no usage in streams (llama-cpp-python's server never does, whatever the
request asks), so a session that only streams would never calibrate its counts: its budget would
trust a tokenizer that is not the model's. When a reply arrives without usage and the session's
calibration holds fewer than `ServedCounts.limit` samples, the session asks the server to count
the request with its own tokenizer, one short call per reply:

* **The endpoint** is the one the session's `ServedWindow` names (``served_window="probe"``), else
  the one found by probing the model client's base URL once, without the overflow probe
  (`contextwarden.llm.served_window.probe`): llama.cpp's ``POST /tokenize``, vLLM's
  ``POST /tokenize``, llama-cpp-python's ``POST /extras/tokenize/count``.
* **The text** is every text the session's counter counts in the request (`request_text`): the
  messages' texts, tool-call names and arguments, thinking, and the tool schemas as JSON.
* **The sample** is the session's estimate of the request with that text's tokens replaced by the
  server's count of them (``estimated - ours + theirs``): the chat template's own tokens stay as the
  counter's framing estimates them, which is close for the few tokens a template adds per message.

A server without such an endpoint, or one that fails to count, is not asked again by the session.
Once the calibration holds ``limit`` samples (from reported usage or from these counts) no call is
made: a session pays at most ``limit`` counts and one probe, then calibrates like any other.

The logic is a generator of HTTP calls (`ServedCounts.flow`); `Session` and `AsyncSession` carry
the calls out.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .llm.served_calls import Answer, Call
from .llm.served_window import ServedWindow, count_flow, probe_flow
from .messages import Message, TextPart, ThinkingPart, ToolCall
from .tokens.calibration import Calibration
from .usage import RequestUsage

__all__ = ["DEFAULT_COUNTED_SAMPLES", "ServedCounts", "request_text"]

DEFAULT_COUNTED_SAMPLES = 5
"""Calibration samples a session takes from the server's token count before it stops asking: two more
than the three a calibration needs before it is applied, so one odd sample cannot set the factor."""


def request_text(messages: Iterable[Message], tools: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The texts of a request a counter counts, joined by newlines (images and framing left out)."""
    texts: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, TextPart | ThinkingPart):
                texts.append(part.text)
            elif isinstance(part, ToolCall):
                texts.append(part.name)
                texts.append(part.arguments)
        if message.name and message.role != "tool":
            texts.append(message.name)
    if tools:
        texts.append(json.dumps(list(tools), ensure_ascii=False, separators=(",", ":"), default=str))
    return "\n".join(text for text in texts if text)


@dataclass(kw_only=True)
class ServedCounts:
    """When and where a session asks the server to count a request whose reply carried no usage."""

    limit: int = DEFAULT_COUNTED_SAMPLES
    """Stop asking once the calibration holds this many samples, and at least its ``min_samples`` (0: never ask)."""
    served: ServedWindow | None = None
    """The server's endpoints: the session's own `ServedWindow`, or what probing the model's server found."""
    unavailable: bool = False
    """The server has no token-count endpoint, or it failed once: not asked again."""
    taken: int = 0
    """Samples this session took from the server's count."""
    _probed: set[str] = field(default_factory=set, repr=False)

    def wanted(self, calibration: Calibration, usage: RequestUsage, base_url: str | None) -> bool:
        """Whether a reply with ``usage`` should be counted on the server (for a model at ``base_url``)."""
        if usage.reported or self.unavailable or self.limit <= 0:
            return False
        if calibration.samples >= max(self.limit, calibration.min_samples):
            return False
        known = self.served is not None and self.served.token_count_url is not None
        return known or (base_url is not None and base_url not in self._probed)

    def flow(self, text: str, *, base_url: str | None, model: str | None) -> Generator[Call, Answer, int | None]:
        """The server's count of ``text`` (probing ``base_url`` first when no endpoint is known), or None."""
        served = self.served
        if (served is None or served.token_count_url is None) and base_url is not None and base_url not in self._probed:
            self._probed.add(base_url)
            served = yield from probe_flow(base_url, model, False)
            self.served = served
        if served is None or served.token_count_url is None:
            self.unavailable = True
            return None
        counted = yield from count_flow(served, text)
        if counted is None or counted <= 0:
            self.unavailable = True
            return None
        self.taken += 1
        return counted

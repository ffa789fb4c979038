"""Replay a recorded transcript through a session, turn by turn, and measure what each request would have been.

A turn is one model call: the transcript is cut before each assistant message (the reply that
call produced), so the requests are the ones the agent made, in order. After the last message one
more request is prepared: the next call. Per turn: tokens sent, tokens of the common prefix with
the previous request (what a provider's prompt cache serves), utilization, the layer that ran and
the time to prepare. At the end: compactions by layer, the peak, and probe retention of the
facts the last turn uses: identifiers in the transcript's last assistant message that occur
earlier in it, looked up in the view that call would have received.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..messages import Message
from ..session import Session
from ..summarize import message_identifiers, readable_text

__all__ = ["ReplayRun", "ReplayTurn", "last_turn_facts", "replay_transcript", "split_turns"]


@dataclass(frozen=True, kw_only=True)
class ReplayTurn:
    """One request of the replay."""

    turn: int
    sent: int
    """Tokens of the request's messages (the session's counter)."""
    reused: int
    """Tokens of its common prefix with the previous request."""
    utilization: float
    state: str
    layer: str | None
    prepare_ms: float


@dataclass(frozen=True, kw_only=True)
class ReplayRun:
    """One configuration replayed over one transcript."""

    name: str
    window: int
    budget: int
    turns: tuple[ReplayTurn, ...]
    compactions: dict[str, int]
    facts: tuple[str, ...]
    """Facts the last turn uses (see the module docstring)."""
    facts_kept: tuple[str, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    """What the configuration set (high/low water, layers...), for the report."""

    @property
    def tokens_sent(self) -> int:
        return sum(t.sent for t in self.turns)

    @property
    def prefix_reuse(self) -> float:
        """Reused / sent over the whole replay (0.0 when nothing was sent)."""
        sent = self.tokens_sent
        return sum(t.reused for t in self.turns) / sent if sent else 0.0

    @property
    def peak(self) -> int:
        return max((t.sent for t in self.turns), default=0)

    @property
    def peak_utilization(self) -> float:
        return max((t.utilization for t in self.turns), default=0.0)

    @property
    def retention(self) -> float | None:
        """Share of the last turn's facts in its view (None: the last turn uses no earlier fact)."""
        return len(self.facts_kept) / len(self.facts) if self.facts else None

    def time_per_turn_ms(self, q: float = 0.5) -> float:
        """A percentile of the prepare times (``q`` = 0.5: the median)."""
        times = sorted(t.prepare_ms for t in self.turns)
        if not times:
            return 0.0
        return times[min(len(times) - 1, int(q * len(times)))]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form with the per-turn series."""
        return {
            "name": self.name,
            "window": self.window,
            "budget": self.budget,
            "settings": self.settings,
            "turns": len(self.turns),
            "tokens_sent": self.tokens_sent,
            "prefix_reuse": round(self.prefix_reuse, 4),
            "peak_tokens": self.peak,
            "peak_utilization": round(self.peak_utilization, 4),
            "compactions": self.compactions,
            "facts": len(self.facts),
            "facts_kept": len(self.facts_kept),
            "retention": None if self.retention is None else round(self.retention, 4),
            "facts_lost": [f for f in self.facts if f not in self.facts_kept],
            "prepare_ms": {
                "p50": round(self.time_per_turn_ms(0.5), 3),
                "p95": round(self.time_per_turn_ms(0.95), 3),
                "mean": round(statistics.fmean(t.prepare_ms for t in self.turns), 3) if self.turns else 0.0,
            },
            "per_turn": {
                "sent": [t.sent for t in self.turns],
                "reused": [t.reused for t in self.turns],
                "utilization": [t.utilization for t in self.turns],
                "layer": [t.layer for t in self.turns],
                "prepare_ms": [t.prepare_ms for t in self.turns],
            },
        }


def split_turns(messages: Sequence[Message]) -> list[list[Message]]:
    """The transcript cut before each assistant message: what arrived before each model call.

    Consecutive assistant messages after one call (a reply split in several) stay in one turn.
    The last chunk holds what arrived after the last reply (possibly nothing).
    """
    chunks: list[list[Message]] = [[]]
    for i, m in enumerate(messages):
        if m.role == "assistant" and i > 0 and messages[i - 1].role != "assistant" and chunks[-1]:
            chunks.append([])
        chunks[-1].append(m)
    return chunks


def last_turn_facts(messages: Sequence[Message]) -> tuple[list[Message], list[str]]:
    """The history before the transcript's last assistant message, and the facts that message uses.

    Facts: identifiers of the last assistant message (text and tool-call arguments) that occur in
    what came before it; none when the transcript has no assistant message.
    """
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    if last < 0:
        return list(messages), []
    history = list(messages[:last])
    earlier = readable_text(history)
    facts = [f for f in message_identifiers(messages[last]) if f in earlier]
    return history, facts


def replay_transcript(
    messages: Sequence[Message],
    make_session: Callable[[], Session],
    *,
    name: str,
    settings: dict[str, Any] | None = None,
) -> ReplayRun:
    """Replay ``messages`` through a fresh session from ``make_session`` (see the module docstring)."""
    session = make_session()
    acc = session.accountant
    history, facts = last_turn_facts(messages)
    chunks = split_turns(messages)
    # the request the last assistant message answered: the last one prepared before it arrived
    ends = [0] * len(chunks)
    total = 0
    for i, chunk in enumerate(chunks):
        total += len(chunk)
        ends[i] = total
    answered = max((i for i, end in enumerate(ends) if end <= len(history)), default=0)
    turns: list[ReplayTurn] = []
    prev: list[tuple[str, str]] = []
    facts_kept: list[str] = []
    for index, chunk in enumerate(chunks):
        if chunk:
            session.add(chunk)
        started = time.perf_counter()
        prepared = session.prepare(format="internal")
        ms = (time.perf_counter() - started) * 1000
        view = prepared.view
        keys = [(m.message_id, m.content_hash) for m in view]
        counts = [acc.count_message(m) for m in view]
        reused = 0
        for a, b, n in zip(prev, keys, counts, strict=False):
            if a != b:
                break
            reused += n
        prev = keys
        status = prepared.status
        turns.append(
            ReplayTurn(
                turn=index + 1,
                sent=sum(counts),
                reused=reused,
                utilization=status.ratio,
                state=status.state,
                layer=status.layer,
                prepare_ms=round(ms, 3),
            )
        )
        if index == answered and facts:
            text = readable_text(view)
            facts_kept = [f for f in facts if f in text]
    status = session.status()
    return ReplayRun(
        name=name,
        window=session.budget.window,
        budget=session.budget.effective,
        turns=tuple(turns),
        compactions={k: v for k, v in sorted(status.compactions.items()) if v},
        facts=tuple(facts),
        facts_kept=tuple(facts_kept),
        settings=settings or {},
    )

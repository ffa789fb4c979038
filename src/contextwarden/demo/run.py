"""Run a generated session through a `Session`, turn by turn, and measure what happened.

Per turn: the view's size and state, the layer that ran, tokens by component, and the prompt-cache
reuse — tokens of the longest common prefix with the previous request over the tokens sent (the
definition of ../shared/bench/peers_bench.py). At the end: which planted facts are still in the
view the model would receive.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..adapters import to_messages
from ..benchmarks.probes import view_text
from ..events import Alert, CompactionFinished, Event
from ..session import Session
from .generator import DemoSession, PlantedFact

__all__ = [
    "DEMO_EPOCH",
    "TURN_SECONDS",
    "CompactionRecord",
    "DemoResult",
    "TurnClock",
    "TurnStats",
    "run_demo",
    "view_text",
]

DEMO_EPOCH = 1_767_225_600.0
"""When the demo's session starts (2026-01-01 00:00 UTC): its messages carry times, not the wall clock."""
TURN_SECONDS = 60.0
"""The demo's time between two turns."""


class TurnClock:
    """The demo's clock: the time of the turn being run (memory's recency and labels read it)."""

    def __init__(self) -> None:
        self.now = DEMO_EPOCH

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True, kw_only=True)
class TurnStats:
    """The request of one turn."""

    turn: int
    used: int
    """Tokens of the view (the request's messages)."""
    budget: int
    """Effective budget."""
    ratio: float
    state: str
    layer: str | None
    """The last layer that ran before this request (None: the view only appended)."""
    breakdown: dict[str, int]
    view_messages: int
    reused: int
    """Tokens of the common prefix with the previous request."""
    sent: int
    """Tokens of this request's messages (the denominator of the reuse ratio)."""
    transcript_tokens: int
    """Tokens of the whole transcript so far (what sending everything would cost)."""
    facts_planted: int
    facts_in_view: int
    prepare_ms: float
    recalled: int = 0
    """Memories the view shows in recalled blocks."""


@dataclass(frozen=True, kw_only=True)
class RecalledMemory:
    """One memory a recall brought into the view, with its provenance."""

    label: str
    """How the view labels it: source, ``#<step>``, time and score."""
    text: str
    role: str
    message_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class RecallRecord:
    """One recall: a block of memories put into the view before a request."""

    turn: int
    query: str
    """The request's words the recall searched with (as the block's ``recall`` call names them)."""
    tokens: int
    memories: tuple[RecalledMemory, ...]


@dataclass(frozen=True, kw_only=True)
class CompactionRecord:
    """One compaction layer that changed the view."""

    turn: int
    layer: str
    trigger: str
    before: int
    after: int
    items: int
    duration_ms: float


@dataclass(kw_only=True)
class DemoResult:
    """Everything the final table and the HTML report show."""

    seed: int
    model: str | None
    window: int
    reserved_output: int
    tool_schemas: int
    budget: int
    thresholds: dict[str, float]
    """The fixed thresholds the state uses (empty when the state follows the compaction band)."""
    high_water: float
    low_water: float
    session_id: str
    store_url: str
    summarizer: str
    memory: str | None = None
    rule: str = ""
    """How the state is named (`contextwarden.figures.StateRule.text`)."""
    """What long-term memory did (None: the session had none)."""
    turns: list[TurnStats] = field(default_factory=list)
    compactions: list[CompactionRecord] = field(default_factory=list)
    recalls: list[RecallRecord] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    facts: list[PlantedFact] = field(default_factory=list)
    found: list[str] = field(default_factory=list)
    messages: int = 0
    snapshots: int = 0
    compute_s: float = 0.0
    wall_s: float = 0.0

    @property
    def tokens_seen(self) -> int:
        """Tokens of the whole transcript at the end."""
        return self.turns[-1].transcript_tokens if self.turns else 0

    @property
    def tokens_sent(self) -> int:
        """Tokens sent over all requests."""
        return sum(t.sent for t in self.turns)

    @property
    def tokens_full_history(self) -> int:
        """Tokens that sending the whole transcript on every request would have cost."""
        return sum(t.transcript_tokens for t in self.turns)

    @property
    def prefix_reuse(self) -> float:
        """Share of the tokens sent that a prompt cache could serve (common prefix with the previous request)."""
        sent = self.tokens_sent
        return round(sum(t.reused for t in self.turns) / sent, 4) if sent else 0.0

    @property
    def compactions_by_layer(self) -> dict[str, int]:
        """Layer runs that changed the view, by layer."""
        out: dict[str, int] = {}
        for c in self.compactions:
            out[c.layer] = out.get(c.layer, 0) + 1
        return out

    @property
    def saved_by_layer(self) -> dict[str, int]:
        """Tokens each layer took out of the view, summed over its runs."""
        out: dict[str, int] = {}
        for c in self.compactions:
            out[c.layer] = out.get(c.layer, 0) + max(0, c.before - c.after)
        return out

    @property
    def compaction_turns(self) -> int:
        """Turns on which a compaction ran."""
        return len({c.turn for c in self.compactions})

    @property
    def retention(self) -> float:
        """Share of the planted facts found verbatim in the final view."""
        return round(len(self.found) / len(self.facts), 4) if self.facts else 0.0

    @property
    def peak(self) -> int:
        """Largest request."""
        return max((t.used for t in self.turns), default=0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the per-turn series included)."""
        return {
            "seed": self.seed,
            "model": self.model,
            "window": self.window,
            "reserved_output": self.reserved_output,
            "tool_schemas": self.tool_schemas,
            "budget": self.budget,
            "thresholds": self.thresholds,
            "rule": self.rule,
            "high_water": self.high_water,
            "low_water": self.low_water,
            "session_id": self.session_id,
            "store_url": self.store_url,
            "summarizer": self.summarizer,
            "memory": self.memory,
            "turns": len(self.turns),
            "messages": self.messages,
            "tokens_seen": self.tokens_seen,
            "tokens_sent": self.tokens_sent,
            "tokens_full_history": self.tokens_full_history,
            "peak": self.peak,
            "prefix_reuse": self.prefix_reuse,
            "compactions_by_layer": self.compactions_by_layer,
            "compaction_turns": self.compaction_turns,
            "snapshots": self.snapshots,
            "retention": self.retention,
            "facts": [
                {"kind": f.kind, "value": f.value, "turn": f.turn, "found": f.value in self.found} for f in self.facts
            ],
            "recalls": [
                {
                    "turn": r.turn,
                    "query": r.query,
                    "tokens": r.tokens,
                    "memories": [
                        {"label": m.label, "role": m.role, "message_ids": list(m.message_ids), "text": m.text}
                        for m in r.memories
                    ],
                }
                for r in self.recalls
            ],
            "alerts": self.alerts,
            "compute_s": round(self.compute_s, 3),
            "wall_s": round(self.wall_s, 3),
        }


def run_demo(
    demo: DemoSession,
    session: Session,
    *,
    result: DemoResult,
    on_turn: Callable[[TurnStats, list[CompactionRecord]], None] | None = None,
    delay: float = 0.0,
    clock: TurnClock | None = None,
) -> DemoResult:
    """Add each turn's messages, prepare the view, record the turn; fills and returns ``result``.

    Args:
        demo: The generated session.
        session: A fresh session (its store, if any, receives the transcript, snapshots and audit).
        result: Carries the run's settings; the measurements are added to it.
        on_turn: Called after each turn with its stats and the compactions that ran in it.
        delay: Seconds to pause after each turn (for a live view that people can follow).
        clock: Set to each turn's time (the session's memory reads it), so the same seed recalls alike.
    """
    acc = session.accountant
    fresh: list[CompactionRecord] = []
    turn_no = 0

    def listen(event: Event) -> None:
        # a layer run that did not make the view smaller is not a compaction (see the summarize layer)
        if isinstance(event, CompactionFinished) and event.items > 0 and event.tokens_after < event.tokens_before:
            fresh.append(
                CompactionRecord(
                    turn=turn_no,
                    layer=event.layer,
                    trigger=event.trigger,
                    before=event.tokens_before,
                    after=event.tokens_after,
                    items=event.items,
                    duration_ms=event.duration_ms,
                )
            )
        elif isinstance(event, Alert):
            result.alerts.append({"turn": turn_no, "alert": event.alert, "detail": event.detail})

    unsubscribe = session.subscribe(listen)
    result.facts = list(demo.facts)
    started = time.perf_counter()
    compute = 0.0
    try:
        # Message ids from the turn and position, not random ones: snapshot ids derive from them and are
        # shown in the view, so random ids would make the same seed send a few different tokens.
        system = to_messages([{**demo.system, "id": "demo-0-0"}], format="openai")
        t0 = time.perf_counter()
        session.add(system)
        transcript_tokens = sum(acc.count_message(m) for m in system)
        compute += time.perf_counter() - t0
        result.messages = len(system)
        prev_keys: list[tuple[str, str]] = []
        recorded: set[str] = set()
        planted_by_turn = [sum(1 for f in demo.facts if f.turn <= i) for i in range(len(demo.turns) + 1)]
        for index, raw in enumerate(demo.turns, 1):
            turn_no = index
            t0 = time.perf_counter()
            when = DEMO_EPOCH + index * TURN_SECONDS
            if clock is not None:
                clock.now = when
            msgs = [
                dataclasses.replace(m, created_at=when)
                for m in to_messages([{**m, "id": f"demo-{index}-{j}"} for j, m in enumerate(raw)], format="openai")
            ]
            session.add(msgs)
            transcript_tokens += sum(acc.count_message(m) for m in msgs)
            p0 = time.perf_counter()
            prepared = session.prepare(format="internal")
            prepare_ms = (time.perf_counter() - p0) * 1000
            view = prepared.view
            in_blocks = _new_recalls(session, result, index, recorded) if session.memory is not None else 0
            keys = [(m.message_id, m.content_hash) for m in view]
            counts = [acc.count_message(m) for m in view]
            reused = 0
            for a, b, n in zip(prev_keys, keys, counts, strict=False):
                if a != b:
                    break
                reused += n
            prev_keys = keys
            planted = planted_by_turn[index]
            text = view_text(view)
            in_view = sum(1 for f in demo.facts if f.turn <= index and f.value in text)
            compute += time.perf_counter() - t0
            s = prepared.status
            stats = TurnStats(
                turn=index,
                used=s.used,
                budget=s.budget,
                ratio=s.ratio,
                state=s.state,
                layer=s.layer,
                breakdown=dict(s.breakdown),
                view_messages=len(view),
                reused=reused,
                sent=sum(counts),
                transcript_tokens=transcript_tokens,
                facts_planted=planted,
                facts_in_view=in_view,
                prepare_ms=round(prepare_ms, 3),
                recalled=in_blocks,
            )
            result.turns.append(stats)
            result.messages += len(msgs)
            new, fresh[:] = list(fresh), []
            result.compactions.extend(new)
            if on_turn is not None:
                on_turn(stats, new)
            if delay > 0:
                time.sleep(delay)
        result.found = [f.value for f in demo.facts if f.value in text]
        recalled = session.status().memory
        if recalled is not None:
            result.memory = (
                f"{recalled.written:,} memories written; the final view shows {recalled.hits} recalled "
                f"({recalled.tokens:,} tokens, {recalled.retrieval} retrieval)"
                + (f"; last failure: {recalled.error}" if recalled.error else "")
            )
        result.snapshots = len(session.snapshots.list_snapshots(session.session_id))
    finally:
        unsubscribe()
    result.compute_s = compute
    result.wall_s = time.perf_counter() - started
    return result


_EXCERPT_CHARS = 240
"""Characters of a recalled memory the result keeps (the report shows what came back, not all of it)."""


def _new_recalls(session: Session, result: DemoResult, turn: int, recorded: set[str]) -> int:
    """Record in ``result`` the recalled blocks the view shows for the first time; returns the memories it shows."""
    assert session.memory is not None
    shown = session.memory.shown
    for block in shown:
        if block.result.message_id in recorded:
            continue
        recorded.add(block.result.message_id)
        call = block.call.tool_calls[0]
        query = json.loads(call.arguments).get("query", "")
        memories = tuple(
            RecalledMemory(label=i.label, text=i.text[:_EXCERPT_CHARS], role=i.role, message_ids=i.message_ids)
            for i in block.items
        )
        result.recalls.append(RecallRecord(turn=turn, query=str(query), tokens=block.tokens, memories=memories))
    return sum(len(b.items) for b in shown)

"""View state export and import: what compaction decided, saved apart from the transcript.

A session store keeps the transcript (append-only) and this state (saved with compare-and-set
after each compaction). Resuming replays the transcript into a fresh round book and restores
the state onto it: cleared rounds get their stand-ins rebuilt (deterministic), evicted rounds
leave the view, and the ledger, notes, running summary and counters come back as they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import SchemaError
from ..ledger import Ledger
from ..notes import Notes
from ..tokens.calibration import Calibration
from .book import RoundBook
from .clear import stand_ins
from .config import CompactionConfig

__all__ = ["FORMAT", "Counters", "export_state", "import_state"]

FORMAT = 1
"""Version of the state document; a store holding another one needs `contextkeeper db migrate`."""


@dataclass(kw_only=True)
class Counters:
    """The orchestrator's counters that persist with the view state."""

    turn: int = 0
    compactions: dict[str, int] = field(default_factory=dict)
    """Layer runs so far in this session, by layer."""
    deepen: float = 0.0
    """How much lower than ``low_water`` compactions cut after thrashing."""
    breaker_failures: int = 0
    breaker_total_failures: int = 0


def export_state(book: RoundBook, counters: Counters, calibration: Calibration) -> dict[str, Any]:
    """The view state as JSON: what compaction decided, not the transcript (stored apart)."""
    return {
        "format": FORMAT,
        "transcript_messages": len(book.transcript),
        "evicted": [r.ordinal for r in book.rounds if r.state == "evicted"],
        "cleared": [r.ordinal for r in book.rounds if r.state == "cleared"],
        "ledger": book.ledger.to_dict(),
        "notes": book.notes.to_dict(),
        "summary": book.summary,
        "summary_span": list(book.summary_span) if book.summary_span else None,
        "summarized_upto": book.summarized_upto,
        "turn": counters.turn,
        "compactions": dict(counters.compactions),
        "deepen": counters.deepen,
        "breaker": {"failures": counters.breaker_failures, "total_failures": counters.breaker_total_failures},
        "calibration": calibration.to_dict(),
    }


def import_state(
    book: RoundBook, state: Mapping[str, Any], config: CompactionConfig, calibration: Calibration
) -> tuple[Counters, Calibration]:
    """Restore what `export_state` saved onto a book whose transcript was replayed.

    Returns the counters and the calibration (``calibration`` itself when none was saved) for
    the orchestrator to take.
    The context block is not rendered here (the orchestrator renders and rebuilds the view).

    Raises:
        SchemaError: the state document has a format this version does not know.
    """
    if state.get("format") != FORMAT:
        raise SchemaError(
            f"session {book.session_id!r}: view state format {state.get('format')!r} is not known to this "
            "version of contextkeeper; upgrade contextkeeper or run `contextkeeper db migrate`.",
            session_id=book.session_id,
        )
    by_ordinal = {r.ordinal: r for r in book.rounds}
    for ordinal in state.get("cleared", []):
        r = by_ordinal.get(int(ordinal))
        if r is not None and r.state == "full":
            shown = stand_ins(book, r, config)
            if shown is not None:
                book.show(r, shown)
    for ordinal in state.get("evicted", []):
        r = by_ordinal.get(int(ordinal))
        if r is not None:
            book.evict(r, record=False)
    book.ledger = Ledger.from_dict(state.get("ledger", {}))
    book.notes = Notes.from_dict(state["notes"]) if "notes" in state else Notes()
    for entry in book.ledger.entries:
        r = by_ordinal.get(entry.step)
        if r is not None:
            r.ledger_step = entry.step
    book.summary = state.get("summary")
    span = state.get("summary_span")
    book.summary_span = (str(span[0]), str(span[1])) if span else None
    book.summarized_upto = int(state.get("summarized_upto", -1))
    breaker = state.get("breaker", {})
    counters = Counters(
        turn=int(state.get("turn", 0)),
        compactions={str(k): int(v) for k, v in state.get("compactions", {}).items()},
        deepen=float(state.get("deepen", 0.0)),
        breaker_failures=int(breaker.get("failures", 0)),
        breaker_total_failures=int(breaker.get("total_failures", 0)),
    )
    if "calibration" in state:
        calibration = type(calibration).from_dict(state["calibration"])
    return counters, calibration

"""View state export and import: what compaction decided, saved apart from the transcript.

A session store keeps the transcript (append-only) and this state (saved with compare-and-set
after each compaction). Resuming replays the transcript into a fresh round book and restores
the state onto it, so a resumed session shows exactly the view it had: evicted rounds leave the
view; the ledger, notes, working set, running summary and counters come back as they were; and
everything the view was made of is restored as it was, not computed again (the ``view`` part):
the context block (its text depends on the room the compaction had, on the ledger's size
calibration, and on the state the summary and notes had then), the stand-ins of cleared rounds
(a round shrunk under a tight budget has other stand-ins than a plainly cleared one), and what
decides the next compaction (the gate after a compaction the cascade table held above high
water, the thrashing streak, the reply count of the last compaction). A view state saved by an
older version, without these, is imported as before (stand-ins and the context block made again).

`check_state` validates the shape of a whole state before any of it is applied: wrong shapes
raise `SchemaError` naming the session and the field, never a ValueError or TypeError.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._json import storable
from ..events import LAYER_NAMES, LayerName
from ..exceptions import ContextWardenError, SchemaError
from ..ledger import Ledger
from ..messages import Message
from ..notes import Notes
from ..tokens.calibration import Calibration
from ..workingset import WorkingSet
from .book import RoundBook
from .clear import cleared_stand_in, stand_ins
from .config import CompactionConfig

__all__ = [
    "FORMAT",
    "Counters",
    "check_format",
    "check_saved_view",
    "check_state",
    "export_state",
    "import_state",
    "saved_view",
]

FORMAT = 1
"""Version of the state document; a store holding another one needs `contextwarden db migrate`."""


@dataclass(kw_only=True)
class Counters:
    """The orchestrator's counters that persist with the view state."""

    turn: int = 0
    compactions: dict[str, int] = field(default_factory=dict)
    """Layer runs so far in this session, by layer; replaced on every run, never changed in place
    (a `StatusReading` holds the mapping of its turn)."""
    deepen: float = 0.0
    """How much lower than ``low_water`` compactions cut after thrashing."""
    breaker_failures: int = 0
    breaker_total_failures: int = 0
    gate_floor: float = 0.0
    """After a compaction the cascade table held above high water: the utilization that may retry."""
    thrash_streak: int = 0
    """Compactions in a row that came within the thrash window of the one before."""
    last_compaction_reply: int | None = None
    """The reply count (`RoundBook.replies`) when the last compaction ran."""
    last_layer: LayerName | None = None
    """The layer that last changed the view (`ViewStatus.last_layer`)."""


def export_state(book: RoundBook, counters: Counters, calibration: Calibration) -> dict[str, Any]:
    """The view state as JSON: what compaction decided, not the transcript (stored apart).

    Strings the state derives from outside text (facts, summaries, notes) are scrubbed of lone
    surrogates here if any slipped through: a data problem never makes a session unsaveable.
    """
    # by the id of the transcript message each stands for: "c" for a plain cleared stand-in (made
    # again exactly from the transcript), the message itself for any other (a shrunk preview)
    saved_stand_ins: dict[str, Any] = {}
    for r in book.rounds:
        if r.state == "cleared" and r.shown is not None:
            for m, i in zip(r.shown, r.indices, strict=True):
                original = book.transcript[i]
                if m is not original:
                    plain = m.message_id == f"{original.message_id}~c"
                    saved_stand_ins[original.message_id] = "c" if plain else m.to_dict()
    context = book.context
    state = {
        "format": FORMAT,
        "transcript_messages": len(book.transcript),
        "evicted": [r.ordinal for r in book.rounds if r.state == "evicted"],
        "cleared": [r.ordinal for r in book.rounds if r.state == "cleared"],
        "ledger": book.ledger.to_dict(),
        "notes": book.notes.to_dict(),
        "working_set": book.working_set.to_dict(),
        "summary": book.summary,
        "summary_span": list(book.summary_span) if book.summary_span else None,
        "summarized_upto": book.summarized_upto,
        "turn": counters.turn,
        "compactions": dict(counters.compactions),
        "last_layer": counters.last_layer,
        "deepen": counters.deepen,
        "breaker": {"failures": counters.breaker_failures, "total_failures": counters.breaker_total_failures},
        "calibration": calibration.to_dict(),
        "view": {
            "context": context.to_dict() if context is not None else None,
            "stand_ins": saved_stand_ins,
            "gate_floor": counters.gate_floor,
            "thrash_streak": counters.thrash_streak,
            "last_compaction_reply": counters.last_compaction_reply,
        },
    }
    return storable(state)  # type: ignore[no-any-return]


def saved_view(state: Mapping[str, Any]) -> bool:
    """Whether ``state`` holds the view as it was (its context block and gates), not only its decisions."""
    return bool(state.get("view"))


def import_state(
    book: RoundBook, state: Mapping[str, Any], config: CompactionConfig, calibration: Calibration
) -> tuple[Counters, Calibration]:
    """Restore what `export_state` saved onto a book whose transcript was replayed.

    Returns the counters and the calibration (``calibration`` itself when none was saved) for
    the orchestrator to take. The saved context block is restored onto the book; a state saved
    without one (`saved_view` is False) leaves it to the orchestrator to render it again.

    Raises:
        SchemaError: the state document has a format this version does not know, or a part of it
            is not shaped as saved (the session and the field named).
    """
    check_format(book.session_id, state)
    check_state(book.session_id, state)
    by_ordinal = {r.ordinal: r for r in book.rounds}
    saved = _saved_stand_ins(book, state, config)
    for ordinal in state.get("cleared", []):
        r = by_ordinal.get(int(ordinal))
        if r is not None and r.state == "full":
            shown = saved.get(r.ordinal) or stand_ins(book, r, config)
            if shown is not None:
                book.show(r, shown)
    for ordinal in state.get("evicted", []):
        r = by_ordinal.get(int(ordinal))
        if r is not None:
            book.evict(r, record=False)
    book.ledger = Ledger.from_dict(state.get("ledger", {}), session_id=book.session_id)
    book.notes = Notes.from_dict(state["notes"], session_id=book.session_id) if "notes" in state else Notes()
    book.working_set = WorkingSet.from_dict(state.get("working_set") or {})
    for entry in book.ledger.entries:
        r = by_ordinal.get(entry.step)
        if r is not None:
            r.ledger_step = entry.step
    book.summary = state.get("summary")
    span = state.get("summary_span")
    book.summary_span = (str(span[0]), str(span[1])) if span else None
    book.summarized_upto = int(state.get("summarized_upto", -1))
    breaker = state.get("breaker", {})
    view = state.get("view") or {}
    last = view.get("last_compaction_reply")
    counters = Counters(
        turn=int(state.get("turn", 0)),
        compactions={str(k): int(v) for k, v in state.get("compactions", {}).items()},
        deepen=float(state.get("deepen", 0.0)),
        breaker_failures=int(breaker.get("failures", 0)),
        breaker_total_failures=int(breaker.get("total_failures", 0)),
        gate_floor=float(view.get("gate_floor", 0.0)),
        thrash_streak=int(view.get("thrash_streak", 0)),
        last_compaction_reply=int(last) if last is not None else None,
        last_layer=next((name for name in LAYER_NAMES if name == state.get("last_layer")), None),
    )
    if "calibration" in state:
        calibration = type(calibration).from_dict(state["calibration"])
    if view:
        context = view.get("context")
        if context is None:
            book.context, book.context_tokens = None, 0
        else:
            msg = _message(book.session_id, context, "view.context")
            book.context, book.context_tokens = msg, book.accountant.count_message(msg)
        book.evicted_at_render = book.n_evicted
    return counters, calibration


# --- checking a stored state ------------------------------------------------------------------
def _broken(session_id: str, field: str, problem: str) -> SchemaError:
    return SchemaError(
        f"session {session_id!r}: stored view state: `{field}` {problem}; the state is corrupted: restore the "
        "session from an export, or delete its view state to rebuild the view from the transcript.",
        session_id=session_id,
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


_LOADERS: tuple[tuple[str, Callable[[Any], object]], ...] = (
    ("working_set", WorkingSet.from_dict),
    ("calibration", Calibration.from_dict),
)


def check_format(session_id: str, state: Mapping[str, Any]) -> None:
    """Raise `SchemaError` when ``state`` names no format or one this version does not read (`FORMAT`)."""
    if state.get("format") != FORMAT:
        raise SchemaError(
            f"session {session_id!r}: view state format {state.get('format')!r:.60} is not known to this "
            f"version of contextwarden (it reads `format` {FORMAT}); upgrade contextwarden or run "
            "`contextwarden db migrate`.",
            session_id=session_id,
        )


def check_saved_view(session_id: str, state: Any) -> None:
    """Raise `SchemaError` when a saved view state could not be opened (its format, shape, ledger, notes, messages).

    Imports run it before writing anything, so an accepted session always opens.
    """
    if not isinstance(state, Mapping):
        raise _broken(session_id, "(state)", f"must be an object, got {type(state).__name__}")
    check_format(session_id, state)
    check_state(session_id, state)
    Ledger.from_dict(state.get("ledger", {}), session_id=session_id)
    if "notes" in state:
        Notes.from_dict(state["notes"], session_id=session_id)
    # the view's messages, as opening reads them (opening parses them itself, so only imports do it here)
    view = state.get("view") or {}
    if view.get("context") is not None:
        _message(session_id, view["context"], "view.context")
    for message_id, kept in view.get("stand_ins", {}).items():
        if kept != "c":
            _message(session_id, kept, f"view.stand_ins[{message_id!r}]")


def check_state(session_id: str, state: Any) -> None:
    """Raise `SchemaError` (naming the session and the field) when ``state`` is not shaped as saved.

    The ledger and the notes check their own shape when they load.
    """
    if not isinstance(state, Mapping):
        raise _broken(session_id, "(state)", f"must be an object, got {type(state).__name__}")
    for key in ("evicted", "cleared"):
        ordinals = state.get(key, [])
        if not isinstance(ordinals, list) or not all(_is_int(o) for o in ordinals):
            raise _broken(session_id, key, "must be a list of round numbers")
    for key, default in (("transcript_messages", 0), ("summarized_upto", -1), ("turn", 0)):
        if not _is_int(state.get(key, default)):
            raise _broken(session_id, key, f"must be an integer, got {state.get(key)!r:.40}")
    for key in ("ledger", "notes", "breaker", "compactions", "calibration"):
        if key in state and not isinstance(state[key], Mapping):
            raise _broken(session_id, key, f"must be an object, got {type(state[key]).__name__}")
    summary, span = state.get("summary"), state.get("summary_span")
    if summary is not None and not isinstance(summary, str):
        raise _broken(session_id, "summary", f"must be a string or null, got {type(summary).__name__}")
    if span is not None and not (isinstance(span, list) and len(span) == 2 and all(isinstance(x, str) for x in span)):
        raise _broken(session_id, "summary_span", "must be null or two message ids")
    for name, n in state.get("compactions", {}).items():
        if not _is_int(n):
            raise _broken(session_id, f"compactions.{name}", f"must be an integer, got {n!r:.40}")
    if not _is_number(state.get("deepen", 0.0)):
        raise _broken(session_id, "deepen", f"must be a finite number, got {state.get('deepen')!r:.40}")
    for key, n in state.get("breaker", {}).items():
        if key in ("failures", "total_failures") and not _is_int(n):
            raise _broken(session_id, f"breaker.{key}", f"must be an integer, got {n!r:.40}")
    for key, load in _LOADERS:  # parts that load themselves: a failure names the part
        if state.get(key) is not None:
            try:
                load(state[key])
            except (ContextWardenError, ValueError, TypeError, KeyError, AttributeError) as exc:
                raise _broken(session_id, key, f"cannot be loaded ({exc})") from None
    view = state.get("view")
    if view is None:
        return
    if not isinstance(view, Mapping):
        raise _broken(session_id, "view", f"must be an object, got {type(view).__name__}")
    if view.get("context") is not None and not isinstance(view["context"], Mapping):
        raise _broken(session_id, "view.context", "must be a message object or null")
    saved = view.get("stand_ins", {})
    if not isinstance(saved, Mapping) or not all(m == "c" or isinstance(m, Mapping) for m in saved.values()):
        raise _broken(session_id, "view.stand_ins", 'must map message ids to messages (or "c")')
    if not _is_number(view.get("gate_floor", 0.0)):
        raise _broken(session_id, "view.gate_floor", "must be a finite number")
    if not _is_int(view.get("thrash_streak", 0)):
        raise _broken(session_id, "view.thrash_streak", "must be an integer")
    last = view.get("last_compaction_reply")
    if last is not None and not _is_int(last):
        raise _broken(session_id, "view.last_compaction_reply", "must be an integer or null")


def _message(session_id: str, data: Mapping[str, Any], field: str) -> Message:
    try:
        return Message.from_dict(data)
    except ValueError as exc:  # pydantic's ValidationError
        raise _broken(session_id, field, f"is not a message ({str(exc).splitlines()[0]})") from None


def _saved_stand_ins(book: RoundBook, state: Mapping[str, Any], config: CompactionConfig) -> dict[int, list[Message]]:
    """Round number -> the messages its view showed when the state was saved, for cleared rounds.

    Stand-ins are found by the transcript message they stand for, so a round whose messages a
    concurrent writer stored in another order still finds its own; a result that arrived after
    the save is shown in full, as it was then. A round none of whose messages has a saved
    stand-in is left out (its stand-ins are built again).
    """
    view = state.get("view")
    out: dict[int, list[Message]] = {}
    if not view:
        return out
    saved = view.get("stand_ins", {})
    for ordinal in state.get("cleared", []):
        if not 0 <= ordinal < len(book.rounds):
            continue  # a round the stored transcript does not have: nothing to show
        r = book.rounds[ordinal]
        if not any(book.transcript[i].message_id in saved for i in r.indices):
            continue
        shown: list[Message] = []
        for i in r.indices:
            m = book.transcript[i]
            kept = saved.get(m.message_id)
            if kept is None:
                shown.append(m)
            elif kept == "c":
                shown.append(cleared_stand_in(book, config, i, book.snapshot_id(r)))
            else:
                shown.append(_message(book.session_id, kept, f"view.stand_ins[{m.message_id!r}]"))
        out[ordinal] = shown
    return out

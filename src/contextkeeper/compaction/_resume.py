"""What a saved view state needs so that a resumed session shows exactly the view it had.

A process that restarts replays the transcript and imports the view state saved at the last
compaction. Everything the view was made of is then restored as it was, not computed again:
the context block (its text depends on the room the compaction had, on the ledger's size
calibration, and on the state the summary and notes had then), the stand-ins of cleared rounds
(a round shrunk under a tight budget has other stand-ins than a plainly cleared one), and what
decides the next compaction (the gate after a compaction the cascade table held above high
water, the thrashing streak, the reply count of the last compaction). A view state saved by an
older version, without these, is imported as before (the context block rendered again).

`check_state` validates the shape of a whole state before any of it is applied: wrong shapes
raise `SchemaError` naming the session and the field, never a ValueError or TypeError.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._json import storable
from ..exceptions import ContextKeeperError, SchemaError
from ..messages import Message
from ..tokens.calibration import Calibration
from ..workingset import WorkingSet

if TYPE_CHECKING:
    from .engine import ContextEngine

__all__ = ["check_state", "context_id", "export_view", "import_view", "saved_stand_ins"]


def context_id(text: str) -> str:
    """The id of a context block: derived from its text, so a resumed session shows the same id."""
    return "ck_context_" + hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def export_view(engine: ContextEngine, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with the view's own parts added, in a form every store can keep (UTF-8 JSON).

    Strings the state derives from outside text (facts, summaries, notes) are scrubbed of lone
    surrogates here if any slipped through: a data problem never makes a session unsaveable.
    """
    # by the id of the transcript message each stands for: "c" for a plain cleared stand-in (made
    # again exactly from the transcript), the message itself for any other (a shrunk preview)
    stand_ins: dict[str, Any] = {}
    for r in engine.rounds:
        if r.state == "cleared" and r.shown is not None:
            for m, i in zip(r.shown, r.indices, strict=True):
                original = engine.transcript[i]
                if m is not original:
                    plain = m.message_id == f"{original.message_id}~c"
                    stand_ins[original.message_id] = "c" if plain else m.to_dict()
    context = engine._context_msg
    state["view"] = {
        "context": context.to_dict() if context is not None else None,
        "stand_ins": stand_ins,
        "gate_floor": engine._gate_floor,
        "thrash_streak": engine._thrash_streak,
        "last_compaction_reply": engine._last_compaction_reply,
    }
    return storable(state)  # type: ignore[no-any-return]


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
            except (ContextKeeperError, ValueError, TypeError, KeyError, AttributeError) as exc:
                raise _broken(session_id, key, f"cannot be loaded ({exc})") from None
    view = state.get("view")
    if view is None:
        return
    if not isinstance(view, Mapping):
        raise _broken(session_id, "view", f"must be an object, got {type(view).__name__}")
    if view.get("context") is not None and not isinstance(view["context"], Mapping):
        raise _broken(session_id, "view.context", "must be a message object or null")
    stand_ins = view.get("stand_ins", {})
    if not isinstance(stand_ins, Mapping) or not all(m == "c" or isinstance(m, Mapping) for m in stand_ins.values()):
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


def saved_stand_ins(engine: ContextEngine, state: Mapping[str, Any]) -> dict[int, list[Message]]:
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
        if not 0 <= ordinal < len(engine.rounds):
            continue  # a round the stored transcript does not have: nothing to show
        r = engine.rounds[ordinal]
        if not any(engine.transcript[i].message_id in saved for i in r.indices):
            continue
        shown: list[Message] = []
        for i in r.indices:
            m = engine.transcript[i]
            kept = saved.get(m.message_id)
            if kept is None:
                shown.append(m)
            elif kept == "c":
                shown.append(engine._stand_in(i, engine._snapshot_id(r), shrink=False))
            else:
                shown.append(_message(engine.session_id, kept, f"view.stand_ins[{m.message_id!r}]"))
        out[ordinal] = shown
    return out


def import_view(engine: ContextEngine, state: Mapping[str, Any]) -> bool:
    """Restore the context block and the compaction gates as saved; False for a state without them."""
    view = state.get("view")
    if not view:
        return False
    engine._gate_floor = float(view.get("gate_floor", 0.0))
    engine._thrash_streak = int(view.get("thrash_streak", 0))
    engine._last_compaction_reply = view.get("last_compaction_reply")
    context = view.get("context")
    if context is None:
        engine._context_msg, engine._context_tokens = None, 0
    else:
        msg = _message(engine.session_id, context, "view.context")
        engine._context_msg, engine._context_tokens = msg, engine.accountant.count_message(msg)
    engine._evicted_at_render = engine._n_evicted
    return True

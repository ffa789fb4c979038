"""What may enter the transcript, and how calls that never get their result stay valid in the view.

`check_batch` is the engine's admission check: every message is checked (`check_message`), ids
are idempotent (the same content again is skipped, different content under a used id is an
error), and tool results must answer a call that is waiting or was abandoned.

A call is *abandoned* when any message other than a tool result follows it before its result:
a user message, the next assistant turn (another writer's, on a shared session), a system
message. Its round then shows a marked stand-in result (`contextkeeper.toolpairs.abandoned_result`)
right after its other results, so every view stays valid for the provider; the transcript is not
touched. The call no longer counts as open (`has_open_calls()` clears) and its round is no longer
protected as in flight. When the real result arrives later, it is accepted: it replaces the
stand-in next to its call in the view (the view is rendered again, once). A call id used again by
a newer call belongs to the newer call from then on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..exceptions import MessageError, ToolPairError
from ..messages import Message, check_message, same_content
from ..toolpairs import abandoned_result

if TYPE_CHECKING:
    from .engine import ContextEngine, _Round

__all__ = ["abandon_open_calls", "check_batch", "take_late_result"]


def _brief(m: Message) -> str:
    text = m.text or ", ".join(f"{c.name}(…)" for c in m.tool_calls) or "(no text)"
    return f"{m.role} {text[:40]!r}"


def id_conflict(earlier: Message, m: Message, *, index: int, session_id: str) -> MessageError:
    """The error for ``m`` reusing the id of a different message already in the session (or batch)."""
    return MessageError(
        f"message {index}: id {m.message_id!r} is already used in session {session_id!r} by a different message "
        f"(stored: {_brief(earlier)}; now: {_brief(m)}); give each message its own id (leave `message_id` out "
        "for a fresh one). Adding the same content again under its id is fine: it is skipped.",
        index=index,
        field="message_id",
    )


def check_batch(engine: ContextEngine, messages: Sequence[Message]) -> list[Message]:
    """The messages of ``messages`` that are new (in order), after checking all of them; changes nothing.

    Raises:
        MessageError: a malformed message, or an id already used by a different message.
        ToolPairError: a result for an unknown call, a second result for a call, or a message
            that makes two calls with the same id.
    """
    waiting = set(engine._open_calls)  # calls without a result at this point of the batch
    abandoned = set(engine._abandoned)
    answered: set[str] = set()  # answered within the batch
    seen: dict[str, Message] = {}
    fresh: list[Message] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Message):
            raise MessageError(
                f"message {i}: expected a contextkeeper Message, got {type(m).__name__}; "
                "convert provider dicts with contextkeeper.adapters.to_messages().",
                index=i,
            )
        check_message(m, index=i)
        earlier = seen.get(m.message_id)
        if earlier is None:
            at = engine._ids.get(m.message_id)
            earlier = engine.transcript[at] if at is not None else None
        if earlier is not None:
            if not same_content(earlier, m):
                raise id_conflict(earlier, m, index=i, session_id=engine.session_id)
            continue  # the same message again: idempotent
        seen[m.message_id] = m
        if m.role == "tool":
            cid = m.tool_call_id or ""
            if cid in waiting:
                waiting.discard(cid)
            elif cid in abandoned:
                abandoned.discard(cid)  # a late result: it takes the stand-in's place
            elif cid in answered or cid in engine._answered:
                raise ToolPairError(
                    f"message {i}: a second result for call {cid!r}; send one result per call "
                    "(merge the outputs into one message).",
                    index=i,
                    call_id=cid,
                )
            else:
                raise ToolPairError(
                    f"message {i}: tool result for unknown call {cid!r}; add the assistant message "
                    "that makes this call first.",
                    index=i,
                    call_id=cid,
                )
            answered.add(cid)
        else:
            abandoned |= waiting  # any other message abandons the calls still waiting
            waiting = set()
            for call in m.tool_calls:
                cid = call.call_id
                if cid in waiting:
                    raise ToolPairError(
                        f"message {i}: two tool calls share the id {cid!r}; give each call its own id.",
                        index=i,
                        call_id=cid,
                    )
                waiting.add(cid)
                abandoned.discard(cid)  # the id now belongs to the newer call
                answered.discard(cid)
        fresh.append(m)
    return fresh


def abandon_open_calls(engine: ContextEngine) -> None:
    """A message other than a tool result arrived: every call still waiting is abandoned.

    Its round shows a stand-in result after its other results (appended to the cached view when
    the view only grows, which it does: waiting calls always belong to the newest round).
    """
    for cid, r in engine._open_calls.items():
        call_message = engine.transcript[r.indices[0]]
        call = next(c for c in call_message.tool_calls if c.call_id == cid)
        stand_in = abandoned_result(call_message, call)
        n = engine.accountant.count_message(stand_in)
        engine._detach(r)
        r.pending.discard(cid)
        r.fillers = [*(r.fillers or ()), stand_in]
        r.filler_tokens += n
        engine._attach(r)
        engine._abandoned[cid] = r
        if not engine._dirty and r.state != "evicted":
            engine._view.append(stand_in)
            engine._view_tokens += n
    engine._open_calls.clear()


def take_late_result(engine: ContextEngine, call_id: str) -> _Round:
    """The round of an abandoned call whose result arrived after all, its stand-in removed.

    What was prepared from the round while the result was missing (stand-ins, ledger entry,
    facts) is made again from the transcript when next needed; the view is rendered again.
    """
    r = engine._abandoned.pop(call_id)
    engine._detach(r)
    fillers = r.fillers or []
    stand_in = next(f for f in fillers if f.tool_call_id == call_id)
    fillers.remove(stand_in)
    r.filler_tokens -= engine.accountant.count_message(stand_in)
    r.fillers = fillers or None
    r.prepared, r.ready, r.entry, r.facts = False, None, None, None
    engine._attach(r)
    engine._dirty = True
    return r

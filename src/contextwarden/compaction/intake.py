"""What a batch of messages adds to a session: new ids only, each message checked, tool pairs kept.

Every message is checked (`check_message`), ids are idempotent (the same content again is
skipped, different content under a used id is an error), and tool results must answer a call
that is waiting or was abandoned. A call is *abandoned* when any message other than a tool result
follows it before its result: a user message, the next assistant turn (another writer's, on a
shared session), a system message. Its round then shows a marked stand-in result
(`contextwarden.toolpairs.abandoned_result`) right after its other results, so every view stays
valid for the provider; the transcript is not touched. The call no longer counts as open (the
book's `has_open_calls()` clears) and its round is no longer protected as in flight. When the real
result arrives later, it is accepted: it replaces the stand-in next to its call in the view. A call
id used again by a newer call belongs to the newer call from then on. The whole batch is checked
before anything is added.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from ..exceptions import MessageError, ToolPairError
from ..messages import Message, check_message, same_content

__all__ = ["fresh_messages"]


def fresh_messages(
    messages: Sequence[Message],
    *,
    transcript: Sequence[Message],
    ids: Mapping[str, int],
    open_calls: Set[str],
    abandoned: Set[str],
    answered: Set[str],
    session_id: str,
) -> list[Message]:
    """The messages of ``messages`` that are new (in order), after checking every one; changes nothing.

    ``ids`` maps the ids in ``transcript`` to their positions; ``open_calls`` are the calls waiting
    for a result, ``abandoned`` those a later message gave up on, ``answered`` those with a result.

    Raises:
        MessageError: a malformed message, or an id already used by a different message.
        ToolPairError: a result for an unknown call, a second result for a call, or a message
            that makes two calls with the same id.
    """

    waiting = set(open_calls)  # calls without a result at this point of the batch
    given_up = set(abandoned)
    answered_now: set[str] = set()  # answered within the batch
    seen: dict[str, Message] = {}
    fresh: list[Message] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Message):
            raise MessageError(
                f"message {i}: expected a contextwarden Message, got {type(m).__name__}; "
                "convert provider dicts with contextwarden.adapters.to_messages().",
                index=i,
            )
        check_message(m, index=i)
        earlier = seen.get(m.message_id)
        if earlier is None:
            at = ids.get(m.message_id)
            earlier = transcript[at] if at is not None else None
        if earlier is not None:
            if not same_content(earlier, m):
                raise _id_conflict(earlier, m, index=i, session_id=session_id)
            continue  # the same message again: idempotent
        seen[m.message_id] = m
        if m.role == "tool":
            cid = m.tool_call_id or ""
            if cid in waiting:
                waiting.discard(cid)
            elif cid in given_up:
                given_up.discard(cid)  # a late result: it takes the stand-in's place
            elif cid in answered_now or cid in answered:
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
            answered_now.add(cid)
        else:
            if waiting:  # any other message abandons the calls still waiting
                given_up |= waiting
                waiting = set()
            if m.role != "assistant":  # only assistant messages make calls (`check_message`)
                fresh.append(m)
                continue
            for call in m.tool_calls:
                cid = call.call_id
                if cid in waiting:
                    raise ToolPairError(
                        f"message {i}: two tool calls share the id {cid!r}; give each call its own id.",
                        index=i,
                        call_id=cid,
                    )
                waiting.add(cid)
                given_up.discard(cid)  # the id now belongs to the newer call
                answered_now.discard(cid)
        fresh.append(m)
    return fresh


def _brief(m: Message) -> str:
    text = m.text or ", ".join(f"{c.name}(…)" for c in m.tool_calls) or "(no text)"
    return f"{m.role} {text[:40]!r}"


def _id_conflict(earlier: Message, m: Message, *, index: int, session_id: str) -> MessageError:
    """The error for ``m`` reusing the id of a different message already in the session (or batch)."""
    return MessageError(
        f"message {index}: id {m.message_id!r} is already used in session {session_id!r} by a different message "
        f"(stored: {_brief(earlier)}; now: {_brief(m)}); give each message its own id (leave `message_id` out "
        "for a fresh one). Adding the same content again under its id is fine: it is skipped.",
        index=index,
        field="message_id",
    )

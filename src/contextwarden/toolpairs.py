"""Tool-pair integrity: one validator and one repairer for every message format.

Providers reject a request whose tool calls and tool results do not pair up. Because every
format is converted to `Message`, the rules are checked once, here, and compaction runs
`repair` after every transformation.

Validity (the same check as ``check_context`` in the trim benchmark):

* after an assistant message with tool calls, the next messages are exactly the results of
  those calls, in any order, before any other message;
* every tool result answers a call made before it, and no call is answered twice;
* every call has its result, except (when ``allow_pending_tail``) the calls of the LAST assistant
  message when nothing but its own results follows it: those are *pending*, still running;
* with ``require_user_first`` (Anthropic, some open models), the first message after the
  system/developer messages is a user message;
* with ``allow_empty=False``, no message other than a tool result is empty.

A result answers the most recent unanswered call with its id made before it, so histories from
models that reuse call ids (``call_0`` every turn) pair correctly.

Repair policy (`repair`), which never invents content:

1. with ``allow_empty=False``: drop empty messages (tool results are never empty: "" is a result);
2. with ``require_user_first``: drop the messages before the first user message, except the
   system and developer messages;
3. drop orphan results (no call before them) and duplicate results (the first one is kept);
4. move displaced results up, right after their call's other results (their relative order kept);
5. drop calls that have no result (abandoned) from their assistant message, and drop the whole
   assistant message when nothing else is left in it (text, image or unknown content);
   pending calls of the last assistant message are kept when ``allow_pending_tail``.

A session's view does not drop an abandoned call (a call that a later user or assistant message
followed before its result came): `abandoned_result` answers it with a marked stand-in result,
so the view stays valid while the transcript keeps exactly what was added.

A valid list comes back as a new list holding the SAME message objects; a message is only copied
when some of its tool calls are dropped (it keeps its id). Inputs are never modified. Both
functions are O(n) in the number of messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from .adapters._common import has_opaque_content
from .exceptions import MessageError, ToolPairError
from .messages import INSTRUCTION_ROLES, Message, TextPart, ToolCall

__all__ = [
    "ABANDONED_RESULT_TEXT",
    "Problem",
    "ProblemKind",
    "abandoned_result",
    "check",
    "is_valid",
    "pending_calls",
    "repair",
    "validate",
]

ProblemKind = Literal[
    "orphan-result",
    "missing-result",
    "pending-call",
    "duplicate-result",
    "out-of-order",
    "first-not-user",
    "empty-message",
]
_PAIR_KINDS = frozenset({"orphan-result", "missing-result", "pending-call", "duplicate-result", "out-of-order"})

ABANDONED_RESULT_TEXT = "[no result: the call was abandoned]"
"""Text of the stand-in result a view shows for an abandoned call."""

ORPHAN = -1
"""`Pairing.link` value of a tool result whose call is unknown."""
DUPLICATE = -2
"""`Pairing.link` value of a second result for an answered call."""
NOT_RESULT = -3
"""`Pairing.link` value of a message that is not a tool result."""


@dataclass(frozen=True)
class Problem:
    """One tool-pair or ordering problem found by `validate`."""

    index: int
    """Position of the offending message (the assistant message for call problems)."""
    kind: ProblemKind
    call_id: str | None
    """The tool call concerned, when there is one."""
    detail: str
    """What is wrong and how to fix it."""


@dataclass(slots=True)
class Pairing:
    """Which result answers which call, computed in one pass."""

    link: list[int]
    """Per message: the index of the assistant message a tool result answers, or ORPHAN /
    DUPLICATE for tool results, NOT_RESULT for other messages."""
    calls: dict[int, tuple[str, ...]]
    """Assistant index -> distinct call ids it makes (only messages with calls)."""
    results: dict[int, list[int]]
    """Assistant index -> indices of the results answering it, in list order."""
    first_result: dict[str, int]
    """Call id -> index of the result that answered it last (to name duplicates)."""
    tail: int
    """Index of the assistant message whose unanswered calls are pending, or -1."""


def pair_up(messages: Sequence[Message]) -> Pairing:
    """Which result answers which call in ``messages``, in one pass (the round grouping reads it too)."""
    n = len(messages)
    link = [NOT_RESULT] * n
    calls: dict[int, tuple[str, ...]] = {}
    results: dict[int, list[int]] = {}
    waiting: dict[str, int] = {}  # call id -> assistant index whose call is unanswered
    answered: dict[str, int] = {}  # call id -> result index
    last_non_tool = -1
    for i, m in enumerate(messages):
        role = m.role
        if role == "tool":
            cid = m.tool_call_id
            a = waiting.pop(cid, -1) if cid is not None else -1
            if a >= 0:
                link[i] = a
                results[a].append(i)
                answered[cid] = i  # type: ignore[index]
            else:
                link[i] = DUPLICATE if cid in answered else ORPHAN
            continue
        last_non_tool = i
        if role == "assistant":
            ids = tuple([p.call_id for p in m.parts if p.kind == "tool-call"])
            if len(ids) > 1 and len(set(ids)) < len(ids):
                ids = tuple(dict.fromkeys(ids))
            if ids:
                calls[i] = ids
                results[i] = []
                for cid in ids:
                    waiting[cid] = i
                    answered.pop(cid, None)
    tail = last_non_tool if last_non_tool in calls else -1
    return Pairing(link=link, calls=calls, results=results, first_result=answered, tail=tail)


def _has_content(message: Message) -> bool:
    """True when the message says something besides tool calls."""
    for p in message.parts:
        kind = p.kind
        if kind == "image":
            return True
        if kind == "text" and p.text.strip():  # type: ignore[union-attr]
            return True
        if kind == "thinking" and (p.text or p.signature):  # type: ignore[union-attr]
            return True
    return has_opaque_content(message)


def _is_empty(message: Message) -> bool:
    return message.role != "tool" and not message.tool_calls and not _has_content(message)


def _name(message: Message, call_id: str) -> str:
    return next((c.name for c in message.tool_calls if c.call_id == call_id), "?")


def validate(
    messages: Sequence[Message],
    *,
    require_user_first: bool = False,
    allow_pending_tail: bool = True,
    allow_empty: bool = True,
) -> list[Problem]:
    """Every tool-pair and ordering problem of ``messages``, by index.

    Args:
        messages: the history (not modified).
        require_user_first: the first message after system/developer messages must be a user message.
        allow_pending_tail: calls of the last assistant message may still wait for their results.
        allow_empty: allow messages with no content (Anthropic rejects them).

    Returns:
        The problems sorted by index; empty when the list is valid.
    """
    n = len(messages)
    pairing = pair_up(messages)
    problems: list[Problem] = []
    if require_user_first:
        for i, m in enumerate(messages):
            if m.role in INSTRUCTION_ROLES:
                continue
            if m.role != "user":
                problems.append(
                    Problem(
                        i,
                        "first-not-user",
                        None,
                        f"message {i}: the first message after the system prompt is a {m.role!r} message and the "
                        "provider requires a user message first; start with a user message "
                        "(repair(require_user_first=True) drops the messages before it).",
                    )
                )
            break
    if not allow_empty:
        for i, m in enumerate(messages):
            if _is_empty(m):
                problems.append(
                    Problem(
                        i,
                        "empty-message",
                        None,
                        f"message {i}: this {m.role!r} message has no content and the provider rejects empty "
                        "messages; give it content or drop it (repair(allow_empty=False) drops it).",
                    )
                )
    for a, found in pairing.results.items():
        end = a + 1
        while end < n and messages[end].role == "tool":
            end += 1
        done = set()
        for r in found:
            cid = messages[r].tool_call_id
            done.add(cid)
            if r >= end:
                problems.append(
                    Problem(
                        r,
                        "out-of-order",
                        cid,
                        f"message {r}: the result of call {cid!r} is separated from its call (message {a}) by other "
                        "messages; move it up to follow the call (repair() does).",
                    )
                )
        for cid in pairing.calls[a]:
            if cid in done:
                continue
            name = _name(messages[a], cid)
            if a == pairing.tail:
                if not allow_pending_tail:
                    problems.append(
                        Problem(
                            a,
                            "pending-call",
                            cid,
                            f"message {a}: tool call {cid!r} ({name}) still waits for its result; add the result "
                            "before the next model call (repair(allow_pending_tail=False) drops the call).",
                        )
                    )
            else:
                problems.append(
                    Problem(
                        a,
                        "missing-result",
                        cid,
                        f"message {a}: tool call {cid!r} ({name}) has no result and other messages follow it; add "
                        "its result right after the call, or drop the call (repair() does).",
                    )
                )
    for i, link in enumerate(pairing.link):
        if link == ORPHAN:
            cid = messages[i].tool_call_id
            problems.append(
                Problem(
                    i,
                    "orphan-result",
                    cid,
                    f"message {i}: tool result for call {cid!r} has no matching tool call before it; restore the "
                    "assistant message that made the call, or drop the result (repair() does).",
                )
            )
        elif link == DUPLICATE:
            cid = messages[i].tool_call_id
            problems.append(
                Problem(
                    i,
                    "duplicate-result",
                    cid,
                    f"message {i}: second result for call {cid!r} (the first is message "
                    f"{pairing.first_result.get(cid or '', '?')}); drop it (repair() keeps the first).",
                )
            )
    problems.sort(key=lambda p: p.index)
    return problems


def is_valid(
    messages: Sequence[Message],
    *,
    require_user_first: bool = False,
    allow_pending_tail: bool = True,
    allow_empty: bool = True,
) -> bool:
    """True when `validate` finds no problem."""
    return not validate(
        messages, require_user_first=require_user_first, allow_pending_tail=allow_pending_tail, allow_empty=allow_empty
    )


def check(
    messages: Sequence[Message],
    *,
    require_user_first: bool = False,
    allow_pending_tail: bool = True,
    allow_empty: bool = True,
) -> None:
    """Raise for the first problem `validate` finds.

    Raises:
        ToolPairError: a tool result without its call, a duplicate or displaced result, a call
            without its result.
        MessageError: a list that does not start with a user message (when required), an empty
            message (when not allowed).
    """
    problems = validate(
        messages, require_user_first=require_user_first, allow_pending_tail=allow_pending_tail, allow_empty=allow_empty
    )
    if not problems:
        return
    first = problems[0]
    if first.kind in _PAIR_KINDS:
        raise ToolPairError(first.detail, index=first.index, call_id=first.call_id)
    raise MessageError(first.detail, index=first.index, field="role" if first.kind == "first-not-user" else "parts")


def pending_calls(messages: Sequence[Message]) -> tuple[str, ...]:
    """Ids of the calls of the last assistant message that still wait for their results."""
    pairing = pair_up(messages)
    if pairing.tail < 0:
        return ()
    done = {messages[r].tool_call_id for r in pairing.results[pairing.tail]}
    return tuple(cid for cid in pairing.calls[pairing.tail] if cid not in done)


def repair(
    messages: Sequence[Message],
    *,
    require_user_first: bool = False,
    allow_pending_tail: bool = True,
    allow_empty: bool = True,
) -> list[Message]:
    """A valid history made from ``messages`` by the policy in the module docstring.

    ``validate(repair(x, **options), **options)`` is always empty, and ``repair`` of a valid list
    returns a list of the same objects. ``messages`` is not modified.
    """
    seq: Sequence[Message] = messages
    if not allow_empty:
        seq = [m for m in seq if not _is_empty(m)]
    if require_user_first:
        start = next((i for i, m in enumerate(seq) if m.role == "user"), len(seq))
        if any(m.role not in INSTRUCTION_ROLES for m in seq[:start]):
            seq = [m for m in seq[:start] if m.role in INSTRUCTION_ROLES] + list(seq[start:])
    pairing = pair_up(seq)
    out: list[Message] = []
    for i, m in enumerate(seq):
        if m.role == "tool":
            continue  # results are written right after their call; orphans and duplicates are dropped
        found = pairing.results.get(i)
        if found is None:
            out.append(m)
            continue
        calls = pairing.calls[i]
        if len(found) < len(calls) and not (i == pairing.tail and allow_pending_tail):
            done = {seq[r].tool_call_id for r in found}
            parts = tuple(p for p in m.parts if p.kind != "tool-call" or p.call_id in done)
            m = replace(m, parts=parts)
            if not done and not _has_content(m):
                continue
        out.append(m)
        out.extend(seq[r] for r in found)
    return out


def abandoned_result(call_message: Message, call: ToolCall) -> Message:
    """The stand-in result a view shows for ``call``, abandoned without its result.

    Marked as an error result (``is_error``) and with ``extra={"contextwarden": "abandoned"}``;
    its id derives from the call's message id and call id, so every view shows the same one.
    """
    return Message(
        role="tool",
        parts=(TextPart(text=ABANDONED_RESULT_TEXT),),
        message_id=f"{call_message.message_id}~abandoned~{call.call_id}",
        tool_call_id=call.call_id,
        name=call.name,
        is_error=True,
        turn=call_message.turn,
        source_ids=(call_message.message_id,),
        extra={"contextwarden": "abandoned"},
    )

"""Ledger entries: what one step of the task records, how a round of the transcript becomes one,
and how an entry is stored and read back.

An entry is pure data made from the round's messages (compaction prepares entries ahead and
appends them to the `Ledger` when the round leaves the view).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ._json import BadJSON, loads
from .exceptions import SchemaError
from .keyinfo import extract_identifiers, json_facts, key_lines, salient_facts
from .messages import Message

__all__ = [
    "STATUSES",
    "LedgerEntry",
    "StepStatus",
    "StoredShape",
    "describe_call",
    "entry_for_round",
    "entry_from_dict",
    "entry_to_dict",
    "request_facts",
    "shorten",
]

StepStatus = Literal["planned", "done", "failed"]
STATUSES: tuple[StepStatus, ...] = ("planned", "done", "failed")


@dataclass(frozen=True, kw_only=True)
class LedgerEntry:
    """One step of the task."""

    step: int
    status: StepStatus
    intention: str
    """What the step set out to do: ``tool(arg=value, ...)`` or ``user: ...``."""
    kind: Literal["tool", "request", "note"] = "tool"
    facts: tuple[str, ...] = ()
    """Identifiers and key lines from the step's output, verbatim."""
    snapshot_id: str | None = None
    message_ids: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    turn: int | None = None


def shorten(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_call(name: str, arguments: str, *, limit: int = 240) -> str:
    """``name(k=v, ...)`` with long values shortened; falls back to the raw text for non-JSON."""
    try:
        parsed = loads(arguments) if arguments else {}
    except BadJSON:
        return f"{name}({shorten(arguments, limit)})"
    if isinstance(parsed, dict):
        inner = ", ".join(f"{k}={shorten(v, 80)}" for k, v in parsed.items())
    else:
        inner = shorten(parsed, limit)
    return f"{name}({shorten(inner, limit)})"


# Capitalized words inside a sentence: in a user's request these are names, places, products.
_NAME_RE = re.compile(r"(?<![.!?:]\s)(?<=\s)[A-Z][a-z]{2,}\b")


def request_facts(text: str) -> tuple[str, ...]:
    """Identifiers and names in a user request (its first 600 characters)."""
    flat = " ".join(text[:600].split())
    return tuple(dict.fromkeys([*extract_identifiers(flat, limit=24), *_NAME_RE.findall(flat)[:12]]))


def _failed(message: Message) -> bool:
    if message.is_error:
        return True
    head = message.text[:400].lower()
    return head.startswith(("error", "traceback", "exception")) or '"error"' in head[:40]


def entry_for_round(
    messages: Sequence[Message],
    *,
    step: int,
    snapshot_id: str | None = None,
    facts: Sequence[str] | None = None,
) -> LedgerEntry | None:
    """The ledger entry for a round (a tool-call round or a user request); None for other rounds.

    Pure: compaction prepares entries ahead and appends them when the round leaves the view.
    """
    if not messages:
        return None
    first = messages[0]
    ids = tuple(m.message_id for m in messages)
    if first.role == "user":
        text = " ".join(first.text[:400].split())  # the line shows at most 200 characters
        return LedgerEntry(
            step=step,
            status="done",
            intention="user: " + shorten(text, 200),
            kind="request",
            facts=tuple(facts) if facts is not None else request_facts(first.text),
            # the rendered line shows only the start of the request: its facts carry the rest
            snapshot_id=snapshot_id,
            message_ids=ids,
            turn=first.turn,
        )
    calls = first.tool_calls
    if not calls:
        return None
    results = {m.tool_call_id: m for m in messages[1:] if m.role == "tool"}
    failed = any(_failed(r) for r in results.values())
    if facts is None:
        found: list[str] = []
        for call in calls:
            result = results.get(call.call_id)
            if result is None:
                continue
            text = result.text
            found.extend(key_lines(text, limit=2, max_line_chars=160) if _failed(result) else [])
            found.extend(salient_facts(text[:6000], limit=48))
        facts = found
    intention = "; ".join(describe_call(c.name, c.arguments) for c in calls)
    # the arguments' values come first: the rendered line cuts long arguments short
    arg_facts: list[str] = []
    if len(intention) > 100:
        for c in calls:
            values = json_facts(c.arguments)
            arg_facts.extend(values if values is not None else extract_identifiers(c.arguments, limit=32))
    return LedgerEntry(
        step=step,
        status="failed" if failed else "done",
        intention=intention,
        kind="tool",
        facts=tuple(dict.fromkeys([*arg_facts, *facts])),
        snapshot_id=snapshot_id,
        message_ids=ids,
        tools=tuple(c.name for c in calls),
        turn=first.turn,
    )


def entry_to_dict(e: LedgerEntry) -> dict[str, Any]:
    """`dataclasses.asdict` of an entry, without its generic deep copy (entries are immutable)."""
    return {
        "step": e.step,
        "status": e.status,
        "intention": e.intention,
        "kind": e.kind,
        "facts": e.facts,
        "snapshot_id": e.snapshot_id,
        "message_ids": e.message_ids,
        "tools": e.tools,
        "turn": e.turn,
    }


def entry_from_dict(raw: Any, where: str, check: StoredShape) -> LedgerEntry:
    e = check.mapping(raw, where)
    status = e.get("status")
    if status not in STATUSES:
        raise check.broken(f"{where}.status", f"must be one of {sorted(STATUSES)}, got {status!r:.40}")
    kind = e.get("kind", "tool")
    if kind not in ("tool", "request", "note"):
        raise check.broken(f"{where}.kind", f"must be 'tool', 'request' or 'note', got {kind!r:.40}")
    intention = e.get("intention")
    if not isinstance(intention, str):
        raise check.broken(f"{where}.intention", f"must be a string, got {type(intention).__name__}")
    snapshot_id, turn = e.get("snapshot_id"), e.get("turn")
    if snapshot_id is not None and not isinstance(snapshot_id, str):
        raise check.broken(f"{where}.snapshot_id", f"must be a string or null, got {type(snapshot_id).__name__}")
    return LedgerEntry(
        step=check.integer(e.get("step"), f"{where}.step"),
        status=status,
        intention=intention,
        kind=kind,
        facts=tuple(check.strings(e.get("facts", []), f"{where}.facts")),
        snapshot_id=snapshot_id,
        message_ids=tuple(check.strings(e.get("message_ids", []), f"{where}.message_ids")),
        tools=tuple(check.strings(e.get("tools", []), f"{where}.tools")),
        turn=None if turn is None else check.integer(turn, f"{where}.turn"),
    )


class StoredShape:
    """Checks of stored view state that raise `SchemaError` naming the session and the field."""

    def __init__(self, session_id: str | None) -> None:
        self.session_id = session_id

    def broken(self, field: str, problem: str) -> SchemaError:
        where = f"session {self.session_id!r}: " if self.session_id is not None else ""
        return SchemaError(
            f"{where}stored view state: `{field}` {problem}; the state is corrupted: restore the session from an "
            "export, or delete its view state to rebuild the view from the transcript.",
            session_id=self.session_id,
        )

    def mapping(self, value: Any, field: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.broken(field, f"must be an object, got {type(value).__name__}")
        return value

    def items(self, value: Any, field: str) -> list[Any]:
        if not isinstance(value, list | tuple):
            raise self.broken(field, f"must be a list, got {type(value).__name__}")
        return list(value)

    def strings(self, value: Any, field: str) -> list[str]:
        items = self.items(value, field)
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise self.broken(f"{field}[{i}]", f"must be a string, got {type(item).__name__}")
        return items

    def integer(self, value: Any, field: str, *, minimum: int | None = None) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.broken(field, f"must be an integer, got {value!r:.40}")
        if minimum is not None and value < minimum:
            raise self.broken(field, f"must be at least {minimum}, got {value}")
        return value

    def number(self, value: Any, field: str) -> float:
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            raise self.broken(field, f"must be a finite number, got {value!r:.40}")
        return float(value)

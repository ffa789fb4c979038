"""Structured notes kept per session: decisions, finished subtasks, lessons and open items.

The agent (through the `NOTES_TOOL` tool) or the library writes notes; they live beside the
transcript, survive every compaction, and are rendered into the view after compaction within a
token budget. Rendering is deterministic and changes only when a note is added or settled, so it
does not disturb the provider's prompt cache between compactions.

Example::

    notes = Notes()
    notes.add("decision", "Use PostgreSQL 16; SQLite cannot handle the write load.")
    item = notes.add("open", "Ask the user which region to deploy to.")
    notes.resolve(item.note_id)
    text = notes.render(max_tokens=300)
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, cast, get_args

from ._brief import brief
from ._json import has_lone_surrogate, tool_arguments, whole_number
from .exceptions import ConfigError, SchemaError, UsageError
from .tokens import TokenCounter, get_counter

__all__ = ["NOTES_TOOL", "Note", "NoteKind", "Notes"]

NoteKind = Literal["decision", "subtask", "lesson", "open"]
"""``decision`` (a choice and its reason), ``subtask`` (finished), ``lesson`` (learnt the hard way),
``open`` (an item still to settle)."""
NOTE_KINDS: tuple[str, ...] = get_args(NoteKind)

HEADER = "[Notes kept across compactions]"
_TITLES: dict[NoteKind, str] = {
    "open": "Open items",
    "decision": "Decisions",
    "lesson": "Lessons",
    "subtask": "Finished subtasks",
}
_ORDER: tuple[NoteKind, ...] = ("open", "decision", "lesson", "subtask")
"""Render order, which is also the order of precedence when room runs out."""
_MAX_CHARS = 2000

NOTES_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "write_note",
        "description": (
            "Record a note that survives when old messages are compacted: a decision and its reason, a "
            "finished subtask, a lesson learnt, or an open item (resolve it later with resolve_id)."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": list(NOTE_KINDS)},
                "text": {"type": "string", "description": "The note, with exact ids, paths and numbers."},
                "resolve_id": {"type": "integer", "description": "Id of an open item that is now settled."},
            },
            "required": [],
        },
    },
}
"""The OpenAI tool schema for `Notes.handle_tool_call` (add it to the agent's tools)."""


@dataclass(frozen=True, kw_only=True)
class Note:
    """One note."""

    note_id: int
    kind: NoteKind
    text: str
    turn: int | None = None
    """The agent turn it was written in, when known."""
    source_ids: tuple[str, ...] = ()
    """Transcript message ids the note is about."""
    resolved: bool = False
    """For open items: settled (kept in the record, no longer rendered)."""


class Notes:
    """The notes document of one session."""

    def __init__(self, notes: list[Note] | None = None, *, next_id: int | None = None) -> None:
        self._notes: list[Note] = list(notes or [])
        self._next = next_id if next_id is not None else max((n.note_id for n in self._notes), default=0) + 1
        self.version = 0
        """Bumped by every change (callers re-render only when it moved)."""

    def __len__(self) -> int:
        return len(self._notes)

    def add(self, kind: NoteKind, text: str, *, turn: int | None = None, source_ids: tuple[str, ...] = ()) -> Note:
        """Record a note; the same unresolved text of the same kind is recorded once.

        Raises:
            ConfigError: ``kind`` is not a note kind.
            UsageError: ``text`` is empty or longer than 2,000 characters.
        """
        if kind not in NOTE_KINDS:
            raise ConfigError(f"note kind {brief(kind)} is unknown; use one of {list(NOTE_KINDS)}.", key="kind")
        if not isinstance(text, str):
            raise UsageError(f"a note's text must be a string, got {type(text).__name__} ({brief(text)}).")
        if has_lone_surrogate(text):
            raise UsageError(
                "a note's text contains a lone surrogate (half of a character pair, e.g. the JSON escape "
                "\\ud83d alone), which no store can keep; write the whole character or leave it out."
            )
        text = " ".join(text.split())
        if not text or len(text) > _MAX_CHARS:
            raise UsageError(
                f"a note needs 1..{_MAX_CHARS} characters of text (got {len(text)}); "
                "write the gist and keep details in the transcript."
            )
        for n in self._notes:
            if n.kind == kind and n.text == text and not n.resolved:
                return n
        note = Note(note_id=self._next, kind=kind, text=text, turn=turn, source_ids=tuple(source_ids))
        self._next += 1
        self._notes.append(note)
        self.version += 1
        return note

    def resolve(self, note_id: int) -> Note:
        """Mark an open item settled.

        Raises:
            UsageError: No open item has that id.
        """
        for i, n in enumerate(self._notes):
            if n.note_id == note_id and n.kind == "open":
                if not n.resolved:
                    self._notes[i] = replace(n, resolved=True)
                    self.version += 1
                return self._notes[i]
        open_ids = [n.note_id for n in self._notes if n.kind == "open" and not n.resolved]
        raise UsageError(f"no open item with id {note_id}; open items: {open_ids}.")

    def remove(self, note_id: int) -> None:
        """Delete a note written by mistake.

        Raises:
            UsageError: No note has that id.
        """
        for i, n in enumerate(self._notes):
            if n.note_id == note_id:
                del self._notes[i]
                self.version += 1
                return
        raise UsageError(f"no note with id {note_id}; ids: {[n.note_id for n in self._notes][-20:]}.")

    def list(self, kind: NoteKind | None = None, *, include_resolved: bool = False) -> builtins.list[Note]:
        """Notes in the order written, optionally of one kind; settled open items only when asked."""
        return [n for n in self._notes if (kind is None or n.kind == kind) and (include_resolved or not n.resolved)]

    def render(self, *, max_tokens: int, counter: TokenCounter | Callable[[str], int] | None = None) -> str:
        """The notes as one text within ``max_tokens``; "" when there are none or no room.

        Sections in order Open items, Decisions, Lessons, Finished subtasks; when room runs out,
        the newest notes of each kind are kept in that order of precedence, and the number of
        notes left out is stated.
        """
        count = _count_fn(counter)
        live = [n for n in self._notes if not n.resolved]
        if not live or max_tokens <= 0:
            return ""
        chosen: set[int] = set()
        opened: set[NoteKind] = set()
        used = count(HEADER) + 1 + 8  # 8: the "(n older notes not shown)" line, if needed
        for kind in _ORDER:
            for n in reversed([x for x in live if x.kind == kind]):
                cost = count(f"- #{n.note_id} {n.text}") + 1
                if kind not in opened:
                    cost += count(_TITLES[kind] + ":") + 1
                if used + cost <= max_tokens:
                    chosen.add(n.note_id)
                    opened.add(kind)
                    used += cost
        text = self._compose(live, chosen)
        while count(text) > max_tokens and chosen:
            # drop the lowest-precedence, oldest chosen note
            victim = min(
                (n for n in live if n.note_id in chosen),
                key=lambda n: (-_ORDER.index(n.kind), n.note_id),
            )
            chosen.discard(victim.note_id)
            text = self._compose(live, chosen)
        return text if chosen and count(text) <= max_tokens else ""

    def _compose(self, live: builtins.list[Note], chosen: set[int]) -> str:
        lines = [HEADER]
        for kind in _ORDER:
            shown = [n for n in live if n.kind == kind and n.note_id in chosen]
            if shown:
                lines.append(f"{_TITLES[kind]}:")
                lines.extend(f"- #{n.note_id} {n.text}" for n in shown)
        left = sum(1 for n in live if n.note_id not in chosen)
        if left:
            lines.append(f"({left} older notes not shown)")
        return "\n".join(lines)

    def handle_tool_call(self, arguments: str | Mapping[str, Any], *, turn: int | None = None) -> str:
        """Run the `NOTES_TOOL` call: add a note and/or resolve an open item; returns the tool result text.

        Whatever the model sends, the answer is a text it can read: bad arguments (not JSON, too
        large or too deep, wrong types, ids out of range) give ``error: ...`` and change nothing.
        """
        args = tool_arguments(arguments, example='{"kind": "decision", "text": ...} or {"resolve_id": 3}')
        if isinstance(args, str):
            return args
        resolve = args.get("resolve_id")
        note_id = None if resolve is None else whole_number(resolve)
        if resolve is not None and note_id is None:
            return f"error: resolve_id must be the id of an open item (a whole number from 1), got {brief(resolve)}."
        text, kind = args.get("text"), args.get("kind", "decision")
        if text is not None and not isinstance(text, str):
            return f"error: text must be a string, got {type(text).__name__}."
        if not isinstance(kind, str):
            return f"error: kind must be one of {list(NOTE_KINDS)}, got {brief(kind)}."
        out: list[str] = []
        try:
            if note_id is not None:
                self.resolve(note_id)
                out.append(f"resolved #{note_id}")
            if text:
                note = self.add(cast(NoteKind, kind), text, turn=turn)
                out.append(f"noted #{note.note_id} ({note.kind})")
        except UsageError as exc:
            return f"error: {exc}"
        return "; ".join(out) if out else "error: give text (with kind) or resolve_id."

    # --- persistence ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state."""
        return {"notes": [asdict(n) for n in self._notes], "next_id": self._next}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, session_id: str | None = None) -> Notes:
        """Inverse of `to_dict`.

        Raises:
            SchemaError: the data does not have the shape `to_dict` writes (names the field).
        """
        where = f"session {session_id!r}: " if session_id is not None else ""

        def broken(field: str, problem: str) -> SchemaError:
            return SchemaError(
                f"{where}stored notes: `{field}` {problem}; the view state is corrupted: restore the session "
                "from an export, or delete its view state to rebuild the view from the transcript.",
                session_id=session_id,
            )

        if not isinstance(data, Mapping):
            raise broken("notes", f"must be an object, got {type(data).__name__}")
        raw_notes = data.get("notes", [])
        if not isinstance(raw_notes, list):
            raise broken("notes.notes", f"must be a list, got {type(raw_notes).__name__}")
        notes: list[Note] = []
        for i, raw in enumerate(raw_notes):
            field = f"notes.notes[{i}]"
            if not isinstance(raw, Mapping):
                raise broken(field, f"must be an object, got {type(raw).__name__}")
            note_id, kind, text = raw.get("note_id"), raw.get("kind"), raw.get("text")
            turn, source_ids = raw.get("turn"), raw.get("source_ids", [])
            if not isinstance(note_id, int) or isinstance(note_id, bool):
                raise broken(f"{field}.note_id", f"must be an integer, got {brief(note_id)}")
            if kind not in NOTE_KINDS:
                raise broken(f"{field}.kind", f"must be one of {list(NOTE_KINDS)}, got {brief(kind)}")
            if not isinstance(text, str):
                raise broken(f"{field}.text", f"must be a string, got {type(text).__name__}")
            if turn is not None and not _is_int(turn):
                raise broken(f"{field}.turn", f"must be an integer or null, got {brief(turn)}")
            if not isinstance(source_ids, list | tuple) or not all(isinstance(x, str) for x in source_ids):
                raise broken(f"{field}.source_ids", "must be a list of message ids")
            notes.append(
                Note(
                    note_id=note_id,
                    kind=kind,
                    text=text,
                    turn=turn,
                    source_ids=tuple(source_ids),
                    resolved=bool(raw.get("resolved", False)),
                )
            )
        next_id = data.get("next_id")
        if next_id is not None and not _is_int(next_id):
            raise broken("notes.next_id", f"must be an integer, got {brief(next_id)}")
        return cls(notes, next_id=next_id)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count_fn(counter: TokenCounter | Callable[[str], int] | None) -> Callable[[str], int]:
    if counter is None:
        return get_counter("heuristic").count_text
    if isinstance(counter, TokenCounter):
        return counter.count_text
    return counter

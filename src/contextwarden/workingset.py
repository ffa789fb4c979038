"""The working set: what the agent itself acted on, ranked, for the context block.

Losing the files an agent is changing is the most expensive kind of forgetting: it re-reads,
re-edits or contradicts its own work. The working set follows the agent's own actions in the
transcript (file tools' paths, the paths in its shell commands, the tests it ran and how they
ended, errors not yet resolved, symbols it named) and ranks them by how often and how recently
the agent referred to each. It is rendered into the context block after every compaction, above
the ledger's identifiers that merely appeared in some output.

The work is lazy: messages are read when the context block is rendered (a compaction) or while
the engine prepares the rounds a compaction will take (see `compaction.ahead`), never on a plain
turn, so the common turn stays O(1) and each message is read once.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Literal

from .keyinfo import error_lines
from .messages import Message, ToolCall
from .provenance import admitted
from .shellrefs import exit_code, find_paths, is_path, shell_references, test_summary

__all__ = ["WorkItem", "WorkingSet"]

ItemKind = Literal["file", "command", "error", "symbol"]

# How strongly one reference counts, by who made it and what it did. An edit by the agent counts
# most; a path that only appeared in a tool's output counts least (it was seen, not acted on).
_WEIGHTS: Mapping[str, float] = {
    "edited": 6.0,
    "created": 6.0,
    "tested": 4.0,
    "ran": 3.0,
    "read": 2.5,
    "named": 1.5,  # in the agent's own text
    "asked": 2.5,  # in a user message
    "seen": 0.25,  # in a tool output only
}
# A reference loses half its weight after this many transcript messages: recent work ranks first,
# but a file edited 300 messages ago still outranks one a grep listed once.
_HALF_LIFE = 400.0
# Rank tiers: anything the agent acted on outranks what it merely named, which outranks what it saw.
_TIER: Mapping[str, int] = {
    "edited": 3,
    "created": 3,
    "tested": 2,
    "ran": 2,
    "read": 1,
    "named": 1,
    "asked": 1,
    "seen": 0,
}
_MAX_ITEMS = 600
_MAX_TEXT_SCAN = 200_000  # characters of one message that are read for references
_OUTPUT_SCAN_CHARS = 4000  # characters of a tool output read for paths it merely shows
_OUTCOME_SCAN_CHARS = 4000  # characters at each end of a tool output read for its exit code and test summary
_KEY_CHARS = 240  # longer commands and error lines are cut to this many characters

_SYMBOL_RE = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*(?:(?:\.|::)[A-Za-z_][A-Za-z0-9_]*)*)(?:\(\))?`")
_FILE_ARG_KEYS = ("file_path", "path", "filename", "file", "notebook_path", "target_file", "filepath")
_COMMAND_ARG_KEYS = ("command", "cmd", "script", "code", "input")
_EDIT_TOOLS = re.compile(r"edit|write|create|replace|patch|insert|append|apply|notebook", re.IGNORECASE)
_READ_TOOLS = re.compile(r"read|view|open|cat|show|glob|grep|search|find|list|ls", re.IGNORECASE)
_FENCED_SHELL_RE = re.compile(r"```(?:bash|sh|shell|console|zsh)[ \t]*\n(.*?)```", re.DOTALL)
_OBSERVATION_RE = re.compile(r"\s*(?:<returncode>|<output>|Observation:|exit code)", re.IGNORECASE)
_TEXT_CALL = "cw:fenced-command"  # the pending key of a command given in a fenced block of the reply


@dataclass(kw_only=True)
class WorkItem:
    """One thing in the working set: a file, a command, an open error or a symbol."""

    kind: ItemKind
    key: str
    """The path, command, error line or symbol, verbatim as the agent or the tool wrote it."""
    score: float = 0.0
    """Sum of reference weights, each halved every `_HALF_LIFE` messages, as of `last_index`."""
    tier: int = 0
    """The strongest kind of reference so far (acted on > named > seen)."""
    refs: int = 0
    last_index: int = -1
    """Transcript index of the newest reference."""
    actions: dict[str, int] = field(default_factory=dict)
    outcome: str | None = None
    """For commands and tested files: how the last run ended (``ok``, ``failed: …``)."""
    rank_key: tuple[int, float, int] = field(default=(0, -math.inf, -1), repr=False, compare=False)
    """Sorts like ``(tier, weight_at(now), last_index)`` for any ``now`` past the last reference
    (see `rerank`); kept up to date by the working set, so sorting reads an attribute."""

    def weight_at(self, index: int) -> float:
        decay: float = 0.5 ** (max(0, index - self.last_index) / _HALF_LIFE)
        return self.score * decay

    def rerank(self) -> None:
        """Update `rank_key` after a reference.

        log2 of the weight at ``now`` is ``log2(score) + last_index / half-life - now / half-life``:
        the last term is the same for every item, so the key needs no ``now``.
        """
        level = math.log2(self.score) + self.last_index / _HALF_LIFE if self.score > 0 else -math.inf
        self.rank_key = (self.tier, level, self.last_index)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "score": self.score,
            "tier": self.tier,
            "refs": self.refs,
            "last": self.last_index,
            "actions": dict(self.actions),
            "outcome": self.outcome,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkItem:
        kind = data["kind"]
        if kind not in ("file", "command", "error", "symbol"):
            raise ValueError(f"unknown working-set item kind {kind!r}")
        actions = data.get("actions") or {}
        if not isinstance(actions, Mapping):
            raise ValueError("working-set item actions must be an object")
        outcome = data.get("outcome")
        item = cls(
            kind=kind,
            key=str(data["key"]),
            score=float(data["score"]),
            tier=int(data["tier"]),
            refs=int(data["refs"]),
            last_index=int(data["last"]),
            actions={str(k): int(v) for k, v in actions.items()},
            outcome=None if outcome is None else str(outcome),
        )
        item.rerank()
        return item


@dataclass(kw_only=True)
class _PendingCall:
    command: str | None
    files: list[str]


class WorkingSet:
    """Ranked record of the files, commands, errors and symbols the agent acted on."""

    def __init__(self) -> None:
        self.items: dict[tuple[ItemKind, str], WorkItem] = {}
        self.cursor = 0
        """Transcript messages read so far."""
        self._pending: dict[str, _PendingCall] = {}
        """Calls whose result has not been read yet, by call id: the result sets the outcome."""
        self._renders: dict[tuple[int, int], tuple[str, int]] = {}
        self._row_tokens: dict[str, int] = {}
        """Tokens of rows rendered before by `_row_counter`, bounded."""
        self._row_counter: Callable[[str], int] | None = None
        """Renders since the last change, by (cursor, max_tokens): a compaction renders several times."""

    # --- reading the transcript -----------------------------------------------------------
    def catch_up(self, transcript: Sequence[Message], *, upto: int | None = None) -> None:
        """Read the messages added since the last call, up to index ``upto`` (each message is read once)."""
        end = len(transcript) if upto is None else min(upto, len(transcript))
        for index in range(self.cursor, end):
            self.observe(transcript[index], index)
        self.cursor = max(self.cursor, end)

    def observe(self, message: Message, index: int) -> None:
        """Record the references one transcript message makes."""
        self._renders.clear()
        if message.extra.get("contextwarden"):
            return  # the library's own context blocks and stand-ins are not the agent's work
        role = message.role
        if role == "assistant":
            for call in message.tool_calls:
                self._observe_call(call, index)
            text = message.text[:_MAX_TEXT_SCAN]
            if text:
                # agents without tool calling put their command in a fenced block of the reply
                # (mini-swe-agent style); the next observation carries its outcome
                for block in _FENCED_SHELL_RE.findall(text):
                    self._observe_command(block.strip(), index, call_id=_TEXT_CALL)
                for path in find_paths(_FENCED_SHELL_RE.sub(" ", text)):
                    self._touch("file", path, "named", index)
                for symbol in _SYMBOL_RE.findall(text):
                    if not is_path(symbol):
                        self._touch("symbol", symbol, "named", index)
        elif role == "user":
            text = message.text[:_MAX_TEXT_SCAN]
            if _TEXT_CALL in self._pending and _OBSERVATION_RE.match(text):
                # an observation sent back as a user message answers the fenced command before it
                self._observe_result(message, index, call_id=_TEXT_CALL)
                return
            for path in find_paths(text):
                self._touch("file", path, "asked", index)
        elif role == "tool":
            self._observe_result(message, index)

    def _observe_call(self, call: ToolCall, index: int) -> None:
        args = _arguments(call)
        files: list[str] = []
        command: str | None = None
        for key in _FILE_ARG_KEYS:
            value = args.get(key)
            if isinstance(value, str) and value.strip() and len(value) < 1024 and "\n" not in value:
                action = _file_tool_action(call.name, args)
                self._touch("file", value.strip(), action, index)
                files.append(value.strip())
        for item in args.get("edits", ()) if isinstance(args.get("edits"), list) else ():
            if isinstance(item, Mapping) and isinstance(item.get("file_path"), str):
                self._touch("file", item["file_path"], "edited", index)
        for key in _COMMAND_ARG_KEYS:
            value = args.get(key)
            if isinstance(value, str) and value.strip() and not files:
                command = value.strip()
                break
        if command is None and not args and call.arguments.strip() and not call.arguments.lstrip().startswith("{"):
            command = call.arguments.strip()  # a tool whose arguments are the command line itself
        if command is not None:
            self._observe_command(command, index, call_id=call.call_id, files=files)
        else:
            self._pending[call.call_id] = _PendingCall(command=None, files=files)

    def _observe_command(self, command: str, index: int, *, call_id: str, files: list[str] | None = None) -> None:
        tested = list(files or ())
        for path, action in shell_references(command[:_MAX_TEXT_SCAN]):
            self._touch("file", path, action, index)
            if action in ("tested", "ran"):
                tested.append(path)
        key = _one_line(command)
        self._touch("command", key, "ran", index)
        self._pending[call_id] = _PendingCall(command=key, files=tested)

    def _observe_result(self, message: Message, index: int, *, call_id: str | None = None) -> None:
        text = message.text[:_MAX_TEXT_SCAN]
        call = self._pending.pop(call_id or message.tool_call_id or "", None)
        failed, outcome = _outcome(text, is_error=message.is_error)
        if call is not None:
            if call.command is not None:
                item = self.items.get(("command", call.command))
                if item is not None:
                    item.outcome = outcome
                    if failed:
                        # error lines leave the output for the context block: none that gives orders
                        for line in admitted(error_lines(text, limit=2)):
                            self._touch("error", _one_line(line), "seen", index, tier=2)
                    else:
                        self._resolve_errors()
            for path in call.files:
                item = self.items.get(("file", path))
                if item is not None and (item.actions.get("tested") or item.actions.get("ran")):
                    item.outcome = outcome
        # a path that only appears in an output is weak evidence: the head of the output (where
        # listings and grep hits start) is enough, and scanning whole logs would slow compactions
        for path in find_paths(text[:_OUTPUT_SCAN_CHARS], limit=64):
            self._touch("file", path, "seen", index)

    def _resolve_errors(self) -> None:
        # a command that succeeds after failures: the errors seen so far were dealt with
        self._renders.clear()
        for key in [k for k in self.items if k[0] == "error"]:
            del self.items[key]

    def _touch(self, kind: ItemKind, key: str, action: str, index: int, *, tier: int | None = None) -> None:
        if not key or len(key) > _KEY_CHARS * 4:
            return
        self._renders.clear()
        item = self.items.get((kind, key))
        if item is None:
            if len(self.items) >= _MAX_ITEMS * 2:
                self._prune(index)
            item = self.items[(kind, key)] = WorkItem(kind=kind, key=key)
        item.score = item.weight_at(index) + _WEIGHTS[action]
        item.last_index = max(item.last_index, index)
        item.tier = max(item.tier, _TIER[action] if tier is None else tier)
        item.refs += 1
        item.actions[action] = item.actions.get(action, 0) + 1
        item.rerank()

    def _prune(self, index: int) -> None:
        ranked = sorted(self.items.values(), key=_by_rank, reverse=True)
        self.items = {(it.kind, it.key): it for it in ranked[:_MAX_ITEMS]}

    # --- ranking and rendering ------------------------------------------------------------
    def ranked(self, kind: ItemKind) -> list[WorkItem]:
        """Items of one kind, strongest first: acted-on before named before seen, then by weight now."""
        items = [it for it in self.items.values() if it.kind == kind]
        items.sort(key=_by_rank, reverse=True)
        return items

    def render(self, *, max_tokens: int, count: Callable[[str], int]) -> str:
        """The working-set section of the context block, at most `max_tokens` tokens ("" if empty)."""
        return self.render_counted(max_tokens=max_tokens, count=count)[0]

    def render_counted(self, *, max_tokens: int, count: Callable[[str], int]) -> tuple[str, int]:
        """`render` and its size: the sum of its lines' tokens by ``count`` plus one per line break.

        The sum is what the render was fitted by (at most ``max_tokens``); the text as one piece
        counts within a token or two of it (a line break can merge with the line before it).
        Both are kept until the next change.
        """
        if max_tokens <= 0:
            return "", 0
        memo = (self.cursor, max_tokens)
        if memo not in self._renders:
            self._renders[memo] = self._render(max_tokens, count)
        return self._renders[memo]

    def _render(self, max_tokens: int, count: Callable[[str], int]) -> tuple[str, int]:
        by_kind: dict[ItemKind, list[WorkItem]] = {"file": [], "command": [], "error": [], "symbol": []}
        for it in self.items.values():
            by_kind[it.kind].append(it)
        for items in by_kind.values():
            items.sort(key=_by_rank, reverse=True)
        files = (it for it in by_kind["file"] if it.tier >= 1 or it.refs >= 3)
        commands = by_kind["command"][:8]
        errors = by_kind["error"][:4]
        symbols = [it for it in by_kind["symbol"] if it.refs >= 2][:24]
        # a row's size is counted once: the same rows come back at every compaction
        sizes = self._row_tokens
        if len(sizes) > 8192 or count != self._row_counter:  # bound methods compare by object and function
            sizes.clear()
            self._row_counter = count

        def size(row: str) -> int:
            n = sizes.get(row)
            if n is None:
                n = sizes[row] = count(row)
            return n

        # rows are made as they are reached: only the strongest of a long session's items fit
        groups: list[tuple[str, Iterable[str]]] = [
            # the strongest files say what was done to them; the tail is bare paths, more of them fit
            ("Files:", (f"- {it.key} ({_describe(it)})" if i < 10 else f"- {it.key}" for i, it in enumerate(files))),
            ("Commands (last outcome):", (f"- {it.key} → {it.outcome or 'no result yet'}" for it in commands)),
            ("Unresolved errors:", (f"- {it.key}" for it in errors)),
        ]
        header = "Working set (what you acted on, most relevant first):"
        lines = [header]
        used = size(header)
        for title, rows in groups:
            title_cost = size(title) + 1
            added = False
            for row in rows:
                cost = size(row) + 1
                if used + cost + (0 if added else title_cost) > max_tokens:
                    break
                if not added:
                    lines.append(title)
                    used += title_cost
                    added = True
                lines.append(row)
                used += cost
        if symbols:
            row = "Symbols: " + ", ".join(it.key for it in symbols)
            while symbols and used + size(row) + 1 > max_tokens:
                symbols.pop()
                row = "Symbols: " + ", ".join(it.key for it in symbols)
            if symbols:
                lines.append(row)
                used += size(row) + 1
        return ("\n".join(lines), used) if len(lines) > 1 else ("", 0)

    # --- persistence ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "cursor": self.cursor,
            "items": [it.to_dict() for it in self.items.values()],
            "pending": {k: {"command": v.command, "files": list(v.files)} for k, v in self._pending.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkingSet:
        ws = cls()
        ws.cursor = int(data.get("cursor", 0))
        for raw in data.get("items", ()):
            item = WorkItem.from_dict(raw)
            ws.items[(item.kind, item.key)] = item
        for call_id, raw in (data.get("pending") or {}).items():
            command = raw.get("command")
            ws._pending[str(call_id)] = _PendingCall(
                command=None if command is None else str(command), files=[str(f) for f in raw.get("files", ())]
            )
        return ws


# --- helpers -------------------------------------------------------------------------------
_by_rank = attrgetter("rank_key")


def _arguments(call: ToolCall) -> dict[str, Any]:
    text = call.arguments
    if not text or len(text) > _MAX_TEXT_SCAN or not text.lstrip().startswith("{"):
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _file_tool_action(tool: str, args: Mapping[str, Any]) -> str:
    sub = args.get("command")
    if isinstance(sub, str) and sub in ("create",):
        return "created"
    if isinstance(sub, str) and sub in ("str_replace", "insert", "undo_edit", "edit", "write", "append"):
        return "edited"
    if isinstance(sub, str) and sub in ("view", "read", "cat"):
        return "read"
    if tool.lower() == "write" or "create" in tool.lower():
        return "created"
    if _EDIT_TOOLS.search(tool) or any(k in args for k in ("new_string", "old_string", "content", "new_str")):
        return "edited"
    if _READ_TOOLS.search(tool):
        return "read"
    return "named"


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _KEY_CHARS else line[: _KEY_CHARS - 1] + "…"


def _describe(item: WorkItem) -> str:
    order = ("created", "edited", "tested", "ran", "read", "named", "asked", "seen")
    parts = [f"{a} {item.actions[a]}×" for a in order if item.actions.get(a) and a != "seen"]
    if not parts:
        parts = [f"seen {item.actions.get('seen', 0)}×"]
    text = ", ".join(parts[:3])
    if item.outcome:
        text += f"; last run {item.outcome}"
    return text


def _outcome(text: str, *, is_error: bool) -> tuple[bool, str]:
    # Exit codes and test summaries are printed at the start (mini-swe-agent's <returncode>) or
    # at the end (shells, test runners) of an output; the middle of a long log is not read.
    scan = _OUTCOME_SCAN_CHARS
    ends = text if len(text) <= 2 * scan else text[:scan] + "\n" + text[-scan:]
    code = exit_code(ends)
    summary = test_summary(text[-_OUTCOME_SCAN_CHARS:])
    failed = (
        is_error
        or (code is not None and code != 0)
        or summary.get("failed", 0) > 0
        or summary.get("error", 0) > 0
        or (code is None and "Traceback (most recent call last)" in text)
    )
    if failed:
        first = admitted(error_lines(text, limit=2))[:1]
        detail = _one_line(first[0])[:120] if first else (f"exit code {code}" if code is not None else "error")
        return True, f"failed: {detail}"
    if summary.get("passed"):
        return False, f"ok ({summary['passed']} passed)"
    return False, "ok"

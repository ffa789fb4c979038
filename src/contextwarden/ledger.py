"""The task-progress ledger: what the agent already did, standing in for evicted rounds.

Each completed step (a tool-call round, or a request from the user) becomes an entry with its
status, its intention (the call and its arguments, or the request's key data), the facts its
output carried (identifiers kept verbatim) and a reference to the snapshot of its full text
(see `ledger_entries`).
The ledger is rendered into the view at every compaction, within a token budget: the newest
entries keep their facts, the oldest roll up into counts, and facts shown once are not repeated.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .keyinfo import fact_rank
from .ledger_entries import (
    LedgerEntry,
    StepStatus,
    StoredShape,
    describe_call,
    entry_for_round,
    entry_from_dict,
    entry_to_dict,
    request_facts,
    shorten,
)
from .messages import Message
from .provenance import admitted, source_label
from .shellrefs import is_path

__all__ = ["Ledger", "LedgerEntry", "StepStatus", "describe_call", "entry_for_round", "request_facts"]

_MARK = {"planned": "…", "done": "✓", "failed": "✗"}
_RANKS = 6
"""`fact_rank` values run from 0 to 5."""
HEADER = "[Progress ledger: steps already completed; do not repeat them.]"
KEY_DATA = "Key data by source: "


# In a tool's output, two forms rank with plain words, not ids: a category in snake case
# ("gift_card", "one_way": the same few values recur in every record) and a timestamp to the
# second (when a record was written, a log line's time: seldom what a later step names).
_CATEGORY_RE = re.compile(r"[a-z]+(?:_[a-z]+)+")
_TIMESTAMP_RE = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


def _output_rank(fact: str) -> int:
    """`fact_rank` of a fact lifted from a tool's output (see above)."""
    rank = fact_rank(fact)
    if rank == 0 and (_CATEGORY_RE.fullmatch(fact) or _TIMESTAMP_RE.match(fact)):
        return 3
    return rank


def _source(e: LedgerEntry) -> str:
    """Where an entry's facts came from: the step and its tools, or the user's request."""
    return f"#{e.step} user" if e.kind == "request" else source_label(e.step, e.tools)


def _by_source(facts: Sequence[str], origin: Mapping[str, str]) -> str:
    """Facts grouped by the tool (or the user) they came from, each group naming its steps.

    A label per tool rather than per step: the steps of one tool share one label, which keeps
    the ledger's room for the facts themselves.
    """
    groups: dict[str, tuple[list[str], list[str]]] = {}
    for f in facts:
        step, _, who = origin.get(f, "? ").partition(" ")
        steps, items = groups.setdefault(who, ([], []))
        if step not in steps:
            steps.append(step)
        items.append(f)
    return " ".join(f"[{who} {' '.join(steps)}] " + " · ".join(items) for who, (steps, items) in groups.items())


@dataclass
class Ledger:
    """Entries in step order, plus counts of entries rolled up out of the list."""

    entries: list[LedgerEntry] = field(default_factory=list)
    max_entries: int = 200
    """Entries beyond this roll up into ``rolled_up`` counts (the ledger stays bounded)."""
    rolled_up: dict[str, int] = field(default_factory=dict)
    next_step: int = 1
    notes_added: int = 0
    kept_facts: list[str] = field(default_factory=list)
    """Best facts of rolled-up requests and failures, oldest first (bounded by ``max_kept_facts``)."""
    max_kept_facts: int = 60
    kept_sources: dict[str, str] = field(default_factory=dict)
    """Where each kept fact came from (``#<step> <tool>`` or ``#<step> user``)."""
    _scale: float = field(default=1.15, repr=False, compare=False)
    _line_memo: dict[tuple[int, str], str] = field(default_factory=dict, repr=False, compare=False)
    _raw_costs: dict[str, float] = field(default_factory=dict, repr=False, compare=False)
    _rank_memo: dict[int, tuple[tuple[str, ...], tuple[tuple[str, ...], ...], int]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _tally_memo: dict[tuple[int, int, int], str] = field(default_factory=dict, repr=False, compare=False)
    _origin: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    """Sources of the facts of the render in progress (see `_by_source`)."""
    _changes: int = field(default=0, repr=False, compare=False)
    """Bumped by every change of entries or counts (keys the summary-line memo)."""
    """Unscaled size estimates of facts and lines: renders repeat most of them."""

    # --- recording ------------------------------------------------------------------------
    def record_round(
        self,
        messages: Sequence[Message],
        *,
        snapshot_id: str | None = None,
        facts: Sequence[str] | None = None,
        step: int | None = None,
    ) -> LedgerEntry | None:
        """Record a round from the transcript (a tool-call round or a user request).

        ``facts`` are the identifiers of the round's outputs when the caller already has them;
        ``step`` numbers the entry (entries stay sorted by step), default: the next number.
        """
        entry = entry_for_round(messages, snapshot_id=snapshot_id, facts=facts, step=step or self.next_step)
        return None if entry is None else self.append(entry)

    def append(self, entry: LedgerEntry) -> LedgerEntry:
        """Add a prepared entry (see `entry_for_round`), keeping entries sorted by step and bounded."""
        self._changes += 1
        if entry.step > 0:
            self.next_step = max(self.next_step, entry.step + 1)
        if self.entries and self.entries[-1].step > entry.step:
            bisect.insort(self.entries, entry, key=lambda e: e.step)
        else:
            self.entries.append(entry)
        while len(self.entries) > self.max_entries:
            # the oldest step rolls up into counts; the agent's notes go last (they are few)
            i = next((k for k, e in enumerate(self.entries) if e.kind != "note"), 0)
            self._roll_up([self.entries[i]])
            del self.entries[i]
        return entry

    def note(self, text: str, *, status: StepStatus = "done") -> LedgerEntry:
        """Record a step the agent reports itself (from ``on_turn_end`` or explicitly).

        Notes are numbered apart from the rounds' steps (negative numbers, shown as ``note 3``), so
        ``#<step>`` always names a round of the transcript.
        """
        return self._add(kind="note", status=status, intention=shorten(text, 240), facts=(), messages=(), snap=None)

    def plan(self, steps: Sequence[str]) -> list[LedgerEntry]:
        """Record planned steps (notes with status planned); mark them done later with `mark`."""
        return [self._add(kind="note", status="planned", intention=s, facts=(), messages=(), snap=None) for s in steps]

    def mark(self, step: int, status: StepStatus) -> None:
        """Change the status of a recorded step."""
        for i, e in enumerate(self.entries):
            if e.step == step:
                self.entries[i] = replace(e, status=status)
                self._changes += 1
                return
        raise KeyError(f"no ledger step {step}; known steps: {[e.step for e in self.entries][-10:]}")

    def _add(
        self,
        *,
        kind: Literal["tool", "request", "note"],
        status: StepStatus,
        intention: str,
        facts: tuple[str, ...],
        messages: Sequence[Message],
        snap: str | None,
    ) -> LedgerEntry:
        self.notes_added += 1
        return self.append(
            LedgerEntry(
                step=-self.notes_added,
                status=status,
                intention=intention,
                kind=kind,
                facts=facts,
                snapshot_id=snap,
                message_ids=tuple(m.message_id for m in messages),
                turn=messages[0].turn if messages else None,
            )
        )

    def _roll_up(self, entries: Sequence[LedgerEntry]) -> None:
        for e in entries:
            # What the user asked for and what failed outlives the entry: its best facts stay
            # listed (bounded), so a session hundreds of steps long still shows its first ticket.
            if e.kind == "request" or e.status == "failed":
                facts = e.facts[:6] if e.kind == "request" else admitted(e.facts[:6])
                for f in facts:
                    # file paths are left to the working set, which ranks the files a user named
                    if f not in self.kept_facts and fact_rank(f) <= 3 and not (e.kind == "request" and is_path(f)):
                        self.kept_facts.append(f)
                        self.kept_sources[f] = _source(e)
                dropped = self.kept_facts[: max(0, len(self.kept_facts) - self.max_kept_facts)]
                del self.kept_facts[: len(dropped)]
                for f in dropped:
                    self.kept_sources.pop(f, None)
            self.rolled_up[e.status] = self.rolled_up.get(e.status, 0) + 1
            for tool in e.tools:
                key = f"tool:{tool}"
                self.rolled_up[key] = self.rolled_up.get(key, 0) + 1

    # --- rendering ------------------------------------------------------------------------
    @property
    def done_steps(self) -> int:
        """Steps done or failed so far, rolled-up ones included."""
        listed = sum(1 for e in self.entries if e.status != "planned")
        return listed + self.rolled_up.get("done", 0) + self.rolled_up.get("failed", 0)

    def render(
        self,
        *,
        max_tokens: int,
        count: Callable[[str], int],
        exact: bool = True,
        exclude: str = "",
    ) -> str:
        """The ledger as one text within ``max_tokens`` (by ``count``); "" when empty or no room.

        Facts outrank prose: each step gets a short line (its call with arguments cut to a few
        dozen characters, or the start of a request), and the identifiers of every step, those
        cut from the lines included, are listed once each, best first (`fact_rank`), newest steps
        first. Older steps' lines go first when room runs out; their facts stay longest.

        With ``exact=False`` the size is only estimated (the caller counts the final text).
        """
        notes = [e for e in self.entries if e.kind == "note"]
        entries = [e for e in self.entries if e.kind != "note"]
        if (not entries and not notes and not self.rolled_up) or max_tokens <= 0:
            return ""
        cost = self._coster()
        if not exact:
            max_tokens = int(max_tokens * 0.97)  # estimates only: leave a margin so one render fits
        listable = max(1, max_tokens // 12)
        skipped, entries = (entries[:-listable], entries[-listable:]) if len(entries) > listable else ([], entries)
        # the summary line of everything skipped is an upper bound of the one rendered
        room = max_tokens - cost(HEADER) - cost(self._summary_line(skipped or entries)) - cost(KEY_DATA)
        if room <= 0:
            return ""  # not even the header and the summary line fit
        # the agent's own notes come first: they are few and say what it decided
        note_lines: list[str] = []
        for e in reversed(notes):
            c = cost(self._line(e)) + 1
            if c > room * 0.3:
                break
            note_lines.insert(0, self._line(e))
            room -= c
        # 1. Facts, best first, may take most of the room. Within a rank, what users stated comes
        #    first (the kept facts of rolled-up requests, then the listed requests, newest first),
        #    then tool steps' facts, newest step first, gathered up to three times the room so
        #    rendering stays cheap for long sessions.
        buckets: list[list[str]] = [[] for _ in range(_RANKS)]
        origin: dict[str, str] = {}
        """Each fact's source, as the first entry that gave it (newest first) names it."""
        for f in self.kept_facts:
            # what users stated in requests that rolled up: few, and not repeated by any newer step
            buckets[fact_rank(f)].append(f)
            origin.setdefault(f, self.kept_sources.get(f, "user"))
        # then what users asked for, every listed request (they are few, and a tool's output is
        # seldom what a later step needs by name the way a stated id or constraint is)
        everything = [*skipped, *entries]
        for e in reversed(everything):
            if e.kind == "request":
                for rank, group in enumerate(self._ranked_facts(e)[0]):
                    buckets[rank].extend(group)
                    for f in group:
                        origin.setdefault(f, _source(e))
        # a call that names what a user stated (their account id, a path they gave) looked up their own
        # things: its facts come before other outputs' (the profile read first outlasts later searches)
        stated = [f for f in buckets[0] if len(f) >= 4]
        tools = [e for e in reversed(everything) if e.kind != "request"]
        if stated:
            named = [e for e in tools if any(f in e.intention for f in stated)]
            first = {id(e) for e in named}
            tools = named + [e for e in tools if id(e) not in first]
        gathered = 0
        for e in tools:
            ranked_facts, weight = self._ranked_facts(e)
            for rank, group in enumerate(ranked_facts):
                buckets[rank].extend(group)
                for f in group:
                    origin.setdefault(f, _source(e))
            gathered += weight
            if gathered > room * 3:
                break
        ranked = list(dict.fromkeys(f for group in buckets for f in group))
        facts: list[str] = []
        used = 0
        fact_room = room * 0.7
        # facts already shown beside the ledger (the sections above it) are skipped; the test is a
        # substring search of a long text, so it runs only on the facts that are reached
        for f in ranked:
            if used + 2 > fact_room:  # no fact costs less than 2: the rest cannot fit
                break
            c = cost(f) + 1  # the " · " separator
            if used + c <= fact_room and not (exclude and f in exclude):
                facts.append(f)
                used += c
        # 2. Step lines, newest first, in what is left.
        lines = [self._line(e) for e in entries]
        hidden = len(entries)
        while hidden > 0 and used + cost(lines[hidden - 1]) + 1 <= room:
            hidden -= 1
            used += cost(lines[hidden]) + 1
        visible = entries[hidden:]
        # 3. Facts the lines already show are dropped; the room they free takes further facts.
        shown_text = "\n".join(lines[hidden:])
        kept = [f for f in facts if f not in shown_text]
        used -= sum(cost(f) + 1 for f in facts if f in shown_text)
        taken = set(facts)
        for f in ranked:
            if room - used < 3:
                break
            if f not in taken:
                c = cost(f) + 1
                # the size first: it is the cheaper test
                if used + c <= room and f not in shown_text and not (exclude and f in exclude):
                    kept.append(f)
                    taken.add(f)
                    used += c
        facts = kept
        self._origin = origin
        text = self._compose([*skipped, *entries[:hidden]], visible, facts, note_lines)
        if not exact:
            # the line-by-line budget above is approximate: trim facts until the whole text's estimate
            # fits, so the caller's exact count usually accepts the first render
            over = self.estimate(text) - max_tokens
            if over > 0 and facts:
                while over > 0 and facts:
                    over -= cost(facts.pop()) + 1
                text = self._compose([*skipped, *entries[:hidden]], visible, facts, note_lines)
            return text
        n = count(text)
        while n > max_tokens and (facts or visible):  # estimates ran over: drop facts, then old lines
            if facts:
                facts.pop()
            else:
                hidden += 1
                visible = entries[hidden:]
            text = self._compose([*skipped, *entries[:hidden]], visible, facts, note_lines)
            n = count(text)
        return text if n <= max_tokens else ""

    def warm(self, entry: LedgerEntry) -> None:
        """Work out ahead what rendering ``entry`` needs (its facts by rank, sizes of its facts and line).

        Compaction prepares entries on long turns before it; warming them there keeps the render of the
        compaction itself short.
        """
        self._ranked_facts(entry)
        cost = self._coster()
        for f in entry.facts:
            cost(f)
        cost(self._line(entry))

    def _ranked_facts(self, e: LedgerEntry) -> tuple[tuple[tuple[str, ...], ...], int]:
        """The entry's facts grouped by `fact_rank` (in their order) and their size in the pool."""
        memo = self._rank_memo.get(e.step)
        if memo is not None and memo[0] is e.facts:  # entries are immutable: same facts, same grouping
            return memo[1], memo[2]
        if len(self._rank_memo) > 5_000:
            self._rank_memo.clear()
        groups: list[list[str]] = [[] for _ in range(_RANKS)]
        for f in e.facts:
            groups[_output_rank(f) if e.kind != "request" else fact_rank(f)].append(f)
        if e.kind != "request":  # text lifted from a tool output: identifiers, and lines that give no orders
            groups = [admitted(g) for g in groups]
        grouped = tuple(tuple(g) for g in groups)
        weight = sum(len(f) // 3 + 1 for f in e.facts)
        self._rank_memo[e.step] = (e.facts, grouped, weight)
        return grouped, weight

    def _coster(self) -> Callable[[str], int]:
        """A cheap size estimate for lines and facts, scaled by what `calibrate` learned.

        Counting hundreds of new facts exactly at every compaction costs more than the rest of the
        render; the caller counts the final text once and reports it back through `calibrate`.
        """
        scale = self._scale
        memo = self._raw_costs
        if len(memo) > 20_000:
            memo.clear()

        def cost(text: str) -> int:
            raw = memo.get(text)
            if raw is None:
                # ~3 ASCII characters per token; CJK and other wide characters about one token each
                wide = 0 if text.isascii() else (len(text.encode("utf-8", "surrogatepass")) - len(text)) // 2
                raw = memo[text] = (len(text) - wide) / 3 + wide
            return int(raw * scale) + 1

        return cost

    def calibrate(self, estimated: int, actual: int) -> None:
        """Learn the ratio of real tokens to the estimate from a rendered ledger's exact count."""
        if estimated > 0 and actual > 0:
            ratio = min(1.5, max(0.5, actual / estimated))
            self._scale = min(1.5, max(0.5, 0.7 * self._scale + 0.3 * ratio * self._scale))

    def estimate(self, text: str) -> int:
        """The estimate `render` used for ``text`` (to pair with an exact count in `calibrate`)."""
        cost = self._coster()
        return sum(cost(line) for line in text.split("\n"))

    def _compose(
        self,
        hidden: Sequence[LedgerEntry],
        visible: Sequence[LedgerEntry],
        facts: Sequence[str],
        note_lines: Sequence[str] = (),
    ) -> str:
        lines = [HEADER, *note_lines, self._summary_line(hidden), *(self._line(e) for e in visible)]
        if facts:
            lines.append(KEY_DATA + _by_source(facts, self._origin))
        return "\n".join(x for x in lines if x)

    def _line(self, e: LedgerEntry) -> str:
        # "#<step>" is the reference: read_context("#<step>") resolves it to the step's snapshot
        key = (e.step, e.status)
        line = self._line_memo.get(key)
        if line is None:
            if len(self._line_memo) > 10_000:
                self._line_memo.clear()
            label = f"note {-e.step}" if e.kind == "note" else f"#{e.step}"
            line = self._line_memo[key] = f"{label} {_MARK[e.status]} {shorten(e.intention, 110)}"
        return line

    def _summary_line(self, hidden: Sequence[LedgerEntry]) -> str:
        # a render asks for the line of the same prefix of the entries several times
        key = (self._changes, len(hidden), hidden[-1].step if hidden else 0)
        line = self._tally_memo.get(key)
        if line is None:
            if len(self._tally_memo) > 64:
                self._tally_memo.clear()
            line = self._tally_memo[key] = self._tally_line(hidden)
        return line

    def _tally_line(self, hidden: Sequence[LedgerEntry]) -> str:
        counts: Counter[str] = Counter(e.status for e in hidden)
        tools: Counter[str] = Counter(t for e in hidden for t in e.tools)
        for key, n in self.rolled_up.items():
            if key.startswith("tool:"):
                tools[key[5:]] += n
            else:
                counts[key] += n
        if not counts:
            return ""
        parts = [f"{n} {status}" for status, n in sorted(counts.items())]
        top = ", ".join(f"{t}×{n}" for t, n in tools.most_common(6))
        return f"Earlier steps: {', '.join(parts)}" + (f" ({top})" if top else "")

    # --- persistence ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state (the size calibration included, so a reloaded ledger renders the same text)."""
        return {
            "entries": [entry_to_dict(e) for e in self.entries],
            "max_entries": self.max_entries,
            "rolled_up": dict(self.rolled_up),
            "next_step": self.next_step,
            "notes_added": self.notes_added,
            "kept_facts": list(self.kept_facts),
            "kept_sources": dict(self.kept_sources),
            "scale": self._scale,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, session_id: str | None = None) -> Ledger:
        """Inverse of `to_dict`.

        Raises:
            SchemaError: the data does not have the shape `to_dict` writes (names the field).
        """
        check = StoredShape(session_id)
        data = check.mapping(data, "ledger")
        raw_entries = check.items(data.get("entries", []), "ledger.entries")
        entries = [entry_from_dict(raw, f"ledger.entries[{i}]", check) for i, raw in enumerate(raw_entries)]
        rolled_up = check.mapping(data.get("rolled_up", {}), "ledger.rolled_up")
        for key, n in rolled_up.items():
            check.integer(n, f"ledger.rolled_up[{key!r}]")
        scale = check.number(data.get("scale", 1.15), "ledger.scale")
        ledger = cls(
            entries=entries,
            max_entries=check.integer(data.get("max_entries", 200), "ledger.max_entries", minimum=1),
            rolled_up={str(k): int(v) for k, v in rolled_up.items()},
            next_step=check.integer(data.get("next_step", len(entries) + 1), "ledger.next_step"),
            notes_added=check.integer(data.get("notes_added", 0), "ledger.notes_added", minimum=0),
            kept_facts=check.strings(data.get("kept_facts", []), "ledger.kept_facts"),
        )
        sources = check.mapping(data.get("kept_sources", {}), "ledger.kept_sources")
        ledger.kept_sources = {str(k): str(v) for k, v in sources.items() if isinstance(v, str)}
        ledger._scale = min(1.5, max(0.5, scale))
        return ledger

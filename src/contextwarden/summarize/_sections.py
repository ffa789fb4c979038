"""The structured summary shared by every summarizer: its sections, how it is parsed and fitted.

A summary is a list of sections, each rendered as ``Heading: first item`` followed by ``- item``
lines. The extractive summarizer builds the sections from messages; the LLM summarizer asks its
model for the same headings, parses the reply back and fits it with the same code, so a running
summary can be folded by either of them whichever wrote the previous one.

Fitting is a greedy fill in priority order (user constraints, the task, identifiers, then prose
newest first), checked against the exact count of the rendered text: what does not fit is
dropped from the lowest priority up, never cut in the middle of an identifier.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from ..tokens import TokenCounter

__all__ = ["HEADINGS", "SectionName", "Sections", "clip", "compose", "parse_summary"]

SectionName = Literal["task", "steps", "state", "key", "constraints", "errors", "open", "next", "other"]

HEADINGS: dict[SectionName, str] = {
    "task": "Task",
    "steps": "Completed steps",
    "state": "Current state",
    "key": "Key data",
    "constraints": "User constraints",
    "errors": "Errors and fixes",
    "open": "Open items",
    "next": "Next step",
    "other": "Earlier summary",
}
_BY_HEADING = {v.lower(): k for k, v in HEADINGS.items()}
# Headings a model may write instead of ours (the prompt asks for ours, models paraphrase).
_BY_HEADING.update(
    {
        "tasks": "task",
        "goal": "task",
        "objective": "task",
        "completed": "steps",
        "steps completed": "steps",
        "completed steps so far": "steps",
        "progress": "steps",
        "state": "state",
        "current status": "state",
        "status": "state",
        "key facts": "key",
        "key identifiers": "key",
        "identifiers": "key",
        "key data (restored)": "key",
        "user constraints (restored)": "constraints",
        "constraints": "constraints",
        "errors": "errors",
        "errors and fixes so far": "errors",
        "open questions": "open",
        "open issues": "open",
        "pending": "open",
        "next steps": "next",
        "next": "next",
    }
)
_HEADING_RE = re.compile(
    r"^\s*(?:#{1,6}\s*)?(?:\*\*)?\s*([A-Za-z][A-Za-z ()]{1,40}?)\s*(?:\*\*)?\s*:\s*(?:\*\*)?\s*(.*)$"
)
_BULLET_RE = re.compile(r"^\s*(?:[-*•]|\d{1,3}[.)])\s+")
_EARLIER_RE = re.compile(r"^\((\d+) earlier steps? not listed\)$")
ID_SEPARATOR = " · "


@dataclass
class Sections:
    """The parts of a structured summary, each a list of lines (items), oldest first."""

    task: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    earlier_steps: int = 0
    """Steps rolled up into a count when the list did not fit."""
    state: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    """Identifiers kept verbatim, best first."""
    key: list[str] = field(default_factory=list)
    """Key-data lines that are more than one identifier (a model's ``- user id: abc``)."""
    constraints: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    open: list[str] = field(default_factory=list)
    next: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    """Text of a previous summary that had none of the headings."""

    def items(self, name: SectionName) -> list[str]:
        """The lines of one section (``key`` gives the key-data lines, not the identifiers)."""
        lines: list[str] = getattr(self, name)
        return lines

    def text(self) -> str:
        """Every line, for searching (not the rendering)."""
        parts = [*self.task, *self.steps, *self.state, *self.ids, *self.key, *self.constraints]
        parts += [*self.errors, *self.open, *self.next, *self.other]
        return "\n".join(parts)


def parse_summary(text: str) -> Sections:
    """Read a summary written with (or close to) the headings of `HEADINGS`.

    Lines before the first heading, and every line of a text without headings, go to ``other``.
    A ``Key data`` line holding ``·``-separated tokens gives identifiers; other key-data lines
    stay lines.
    """
    out = Sections()
    current: SectionName | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        match = _HEADING_RE.match(line) if not _BULLET_RE.match(line) else None
        name = _BY_HEADING.get(match.group(1).strip().lower()) if match else None
        if match and name is not None:
            current = name
            rest = match.group(2).strip().strip("*").strip()
            if rest:
                _add(out, current, rest)
            continue
        _add(out, current or "other", _BULLET_RE.sub("", line, count=1).strip())
    return out


def _add(out: Sections, name: SectionName, line: str) -> None:
    line = " ".join(line.split())
    if not line:
        return
    if name == "key":
        tokens = [t.strip() for t in line.split(ID_SEPARATOR.strip())] if ID_SEPARATOR.strip() in line else [line]
        if len(tokens) > 1 or (" " not in line and len(line) <= 80):
            out.ids.extend(t for t in tokens if t and t not in out.ids)
        else:
            out.key.append(line)
        return
    if name == "steps":
        m = _EARLIER_RE.match(line)
        if m:
            out.earlier_steps += int(m.group(1))
            return
    if name == "constraints" and line.startswith('"') and line.endswith('"') and len(line) > 1:
        line = line[1:-1]
    out.items(name).append(line)


def clip(text: str, max_tokens: int, counter: TokenCounter) -> str:
    """``text`` cut at a word boundary (with ``…``) so that it counts at most ``max_tokens``."""
    text = " ".join(text.split())
    if max_tokens <= 0:
        return ""
    if counter.count_text(text) <= max_tokens:
        return text
    cut = min(len(text), max_tokens * 4)
    while cut > 0:
        head = text[:cut]
        space = head.rfind(" ")
        if space > cut // 2:
            head = head[:space]
        candidate = head.rstrip(" ,;:") + " …"
        if counter.count_text(candidate) <= max_tokens:
            return candidate
        cut = int(cut * 0.8) if cut > 8 else cut - 1
    return ""


_ORDER: tuple[SectionName, ...] = ("task", "steps", "state", "key", "constraints", "errors", "open", "next", "other")
_ID = "\x00"  # marks a picked identifier (rendered on the key-data line) apart from key-data lines


@dataclass(frozen=True)
class _Pick:
    section: SectionName
    text: str
    order: int
    """Position in the source list: rendering restores source order whatever the pick order."""


@dataclass
class _Fill:
    counter: TokenCounter
    room: float
    picks: list[_Pick] = field(default_factory=list)
    opened: set[SectionName] = field(default_factory=set)
    used: float = 0.0

    def cost(self, section: SectionName, text: str) -> float:
        if text.startswith(_ID):
            cost = self.counter.count_text(ID_SEPARATOR + text[1:])
        else:
            cost = self.counter.count_text("- " + text) + 1
        if section not in self.opened:
            cost += self.counter.count_text(HEADINGS[section] + ":") + 1
        return float(cost)

    def take(self, section: SectionName, text: str, order: int, *, limit: float | None = None) -> bool:
        if not text or text == _ID:
            return False
        cost = self.cost(section, text)
        ceiling = self.room if limit is None else min(self.room, limit)
        if self.used + cost > ceiling:
            return False
        self.picks.append(_Pick(section, text, order))
        self.opened.add(section)
        self.used += cost
        return True


_CLIP: dict[SectionName, int] = {
    "task": 80,
    "constraints": 90,
    "next": 50,
    "errors": 60,
    "open": 50,
    "state": 80,
    "key": 60,
    "steps": 40,
    "other": 120,
}


def compose(
    sections: Sections,
    *,
    max_tokens: int,
    counter: TokenCounter,
    facts_share: float = 0.6,
    extra_ids: Iterable[str] = (),
    clip_scale: float = 1.0,
) -> str:
    """Render ``sections`` within ``max_tokens`` (by ``counter``), dropping what does not fit.

    Order of precedence: user constraints, the task's first line, identifiers (all of them when
    they fit beside those, else up to ``facts_share`` of the budget), then the next step, errors,
    open items, current state, key-data lines, later task lines, completed steps (newest first;
    older ones become a count), earlier prose, and last any identifiers still left. Identifiers
    shown verbatim elsewhere in the text are not repeated on the key-data line; a second pass
    ranks those last, so the room they would have taken goes to prose and further identifiers.

    Args:
        sections: What to render (not modified).
        max_tokens: Upper bound on ``counter.count_text(result)``.
        counter: The token counter the bound is measured with.
        facts_share: Share of the budget identifiers may take when they do not all fit.
        extra_ids: Identifiers ranked after ``sections.ids`` (duplicates skipped).
        clip_scale: Multiplies the per-line token limits (a model's lines are worth keeping longer).
    """
    ids = list(dict.fromkeys([*sections.ids, *extra_ids]))
    if max_tokens <= 0:
        return ""
    first, shown = _fill(sections, ids, set(), max_tokens, counter, facts_share, clip_scale)
    if not shown:
        return first
    second, _ = _fill(sections, ids, shown, max_tokens, counter, facts_share, clip_scale)
    return second if _covers(second, ids) >= _covers(first, ids) else first


def _covers(text: str, ids: list[str]) -> int:
    return sum(1 for i in ids if i in text)


def _fill(
    sections: Sections,
    ids: list[str],
    late: set[str],
    max_tokens: int,
    counter: TokenCounter,
    facts_share: float,
    clip_scale: float,
) -> tuple[str, set[str]]:
    """One greedy fill; returns the text and the identifiers its prose shows verbatim.

    Identifiers in ``late`` (shown by the prose of a first fill) are only taken after the prose.
    """
    fill = _Fill(counter=counter, room=max_tokens * 0.97 - 1)
    n_steps = len(sections.steps)
    limits = {name: max(8, int(n * clip_scale)) for name, n in _CLIP.items()}

    def take(name: SectionName, lines: list[str], *, newest_first: bool = False, stop: bool = False) -> int:
        taken = 0
        order = range(len(lines) - 1, -1, -1) if newest_first else range(len(lines))
        for j in order:
            if fill.take(name, clip(lines[j], limits[name], counter), j):
                taken += 1
            elif stop:
                break
        return taken

    if n_steps or sections.earlier_steps:
        # the roll-up line ("(n earlier steps not listed)") is always rendered: keep room for it
        rollup = f"- ({sections.earlier_steps + n_steps} earlier steps not listed)"
        fill.room -= counter.count_text(rollup) + counter.count_text(HEADINGS["steps"] + ":") + 2
    take("constraints", sections.constraints)
    take("task", sections.task[:1])
    early = [i for i in ids if i not in late]
    # all identifiers at once when the whole line fits (counted whole: per-item counts overestimate)
    all_cost = counter.count_text(f"{HEADINGS['key']}: {ID_SEPARATOR.join(early)}") + 1 if early else 0
    if early and fill.used + all_cost <= fill.room:
        fill.picks.extend(_Pick("key", _ID + i, j) for j, i in enumerate(ids) if i not in late)
        fill.opened.add("key")
        fill.used += all_cost
    else:
        for j, i in enumerate(ids):
            if i not in late:
                fill.take("key", _ID + i, j, limit=max_tokens * facts_share)
    take("next", sections.next[-1:])
    take("errors", sections.errors, newest_first=True)
    take("open", sections.open, newest_first=True)
    take("state", sections.state)
    for j, line in enumerate(sections.key):
        fill.take("key", clip(line, limits["key"], counter), len(ids) + j)
    for j in range(len(sections.task) - 1, 0, -1):
        fill.take("task", clip(sections.task[j], limits["task"], counter), j)
    take("steps", sections.steps, newest_first=True, stop=True)
    take("other", sections.other)
    picked = {p.text for p in fill.picks}
    for j, i in enumerate(ids):
        if _ID + i not in picked:
            fill.take("key", _ID + i, j)

    picks = fill.picks
    while picks and counter.count_text(_render(picks, sections, n_steps)) > max_tokens:
        picks.pop()
    # Identifiers the prose already shows verbatim free their room for further identifiers.
    # So do constraints quoted whole in a task line.
    tasks = [p.text for p in picks if p.section == "task"]
    picks = [p for p in picks if p.section != "constraints" or not any(p.text in t for t in tasks)]
    prose = "\n".join(p.text for p in picks if not p.text.startswith(_ID))
    shown = {i for i in ids if i in prose}
    picks = [p for p in picks if not (p.text.startswith(_ID) and p.text[1:] in prose)]
    chosen = {p.text for p in picks}
    base = len(picks)
    picks += [_Pick("key", _ID + i, j) for j, i in enumerate(ids) if _ID + i not in chosen and i not in prose]
    if len(picks) > base and counter.count_text(_render(picks, sections, n_steps)) > max_tokens:
        lo, hi = base, len(picks)  # the longest prefix of the refill that fits
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if counter.count_text(_render(picks[:mid], sections, n_steps)) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        picks = picks[:lo]
    text = _render(picks, sections, n_steps)
    if counter.count_text(text) > max_tokens:
        return clip(text, max_tokens, counter), shown
    return text, shown


def _render(picks: list[_Pick], sections: Sections, n_steps: int) -> str:
    grouped: dict[SectionName, list[_Pick]] = {}
    for p in picks:
        grouped.setdefault(p.section, []).append(p)
    lines: list[str] = []
    for name in _ORDER:
        group = sorted(grouped.get(name, ()), key=lambda p: p.order)
        if name == "steps" and not group and sections.earlier_steps + n_steps:
            lines.append(f"{HEADINGS[name]}:\n- ({sections.earlier_steps + n_steps} earlier steps not listed)")
            continue
        if not group:
            continue
        heading = HEADINGS[name]
        items = [p.text for p in group]
        if name == "key":
            ids = [t[1:] for t in items if t.startswith(_ID)]
            lines.append(f"{heading}: {ID_SEPARATOR.join(ids)}" if ids else f"{heading}:")
            lines.extend(f"- {t}" for t in items if not t.startswith(_ID))
        elif name in ("task", "next", "state") and len(items) == 1:
            lines.append(f"{heading}: {items[0]}")
        else:
            lines.append(f"{heading}:")
            if name == "steps":
                earlier = sections.earlier_steps + n_steps - len(items)
                if earlier:
                    lines.append(f"- ({earlier} earlier steps not listed)")
            quote = name == "constraints"
            lines.extend(f'- "{t}"' if quote else f"- {t}" for t in items)
    return "\n".join(lines)

"""What a compaction lost: identifiers, user constraints and open items present before, absent after.

`fidelity_report(before, after)` compares two message lists (typically the transcript and the
view that replaced it, or the evicted messages and the summary message) by what an agent can
still read: text contents and tool-call arguments. Identifiers and constraint sentences are
found exactly as the extractive summarizer finds them, so the report measures what that
summarizer promises to keep. Matching is verbatim for identifiers; constraint sentences and
open items match with whitespace and case normalised (a summary may re-wrap lines).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..keyinfo import fact_rank
from ..messages import Message
from .extractive import INTENT_RE, TODO_RE, constraint_sentences, failed_result, message_identifiers, split_sentences

__all__ = ["FidelityReport", "fidelity_report", "open_items", "readable_text"]


def readable_text(messages: Sequence[Message]) -> str:
    """Everything a model reads in ``messages``: text contents, tool names and call arguments."""
    chunks: list[str] = []
    for m in messages:
        chunks.append(m.text)
        for c in m.tool_calls:
            chunks.append(c.name)
            chunks.append(c.arguments)
    return "\n".join(chunks)


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def open_items(messages: Sequence[Message]) -> list[str]:
    """Open items in ``messages``: failed tool calls never retried with success, TODO-like sentences,
    and a question the assistant asked last that no user message answered yet."""
    items: list[str] = []
    calls: dict[str, str] = {}
    failed: dict[str, str] = {}
    last_text = max((j for j, x in enumerate(messages) if x.role == "assistant" and x.text), default=-1)
    answered = any(m.role == "user" for m in messages[last_text + 1 :]) if last_text >= 0 else True
    for i, m in enumerate(messages):
        for c in m.tool_calls:
            calls[c.call_id] = c.name
        if m.role == "tool":
            name = calls.get(m.tool_call_id or "", m.name or "tool")
            if failed_result(m):
                first = m.text.strip().split("\n", 1)[0][:160]
                failed[name] = first
            else:
                failed.pop(name, None)
        elif m.role == "assistant" and m.text:
            sentences = split_sentences(m.text)
            items.extend(s for s in sentences if TODO_RE.search(s))
            if i == last_text and not answered:
                items.extend(s for s in sentences if s.endswith("?") or INTENT_RE.search(s))
    items.extend(failed.values())
    return list(dict.fromkeys(items))


@dataclass(frozen=True, kw_only=True)
class FidelityReport:
    """Facts present before a compaction and whether they survived it."""

    identifiers: tuple[str, ...]
    """Identifiers found before (ids, paths, numbers, dates, URLs, names), best first."""
    lost_identifiers: tuple[str, ...]
    constraints: tuple[str, ...]
    """Sentences in which the user stated requirements, limits or preferences."""
    lost_constraints: tuple[str, ...]
    open_items: tuple[str, ...]
    """Unresolved errors, TODOs and a pending question or intention."""
    lost_open_items: tuple[str, ...]

    @property
    def total(self) -> int:
        """Facts checked."""
        return len(self.identifiers) + len(self.constraints) + len(self.open_items)

    @property
    def lost(self) -> int:
        """Facts lost."""
        return len(self.lost_identifiers) + len(self.lost_constraints) + len(self.lost_open_items)

    @property
    def share_kept(self) -> float:
        """Share of all facts kept (1.0 when there was nothing to keep)."""
        return 1.0 - self.lost / self.total if self.total else 1.0

    @property
    def identifiers_kept(self) -> float:
        """Share of identifiers kept (1.0 when there were none)."""
        n = len(self.identifiers)
        return 1.0 - len(self.lost_identifiers) / n if n else 1.0

    @property
    def ok(self) -> bool:
        """True when nothing was lost."""
        return self.lost == 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (counts, shares and the lost facts)."""
        return {
            "share_kept": round(self.share_kept, 4),
            "identifiers_kept": round(self.identifiers_kept, 4),
            "identifiers": len(self.identifiers),
            "constraints": len(self.constraints),
            "open_items": len(self.open_items),
            "lost_identifiers": list(self.lost_identifiers),
            "lost_constraints": list(self.lost_constraints),
            "lost_open_items": list(self.lost_open_items),
        }


def fidelity_report(before: Sequence[Message], after: Sequence[Message]) -> FidelityReport:
    """Which identifiers, user constraints and open items of ``before`` are missing from ``after``.

    Args:
        before: The messages before compaction (the transcript, or the span that was replaced).
        after: What replaced them (the view, or the summary message).
    """
    after_text = readable_text(after)
    after_norm = _norm(after_text)
    ids: dict[str, None] = {}
    constraints: dict[str, None] = {}
    for m in before:
        for f in message_identifiers(m):
            ids.setdefault(f, None)
        if m.role == "user":
            for s in constraint_sentences(m.text):
                constraints.setdefault(s, None)
    items = open_items(before)
    ranked = sorted(ids, key=fact_rank)
    lost_ids = tuple(f for f in ranked if f not in after_text)
    lost_constraints = tuple(c for c in constraints if _norm(c) not in after_norm)
    lost_items: list[str] = []
    for item in items:
        if _norm(item) in after_norm:
            continue
        # an item restated in other words still counts when every identifier in it survived
        item_ids = [f for f in message_identifiers(Message.assistant(item)) if f]
        if item_ids and all(f in after_text for f in item_ids):
            continue
        lost_items.append(item)
    return FidelityReport(
        identifiers=tuple(ranked),
        lost_identifiers=lost_ids,
        constraints=tuple(constraints),
        lost_constraints=lost_constraints,
        open_items=tuple(items),
        lost_open_items=tuple(lost_items),
    )

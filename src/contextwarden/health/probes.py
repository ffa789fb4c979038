"""Deterministic fidelity probes: the facts that matter in a compaction's input, and whether the view kept them.

Facts that matter are the ones the user or the agent stated, not every token of every tool output
(those stay in snapshots and are read back on demand): identifiers the user gave or the agent
named in two of its messages or more (text and tool-call arguments), the user's constraints, the
agent's decisions, and
open items (failed calls not yet fixed, TODOs, a pending question). A fact survives when its
text occurs in what the model reads next: the view, which carries the ledger, the notes and the
running summary. Identifiers, constraints and open items are found and matched by
`contextwarden.summarize.fidelity_report`, exactly as the summarizers promise to keep them;
decisions are the agent's sentences that commit to a choice.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..messages import Message
from ..summarize import fidelity_report, message_identifiers, readable_text

__all__ = ["Probe", "ProbeReport", "decision_sentences", "extract_probes", "probe_fidelity"]

ProbeKind = Literal["identifier", "constraint", "decision", "open-item"]

_DECISION_RE = re.compile(
    r"\b(?:decided|decision|we(?:'ll| will) (?:use|go with|keep)|I(?:'ll| will) (?:use|go with|keep)|"
    r"going with|chose|choose to|opted|settled on|instead of)\b",
    re.IGNORECASE,
)
_SPLIT_RE = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True, kw_only=True)
class Probe:
    """One fact to look for after a compaction."""

    kind: ProbeKind
    text: str


@dataclass(frozen=True, kw_only=True)
class ProbeReport:
    """Probes of a compaction's input and the ones its output lost."""

    probes: tuple[Probe, ...]
    lost: tuple[Probe, ...]

    @property
    def score(self) -> float:
        """Share of probes kept (1.0 when there was nothing to probe)."""
        return 1.0 - len(self.lost) / len(self.probes) if self.probes else 1.0

    def by_kind(self) -> dict[str, tuple[int, int]]:
        """``(kept, total)`` by probe kind."""
        out: dict[str, tuple[int, int]] = {}
        lost = set(self.lost)
        for p in self.probes:
            kept, total = out.get(p.kind, (0, 0))
            out[p.kind] = (kept + (p not in lost), total + 1)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "score": round(self.score, 4),
            "by_kind": {k: {"kept": kept, "total": total} for k, (kept, total) in self.by_kind().items()},
            "lost": [{"kind": p.kind, "text": p.text} for p in self.lost],
        }


def decision_sentences(messages: Sequence[Message]) -> list[str]:
    """Sentences in which the assistant commits to a choice ("decided to...", "going with...")."""
    found: dict[str, None] = {}
    for m in messages:
        if m.role != "assistant" or not m.text:
            continue
        for part in _SPLIT_RE.split(m.text):
            sentence = " ".join(part.split())
            if 12 <= len(sentence) <= 300 and _DECISION_RE.search(sentence):
                found.setdefault(sentence, None)
    return list(found)


def _agent_identifiers(messages: Sequence[Message], limit: int) -> list[str]:
    """Identifiers the user gave, and those the agent named in two messages or more.

    Not those that merely appeared in a tool output, nor a path the agent touched once long ago:
    what the agent keeps coming back to is what it will need again (the working set's rule too).
    """
    user: dict[str, None] = {}
    agent: dict[str, int] = {}
    for m in messages:
        if m.role == "user":
            for f in message_identifiers(m):
                user.setdefault(f, None)
        elif m.role == "assistant":
            for f in message_identifiers(m):
                agent[f] = agent.get(f, 0) + 1
    recurring = [f for f, n in agent.items() if n >= 2 and f not in user]
    return [*user, *recurring][:limit]


def extract_probes(messages: Sequence[Message], *, max_identifiers: int = 40) -> list[Probe]:
    """The facts that matter in ``messages`` (at most ``max_identifiers`` identifiers, in order of appearance)."""
    light = _light(messages)
    return _probes(light, fidelity_report(light, ()), max_identifiers)[0]


def _probes(before: Sequence[Message], report: Any, max_identifiers: int) -> tuple[list[Probe], set[tuple[str, str]]]:
    lost: set[tuple[str, str]] = set()
    probes: list[Probe] = []
    lost_ids = set(report.lost_identifiers)
    for f in _agent_identifiers(before, max_identifiers):
        probes.append(Probe(kind="identifier", text=f))
        if f in lost_ids:
            lost.add(("identifier", f))
    lost_constraints = set(report.lost_constraints)
    for c in report.constraints:
        probes.append(Probe(kind="constraint", text=c))
        if c in lost_constraints:
            lost.add(("constraint", c))
    lost_items = set(report.lost_open_items)
    for item in report.open_items:
        probes.append(Probe(kind="open-item", text=item))
        if item in lost_items:
            lost.add(("open-item", item))
    return probes, lost


def _light(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with each tool output cut to its head: enough to tell a failure and its first
    line (open items), while tool outputs give no probes of their own. Scanning whole outputs for
    identifiers was most of the probes' cost: ~24 ms per compaction of a 32k view on the demo's
    coding session, ~10 ms with heads only."""
    out: list[Message] = []
    for m in messages:
        if m.role == "tool" and len(m.text) > _TOOL_HEAD:
            m = Message.tool_result(m.tool_call_id or "", m.text[:_TOOL_HEAD], name=m.name, is_error=m.is_error)
        out.append(m)
    return out


_TOOL_HEAD = 400


def probe_fidelity(before: Sequence[Message], after: Sequence[Message], *, max_identifiers: int = 40) -> ProbeReport:
    """Which facts of ``before`` (a compaction's input) are missing from ``after`` (the view it produced)."""
    before = _light(before)
    report = fidelity_report(before, after)
    probes, lost = _probes(before, report, max_identifiers)
    after_norm = " ".join(readable_text(after).split()).lower()
    for d in decision_sentences(before):
        probes.append(Probe(kind="decision", text=d))
        if " ".join(d.split()).lower() not in after_norm:
            lost.add(("decision", d))
    return ProbeReport(probes=tuple(probes), lost=tuple(p for p in probes if (p.kind, p.text) in lost))

"""The probes benchmark: what the agent still knows after compaction, and whether the user's words survived.

For each trace and budget B: a fresh session with a window of B tokens (cl100k, no reserved
output, no tool schemas). By default the session sees the messages **turn by turn**, as an agent
loop does: one round at a time (a message that is not a tool result starts a round) with a
`prepare` after each (a turn whose protected part cannot fit B is skipped, as a served loop would
fail that one call); ``mode="once"`` adds every message and prepares once. The final view is
scored:

* retention: share of the trace's probe strings found verbatim in the view's text (contents and
  tool-call arguments);
* when the trace has them (``rules-dev.jsonl``, see its README): rules kept (each ``keep``
  sentence verbatim in the view), corrections current (the correction ``statement`` is in the view,
  or its ``value`` is, after the last occurrence of every ``stale`` value the view still shows),
  forgeries contained (each ``forged`` sentence absent from every message of the view that is not a
  tool result: system prompt, context block, summary, recalled memories, user and assistant
  messages);
* whether every view fitted B under the OpenAI-style count, and kept every tool call with its results.

The recency baseline of the same run keeps the system message and the newest whole rounds that fit
B under the same count, and is scored the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .._json import BadJSON, loads as bounded_loads
from ..adapters import to_messages
from ..compaction.config import CompactionConfig
from ..exceptions import ConfigError, ContextWardenError
from ..messages import Message
from ..session import Session
from ..summarize.base import Summarizer
from ..summarize.fidelity import readable_text as view_text  # what a model reads: probes are looked up there
from ..tokens import TokenCounter, get_counter
from ..toolpairs import validate

__all__ = [
    "Correction",
    "Mode",
    "ProbeTrace",
    "RulesScore",
    "load_traces",
    "recency_view",
    "rounds_of",
    "run_probes",
    "score_rules",
    "view_text",
]

Mode = Literal["turn", "once"]


@dataclass(frozen=True, kw_only=True)
class Correction:
    """A value the user stated and corrected later (``current`` in the rules file)."""

    value: str
    stale: tuple[str, ...]
    statement: str


@dataclass(frozen=True, kw_only=True)
class ProbeTrace:
    """One trace of the probe file."""

    trace_id: str
    messages: list[dict[str, Any]]
    probes: list[str]
    keep: list[str] = field(default_factory=list)
    """Standing rules the user stated: each must be in the final view verbatim."""
    current: list[Correction] = field(default_factory=list)
    forged: list[str] = field(default_factory=list)
    """Instruction sentences planted in tool outputs: none may show outside a tool result."""


def _correction(raw: Any) -> Correction:
    stale = raw["stale"]
    return Correction(
        value=str(raw["value"]),
        stale=tuple(str(s) for s in (stale if isinstance(stale, list) else [stale])),
        statement=str(raw.get("statement", "")),
    )


def load_traces(path: str | Path) -> list[ProbeTrace]:
    """Read a probe JSONL file; a malformed line is an error naming its number."""
    traces: list[ProbeTrace] = []
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = bounded_loads(line)
                if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
                    raise TypeError("a trace is an object with a `messages` list")
                traces.append(
                    ProbeTrace(
                        trace_id=str(row["id"]),
                        messages=row["messages"],
                        probes=list(row["probes"]),
                        keep=[str(r) for r in row.get("keep", [])],
                        current=[_correction(c) for c in row.get("current", [])],
                        forged=[str(f) for f in row.get("forged", [])],
                    )
                )
            except (BadJSON, KeyError, TypeError, AttributeError, ValueError) as exc:
                raise ConfigError(
                    f"{path}:{n}: not a probe trace ({exc!r}); expected {{id, messages, probes}} and optionally "
                    "keep, current [{value, stale, statement}] and forged"
                ) from None
    return traces


def rounds_of(messages: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The messages in rounds as an agent loop sees them: each message but a tool result starts one."""
    out: list[list[dict[str, Any]]] = []
    for m in messages:
        if m.get("role") == "tool" and out:
            out[-1].append(m)
        else:
            out.append([m])
    return out


@dataclass(kw_only=True)
class RulesScore:
    """Counts of one view (or a sum of views) against the rules fields."""

    kept: int = 0
    rules: int = 0
    current: int = 0
    corrections: int = 0
    contained: int = 0
    forged: int = 0

    def add(self, other: RulesScore) -> None:
        self.kept += other.kept
        self.rules += other.rules
        self.current += other.current
        self.corrections += other.corrections
        self.contained += other.contained
        self.forged += other.forged

    def figures(self) -> dict[str, float | None]:
        """Shares (None where the file has no such field)."""

        def share(a: int, b: int) -> float | None:
            return round(a / b, 4) if b else None

        return {
            "rules_kept": share(self.kept, self.rules),
            "corrections_current": share(self.current, self.corrections),
            "forgeries_contained": share(self.contained, self.forged),
        }


def _is_current(c: Correction, text: str) -> bool:
    if c.statement and c.statement in text:
        return True
    if c.value not in text:
        return False
    last = text.rfind(c.value)
    return all(s not in text or last > text.rfind(s) for s in c.stale)


def score_rules(trace: ProbeTrace, text: str, outside_tools: str) -> tuple[RulesScore, dict[str, Any]]:
    """The trace's rules figures on a view (its whole text, and the text of its messages that are not tool results).

    Also returns what failed (rules lost, corrections not current, forgeries shown), empty when nothing did.
    """
    lost = [r for r in trace.keep if r not in text]
    stale = [c.statement or c.value for c in trace.current if not _is_current(c, text)]
    shown = [f for f in trace.forged if f in outside_tools]
    score = RulesScore(
        kept=len(trace.keep) - len(lost),
        rules=len(trace.keep),
        current=len(trace.current) - len(stale),
        corrections=len(trace.current),
        contained=len(trace.forged) - len(shown),
        forged=len(trace.forged),
    )
    failed: dict[str, Any] = {}
    if lost:
        failed["lost_rules"] = lost
    if stale:
        failed["not_current"] = stale
    if shown:
        failed["forged_shown"] = shown
    return score, failed


def _harness_tokens(view: Sequence[Message], counter: TokenCounter) -> int:
    """The reference count: 3 + per message 4 + content + per call 3 + name + arguments."""
    total = 3
    for m in view:
        total += 4 + counter.count_text(m.text)
        for c in m.tool_calls:
            total += 3 + counter.count_text(c.name) + counter.count_text(c.arguments)
    return total


def _raw_text(messages: Iterable[dict[str, Any]]) -> str:
    def one(m: dict[str, Any]) -> str:
        content = m.get("content")
        text = content if isinstance(content, str) else ""
        return text + " ".join(c["function"]["arguments"] for c in (m.get("tool_calls") or []))

    return "\n".join(one(m) for m in messages)


def recency_view(messages: Sequence[dict[str, Any]], budget: int, counter: TokenCounter) -> list[dict[str, Any]]:
    """The baseline: a leading system message and the newest whole rounds that fit ``budget``.

    Counted as the reference does: 3, then per message 4 + its content, per call 3 + its arguments.
    """

    def size(m: dict[str, Any]) -> int:
        content = m.get("content")
        n = 4 + counter.count_text(content if isinstance(content, str) else "")
        return n + sum(3 + counter.count_text(c["function"]["arguments"]) for c in (m.get("tool_calls") or []))

    system = [m for m in messages[:1] if m.get("role") == "system"]
    used = 3 + sum(size(m) for m in system)
    kept: list[dict[str, Any]] = []
    for chunk in reversed(rounds_of(messages[len(system) :])):
        tokens = sum(size(m) for m in chunk)
        if used + tokens > budget:
            break
        used += tokens
        kept[:0] = chunk
    return system + kept


def _final_view(session: Session, trace: ProbeTrace, mode: Mode) -> list[Message]:
    if mode == "turn":
        for chunk in rounds_of(trace.messages):
            session.add(to_messages(chunk, format="openai"))
            try:
                session.prepare(format="internal")
            except ContextWardenError:  # a protected message larger than B: that turn cannot be served
                pass
    else:
        session.add(to_messages(trace.messages, format="openai"))
    return session.prepare(format="internal").view


def run_probes(
    data: str | Path,
    budgets: Iterable[int],
    *,
    mode: Mode = "turn",
    config: CompactionConfig | None = None,
    summarizer_factory: Callable[[], Summarizer] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run the benchmark; returns the JSON document of ../shared/docs/BENCHMARKS.md section 2 (plus the rules figures).

    Raises:
        ConfigError: ``mode`` is neither ``turn`` nor ``once``, or the file is malformed.
    """
    if mode not in ("turn", "once"):
        raise ConfigError(f"probes mode {mode!r} is invalid; use 'turn' (one round at a time) or 'once'.", key="mode")
    traces = load_traces(data)
    counter = get_counter("tiktoken:cl100k_base")
    budgets = list(budgets)
    has_rules = any(t.keep or t.current or t.forged for t in traces)
    out: dict[str, Any] = {"dataset": str(data), "mode": mode, "budgets": {}}
    done, total_steps = 0, len(traces) * len(budgets)
    for budget in budgets:
        found = total = base_found = 0
        all_fit = all_pairs = True
        misses: list[dict[str, Any]] = []
        failures: list[dict[str, Any]] = []
        rules, base_rules = RulesScore(), RulesScore()
        started = time.perf_counter()
        for trace in traces:
            session = Session(
                trace.trace_id,
                window=budget,
                reserved_output=0,
                counter=counter,
                config=config,
                summarizer=summarizer_factory() if summarizer_factory else None,
            )
            try:
                view = _final_view(session, trace, mode)
            except ContextWardenError as exc:  # the final turn cannot be served: nothing is in view
                failures.append({"trace": trace.trace_id, "error": type(exc).__name__})
                view = []
            text = view_text(view)
            lost = [p for p in trace.probes if p not in text]
            found += len(trace.probes) - len(lost)
            total += len(trace.probes)
            if lost:
                misses.append({"trace": trace.trace_id, "lost": lost})
            all_fit &= _harness_tokens(view, counter) <= budget
            all_pairs &= not validate(view)
            baseline = recency_view(trace.messages, budget, counter)
            base_text = _raw_text(baseline)
            base_found += sum(p in base_text for p in trace.probes)
            if has_rules:
                score, failed = score_rules(trace, text, view_text([m for m in view if m.role != "tool"]))
                rules.add(score)
                if failed:
                    failures.append({"trace": trace.trace_id, **failed})
                outside = _raw_text(m for m in baseline if m.get("role") != "tool")
                base_rules.add(score_rules(trace, base_text, outside)[0])
            done += 1
            if progress:
                progress(done, total_steps)
        row: dict[str, Any] = {
            "retention": round(found / total, 4) if total else 0.0,
            "found": found,
            "total": total,
            "all_fit": all_fit,
            "all_pairs_ok": all_pairs,
            "traces": len(traces),
            "seconds": round(time.perf_counter() - started, 3),
            "misses": misses,
        }
        recency: dict[str, Any] = {"retention": round(base_found / total, 4) if total else 0.0}
        if has_rules:
            row.update(rules.figures())
            row["rules"] = {"kept": rules.kept, "total": rules.rules}
            row["corrections"] = {"current": rules.current, "total": rules.corrections}
            row["forgeries"] = {"contained": rules.contained, "total": rules.forged}
            recency.update(base_rules.figures())
        row["failures"] = failures
        row["recency"] = recency
        out["budgets"][str(budget)] = row
    return out

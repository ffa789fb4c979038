"""The probes benchmark: what the agent still knows after compaction.

For each trace and budget B: a fresh session with a window of B tokens (cl100k, no reserved
output, no tool schemas), every message added, the view prepared once with the default pipeline
(no LLM; the extractive summarizer when one is given). Score: share of the trace's probe strings
found verbatim in the view's text (contents and tool-call arguments). Also: did every view fit
B under the OpenAI-style count, and keep every tool call with its results.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..adapters import to_messages
from ..compaction.config import CompactionConfig
from ..compaction.summarizer import Summarizer
from ..exceptions import ConfigError
from ..messages import Message
from ..session import Session
from ..summarize.fidelity import readable_text as view_text  # what a model reads: probes are looked up there
from ..tokens import TokenCounter, get_counter
from ..toolpairs import validate

__all__ = ["ProbeTrace", "load_traces", "run_probes", "view_text"]


@dataclass(frozen=True, kw_only=True)
class ProbeTrace:
    """One trace of the probe file."""

    trace_id: str
    messages: list[dict[str, Any]]
    probes: list[str]


def load_traces(path: str | Path) -> list[ProbeTrace]:
    """Read a probe JSONL file; a malformed line is an error naming its number."""
    traces: list[ProbeTrace] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                traces.append(ProbeTrace(trace_id=str(row["id"]), messages=row["messages"], probes=list(row["probes"])))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ConfigError(f"{path}:{n}: not a probe trace ({exc}); expected {{id, messages, probes}}") from None
    return traces


def _harness_tokens(view: Sequence[Message], counter: TokenCounter) -> int:
    """The reference count: 3 + per message 4 + content + per call 3 + name + arguments."""
    total = 3
    for m in view:
        total += 4 + counter.count_text(m.text)
        for c in m.tool_calls:
            total += 3 + counter.count_text(c.name) + counter.count_text(c.arguments)
    return total


def run_probes(
    data: str | Path,
    budgets: Iterable[int],
    *,
    config: CompactionConfig | None = None,
    summarizer_factory: Callable[[], Summarizer] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run the benchmark; returns the JSON document of ../shared/docs/BENCHMARKS.md section 2."""
    traces = load_traces(data)
    counter = get_counter("tiktoken:cl100k_base")
    budgets = list(budgets)
    out: dict[str, Any] = {"dataset": str(data), "budgets": {}}
    done, total_steps = 0, len(traces) * len(budgets)
    for budget in budgets:
        found = total = 0
        all_fit = all_pairs = True
        misses: list[dict[str, Any]] = []
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
            session.add(to_messages(trace.messages, format="openai"))
            view = session.prepare(format="internal").view
            text = view_text(view)
            hit = [p for p in trace.probes if p in text]
            found += len(hit)
            total += len(trace.probes)
            lost = [p for p in trace.probes if p not in text]
            if lost:
                misses.append({"trace": trace.trace_id, "lost": lost})
            all_fit &= _harness_tokens(view, counter) <= budget
            all_pairs &= not validate(view)
            done += 1
            if progress:
                progress(done, total_steps)
        out["budgets"][str(budget)] = {
            "retention": round(found / total, 4) if total else 0.0,
            "found": found,
            "total": total,
            "all_fit": all_fit,
            "all_pairs_ok": all_pairs,
            "traces": len(traces),
            "seconds": round(time.perf_counter() - started, 3),
            "misses": misses,
        }
    return out

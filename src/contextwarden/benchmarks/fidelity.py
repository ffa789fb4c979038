"""The summarizer fidelity benchmark: probe identifiers kept by a summary of the evicted part alone.

For each probe trace: the messages (OpenAI chat format) are cut into rounds; everything but the
system prompt and the last round is "evicted" and summarized with ``max_tokens`` = B (cl100k
counts). Score: share of the trace's probe strings found verbatim in the summary text, over all
probes and over the probes that occur in the evicted part at all ("reachable"; the others live
in the system prompt or the last round, which stay in the view).

Summarizers measured:

* ``extractive`` — `ExtractiveSummarizer`, one request for the whole evicted part;
* ``extractive_running`` — the same part folded in three successive requests (the running summary
  the session builds as rounds leave the view);
* ``llm`` — `LLMSummarizer` over real HTTP against `ScriptedOpenAIServer`, to exercise the path:
  a ``faithful`` script (copies the constraints and identifiers the prompt lists), a ``lossy``
  script (a generic summary without identifiers: validation must restore them and count a
  failure), and ``map_reduce`` (faithful, with ``max_input_tokens`` small enough to force chunks).
  The scripted replies are not a model: these figures test the checking and fallback machinery,
  not summary quality.

Run: ``python -m contextwarden.benchmarks.fidelity --data FILE --json OUT``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..adapters import to_messages
from ..messages import Message
from ..rounds import group_rounds
from ..summarize.base import SummaryRequest
from ..summarize.extractive import ExtractiveSummarizer
from ..summarize.fidelity import fidelity_report, readable_text
from ..tokens import TokenCounter, get_counter
from .probes import ProbeTrace, load_traces

__all__ = ["evicted_part", "main", "run_fidelity"]


def evicted_part(messages: Sequence[Message]) -> list[Message]:
    """Every message but the leading system/developer messages and the last round."""
    rounds = group_rounds(messages)
    start = 0
    while start < len(rounds) and rounds[start].kind == "system":
        start += 1
    body = rounds[start:-1] if len(rounds) - start > 1 else []
    return [messages[i] for r in body for i in r.indices]


def _request(messages: Sequence[Message], max_tokens: int, previous: str | None = None) -> SummaryRequest:
    return SummaryRequest(
        previous=previous,
        messages=list(messages),
        max_tokens=max_tokens,
        span=(messages[0].message_id, messages[-1].message_id),
    )


def _running(summarize: Callable[[SummaryRequest], str], part: Sequence[Message], max_tokens: int) -> str:
    """Fold ``part`` in three successive requests, at round boundaries."""
    rounds = group_rounds(part)
    size = max(1, -(-len(rounds) // 3))
    summary: str | None = None
    for k in range(0, len(rounds), size):
        batch = [part[i] for r in rounds[k : k + size] for i in r.indices]
        summary = summarize(_request(batch, max_tokens, summary))
    return summary or ""


class _Score:
    def __init__(self) -> None:
        self.found = self.total = self.reachable = self.found_reachable = 0
        self.ids_kept: list[float] = []
        self.over_budget = 0
        self.misses: list[dict[str, Any]] = []
        self.started = time.perf_counter()

    def add(self, trace: ProbeTrace, part_text: str, summary: str, ids_kept: float | None, over: bool) -> None:
        hit = [p for p in trace.probes if p in summary]
        reach = [p for p in trace.probes if p in part_text]
        self.found += len(hit)
        self.total += len(trace.probes)
        self.reachable += len(reach)
        self.found_reachable += sum(1 for p in reach if p in summary)
        if ids_kept is not None:
            self.ids_kept.append(ids_kept)
        self.over_budget += int(over)
        lost = [p for p in reach if p not in summary]
        if lost:
            self.misses.append({"trace": trace.trace_id, "lost": lost})

    def result(self, **extra: Any) -> dict[str, Any]:
        out: dict[str, Any] = {
            "retention": round(self.found / self.total, 4) if self.total else 0.0,
            "retention_reachable": round(self.found_reachable / self.reachable, 4) if self.reachable else 0.0,
            "found": self.found,
            "total": self.total,
            "reachable": self.reachable,
            "over_budget": self.over_budget,
            "seconds": round(time.perf_counter() - self.started, 3),
        }
        if self.ids_kept:
            out["identifiers_kept_mean"] = round(sum(self.ids_kept) / len(self.ids_kept), 4)
        out.update(extra)
        out["misses"] = self.misses
        return out


def _faithful(body: dict[str, Any]) -> str:
    """A scripted "model" that keeps what the prompt says must be kept, under our headings.

    It copies the must-keep identifiers and constraints, and the key data of the summaries it
    is asked to merge; it writes no other facts (a model would, so this is a floor).
    """
    prompt = str(body["messages"][-1]["content"])
    ids: list[str] = []
    for line in re.findall(r"(?:Identifiers that must appear verbatim|Key data): (.*)", prompt):
        ids += [i.strip() for i in line.split(" · ") if i.strip() and i.strip() not in ids]
    constraints = re.search(r"User constraints to quote verbatim:\n((?:- .*\n?)+)", prompt)
    lines = ["Task: the user's request (see constraints)", "Completed steps:", "- looked up the records"]
    lines.append("Key data: " + " · ".join(ids))
    if constraints:
        lines += ["User constraints:", constraints.group(1).strip()]
    lines.append("Next step: continue with the user")
    return "\n".join(lines)


_LOSSY = "Task: help the customer with their booking.\nCompleted steps:\n- looked things up\nNext step: continue."


def run_fidelity(
    data: str | Path,
    *,
    budgets: Iterable[int] = (400, 800),
    llm: bool = True,
    counter: TokenCounter | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the benchmark; returns a JSON-ready dict (see the module docstring)."""
    traces = load_traces(data)
    counter = counter if counter is not None else get_counter("tiktoken:cl100k_base")
    budgets = list(budgets)
    parts = []
    for trace in traces:
        messages = to_messages(trace.messages, format="openai")
        part = evicted_part(messages)
        parts.append((trace, part, readable_text(part)))
    out: dict[str, Any] = {"dataset": str(data), "counter": counter.name, "traces": len(traces)}
    extractive = ExtractiveSummarizer(counter=counter)
    for mode in ("extractive", "extractive_running"):
        out[mode] = {}
        for budget in budgets:
            score = _Score()
            for trace, part, text in parts:
                if not part:
                    continue
                if mode == "extractive":
                    summary = extractive.summarize(_request(part, budget))
                else:
                    summary = _running(extractive.summarize, part, budget)
                report = fidelity_report(part, [Message.user(summary)])
                score.add(trace, text, summary, report.identifiers_kept, counter.count_text(summary) > budget)
            out[mode][str(budget)] = score.result()
            if progress:
                progress(f"{mode} @{budget}: {out[mode][str(budget)]['retention']}")
    if llm:
        out["llm"] = _run_llm(parts, budgets[0], counter, progress)
    return out


def _run_llm(
    parts: list[tuple[ProbeTrace, list[Message], str]],
    budget: int,
    counter: TokenCounter,
    progress: Callable[[str], None] | None,
) -> dict[str, Any]:
    from ..llm.openai import OpenAIChatModel
    from ..summarize.llm import LLMSummarizer
    from ..testing import ScriptedOpenAIServer

    out: dict[str, Any] = {"max_tokens": budget}
    scripts: dict[str, tuple[Any, int]] = {
        "faithful": (_faithful, 8000),
        "lossy": (_LOSSY, 8000),
        "map_reduce": (_faithful, 1200),
    }
    for name, (script, max_input) in scripts.items():
        with ScriptedOpenAIServer(default=script) as server, OpenAIChatModel("scripted", base_url=server.base_url) as m:
            summarizer = LLMSummarizer(m, counter=counter, max_input_tokens=max_input, deadline_s=60)
            score = _Score()
            sources: dict[str, int] = {}
            failures = calls = chunked = 0
            for trace, part, text in parts:
                if not part:
                    continue
                result = summarizer.summarize_result(_request(part, budget))
                sources[result.source] = sources.get(result.source, 0) + 1
                failures += int(result.failure is not None)
                calls += result.calls
                chunked += int(result.chunks > 1)
                report = fidelity_report(part, [Message.user(result.text)])
                score.add(trace, text, result.text, report.identifiers_kept, counter.count_text(result.text) > budget)
            out[name] = score.result(
                max_input_tokens=max_input,
                sources=sources,
                failures=failures,
                model_calls=calls,
                http_requests=len(server.requests),
                map_reduce_traces=chunked,
            )
        if progress:
            progress(f"llm {name}: {out[name]['retention']} ({failures} failures, {calls} calls)")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m contextwarden.benchmarks.fidelity --data FILE [--budgets 400,800] [--json OUT] [--no-llm]``."""
    parser = argparse.ArgumentParser(prog="python -m contextwarden.benchmarks.fidelity", description=__doc__)
    parser.add_argument("--data", required=True, type=Path, help="probe traces (JSONL: id, messages, probes)")
    parser.add_argument("--budgets", default="400,800", help="summary max_tokens, comma list (default 400,800)")
    parser.add_argument("--json", dest="json_out", type=Path, help="write the results here")
    parser.add_argument("--no-llm", action="store_true", help="skip the LLM summarizer runs")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        parser.error(f"{args.data}: no such file")
    try:
        budgets = [int(x) for x in args.budgets.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--budgets {args.budgets!r}: give token counts as a comma list, e.g. 400,800")
    result = run_fidelity(args.data, budgets=budgets, llm=not args.no_llm, progress=lambda s: print(s, file=sys.stderr))
    brief = {k: v for k, v in result.items()}
    for mode in ("extractive", "extractive_running"):
        brief[mode] = {b: {k: v for k, v in row.items() if k != "misses"} for b, row in result[mode].items()}
    if "llm" in result:
        brief["llm"] = {
            k: ({kk: vv for kk, vv in v.items() if kk != "misses"} if isinstance(v, dict) else v)
            for k, v in result["llm"].items()
        }
    print(json.dumps(brief, indent=2))
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

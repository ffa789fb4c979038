"""``contextwarden eval FILE``: fidelity of compaction on a transcript, by deterministic probes and an LLM judge."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer
from rich.table import Table

from ..health import HealthMonitor, ProcessHealth, probe_fidelity
from ..replay import split_turns
from ._common import CLIError, build_session, err, get_settings, load_transcript, out, plain, print_json
from .transcript import FormatOpt, ModelOpt, WindowOpt, summarizer_for

__all__ = ["eval_command"]

_KIND_NAMES = {"identifier": "identifiers", "constraint": "user constraints", "decision": "decisions",
               "open-item": "open items"}  # fmt: skip


def _http_url(value: str) -> str:
    """``--base-url`` must be an http(s) URL with a host."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise typer.BadParameter(f"{value!r} is not an http(s) URL; give the API root, e.g. http://127.0.0.1:8080/v1")
    return value


def eval_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Transcript: JSON list, JSONL, or a request body.", show_default=False)],
    budget: Annotated[
        int | None, typer.Option("--budget", "-b", min=1, help="Token budget of the view (default: the model's).")
    ] = None,
    model: ModelOpt = None,
    window: WindowOpt = None,
    format: FormatOpt = "auto",
    judge: Annotated[
        str | None,
        typer.Option("--judge", help="Also ask this model (OpenAI-compatible) to judge answers before/after."),
    ] = None,
    base_url: Annotated[
        str, typer.Option("--base-url", help="The judge's API root (ending in /v1).", callback=_http_url)
    ] = "https://api.openai.com/v1",
    api_key_env: Annotated[
        str | None,
        typer.Option(
            "--api-key-env",
            help="Environment variable holding the judge's API key (default: OPENAI_API_KEY when it is set; "
            "a local server may need none).",
        ),
    ] = None,
    questions: Annotated[
        list[str] | None, typer.Option("--question", "-q", help="A question for the judge (repeat); default: asked.")
    ] = None,
    n_questions: Annotated[int, typer.Option(min=1, help="Questions the judge model writes when none are given.")] = 8,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Replay a transcript turn by turn, then report what compaction kept.

    Deterministic probes: identifiers the user gave or the agent came back to, user constraints,
    decisions and open items of the transcript, looked up in the final view; and the same probes
    on each compaction's input against its output (the health monitor's score). With --judge, an
    LLM answers the same questions from the transcript and from the view, and judges whether the
    answers agree.
    """
    settings = get_settings(ctx)
    loaded = load_transcript(file, format=format)
    summarizer, note = summarizer_for(settings)
    session = build_session(
        settings, model=model, window=window, budget=budget, tools=loaded.tools, summarizer=summarizer
    )
    monitor = HealthMonitor(session, process=ProcessHealth())
    scores: list[float] = []
    for chunk in split_turns(loaded.messages):
        if chunk:
            session.add(chunk)
        session.prepare(format="internal")
        latest = monitor.samples[-1] if monitor.samples else None
        if latest is not None and latest.fidelity is not None:
            scores.append(latest.fidelity)
    view = session.prepare(format="internal").view
    report = probe_fidelity(loaded.messages, view)
    result: dict[str, Any] = {
        "file": str(file),
        "messages": len(loaded.messages),
        "view_messages": len(view),
        "budget": session.budget.effective,
        "summarizer": note,
        "probes": report.to_dict(),
        "compactions": {
            "count": len(scores),
            "mean_fidelity": round(sum(scores) / len(scores), 4) if scores else None,
            "min_fidelity": round(min(scores), 4) if scores else None,
        },
        "alerts": dict(monitor.alert_counts),
    }
    if judge is not None:
        from ..health.judge import judge_fidelity
        from ..llm.openai import OpenAIChatModel

        key = os.environ.get(api_key_env or "OPENAI_API_KEY")
        if api_key_env is not None and key is None:
            raise CLIError(
                f"`--api-key-env {api_key_env}`: that environment variable is not set; export it with the judge's "
                "API key, or name another variable.",
                exit_code=2,
            )
        with OpenAIChatModel(judge, base_url=base_url, api_key=key) as llm, err.status("asking the judge…"):
            verdicts = judge_fidelity(llm, loaded.messages, view, questions=questions or (), n_questions=n_questions)
        result["judge"] = {"model": judge, **verdicts.to_dict()}
    if json_out:
        print_json(result)
        return
    table = Table(title=f"{plain(file.name)}: {len(loaded.messages)} messages → view of {len(view)} "
                        f"(budget {session.budget.effective:,}; {plain(note)})")  # fmt: skip
    for col in ("check", "kept", "total", "score"):
        table.add_column(col, justify="left" if col == "check" else "right")
    for kind, (kept, total) in report.by_kind().items():
        table.add_row(f"probes: {_KIND_NAMES.get(kind, kind)}", str(kept), str(total), f"{kept / total:.2f}")
    table.add_row("[b]probes: all[/b]", str(len(report.probes) - len(report.lost)), str(len(report.probes)),
                  f"[b]{report.score:.2f}[/b]")  # fmt: skip
    comp = result["compactions"]
    if comp["count"]:
        table.add_row("each compaction (mean / min)", "", str(comp["count"]),
                      f"{comp['mean_fidelity']:.2f} / {comp['min_fidelity']:.2f}")  # fmt: skip
    if "judge" in result:
        j = result["judge"]
        table.add_row(f"LLM judge ({plain(judge or '')})", str(j["agree"]), str(j["questions"]), f"{j['fidelity']:.2f}")
        if j["unusable"]:
            table.add_row("  judge replies unusable", str(j["unusable"]), "", "")
    out.print(table)
    if report.lost:
        lost = "; ".join(f"{p.kind}: {p.text[:80]}" for p in report.lost[:10])
        err.print(f"lost ({len(report.lost)}): {plain(lost)}", soft_wrap=True)
    if result["alerts"]:
        err.print(f"health alerts: {plain(json.dumps(result['alerts']))}")
    if judge is not None and result["judge"]["unusable"]:
        steps = ", ".join(f"{n} {step}" for step, n in result["judge"]["unusable_by_step"].items())
        err.print(f"the judge gave {result['judge']['unusable']} unusable replies ({steps}); each counts as a failure")

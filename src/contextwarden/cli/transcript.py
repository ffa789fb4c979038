"""``contextwarden compact FILE`` and ``contextwarden count FILE``: work on a transcript file."""

from __future__ import annotations

import importlib
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ..budget import Budget
from ..messages import ImagePart, Message, TextPart, ThinkingPart, ToolCall
from ..models import lookup_model
from ..settings import Settings
from ..snapshots import FileSnapshotStore, SnapshotStore
from ..summarize.base import Summarizer
from ..tokens.accountant import TokenAccountant
from ._common import (
    DEFAULT_COUNT_MODEL,
    CLIError,
    atomic_write,
    build_session,
    err,
    get_settings,
    load_transcript,
    out,
    plain,
    print_json,
    progress_bar,
    render_transcript,
    token_counting,
)

__all__ = ["compact_command", "count_command", "summarizer_for"]

FormatOpt = Annotated[
    str,
    typer.Option("--format", "-f", help="Transcript format: auto, openai, responses or anthropic."),
]
ModelOpt = Annotated[
    str | None, typer.Option("--model", "-m", help="Model (window, tokenizer); default: `model` in the config.")
]
WindowOpt = Annotated[
    int | None, typer.Option("--window", "-w", min=1, help="Context window in tokens (needed for unknown models).")
]


def summarizer_for(settings: Settings) -> tuple[Summarizer | None, str]:
    """The summarizer the settings ask for, and a note on what runs.

    The command line runs without an LLM: by default (``none``) the summary layer stays off and
    clearing, eviction and the progress ledger do the work; ``extractive`` adds the deterministic
    extractive summarizer of `contextwarden.summarize` when this build has it.
    """
    name = settings.summarizer.model.strip().lower()
    if name == "none":
        return None, "summary layer off (no LLM: the progress ledger keeps the facts)"
    if name != "extractive":
        raise CLIError(
            f"summarizer.model = {settings.summarizer.model!r}: the command line runs without an LLM; "
            "set it to 'extractive' or 'none'.",
            exit_code=2,
        )
    try:  # imported by name: the summarizers package is optional in this build
        module = importlib.import_module("contextwarden.summarize")
        summarizer: Summarizer = module.ExtractiveSummarizer()
    except (ImportError, AttributeError):
        return None, "summary layer off (no extractive summarizer in this build)"
    return summarizer, "extractive summarizer"


def compact_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Transcript: JSON list, JSONL, or a request body.", show_default=False)],
    budget: Annotated[
        int | None, typer.Option("--budget", "-b", min=1, help="Token budget of the compacted view (default: model).")
    ] = None,
    model: ModelOpt = None,
    window: WindowOpt = None,
    format: FormatOpt = "auto",
    out_path: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the view here (default: stdout).", metavar="PATH")
    ] = None,
    snapshots: Annotated[
        Path | None,
        typer.Option("--snapshots", help="Keep the full originals of what was shortened in this directory."),
    ] = None,
) -> None:
    """Compact a transcript to a token budget; write the view in the same format.

    The view goes to stdout (or --out, written atomically); a one-line summary goes to stderr.
    """
    started = time.perf_counter()
    settings = get_settings(ctx)
    loaded = load_transcript(file, format=format)
    summarizer, note = summarizer_for(settings)
    store: SnapshotStore | None = FileSnapshotStore(snapshots) if snapshots is not None else None
    session = build_session(
        settings,
        session_id="cli-" + file.stem[:40].replace(" ", "_"),
        model=model,
        window=window,
        budget=budget,
        tools=loaded.tools,
        snapshots=store,
        summarizer=summarizer,
        format=loaded.format,
    )
    messages = loaded.messages
    chunk = 500
    with progress_bar("counting", len(messages), enabled=len(messages) > 4 * chunk) as advance:
        for i in range(0, len(messages), chunk):
            session.add(messages[i : i + chunk])
            advance(len(messages[i : i + chunk]))
    before = session.accountant.count_messages(messages)  # what `count` reports as the messages' tokens
    schemas = session.accountant.count_tools(loaded.tools) if loaded.tools else 0
    prepared = session.prepare(format="internal")
    text = render_transcript(loaded, prepared.view)
    if out_path is not None:
        atomic_write(out_path, text)
    else:
        typer.echo(text, nl=False)
    status = prepared.status
    tool_note = f", plus {schemas:,} in tool schemas" if schemas else ""
    layers = ", ".join(f"{k}×{v}" for k, v in sorted(status.compactions.items())) or "none needed"
    snaps = len(session.snapshots.list_snapshots(session.session_id))
    where = f" in {plain(str(snapshots))}" if snapshots is not None else " (pass --snapshots DIR to keep them)"
    err.print(
        f"compacted {len(messages)} messages ({before:,} tokens) → {len(prepared.view)} messages "
        f"({status.used:,} tokens){tool_note}; budget {status.budget:,} ({status.ratio:.0%}, {status.state}); "
        f"layers: {layers}; {snaps} snapshot(s){where if snaps else ''}; {note}; "
        f"{time.perf_counter() - started:.2f}s",
        soft_wrap=True,
    )


_COMPONENT_ORDER = ("system", "text", "tool_calls", "tool_results", "thinking", "images", "framing", "tool_schemas")


def _breakdown(messages: list[Message], acc: TokenAccountant) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    by_role: dict[str, dict[str, int]] = {}
    comp: Counter[str] = Counter()
    f = acc.framing
    for m in messages:
        total = acc.count_message(m)
        parts = 0
        for p in m.parts:
            if isinstance(p, TextPart):
                n = acc.count_text(p.text)
                key = "system" if m.role in ("system", "developer") else "tool_results" if m.role == "tool" else "text"
            elif isinstance(p, ToolCall):
                n = f.per_tool_call + acc.count_text(p.name) + acc.count_text(p.arguments)
                key = "tool_calls"
            elif isinstance(p, ThinkingPart):
                n, key = acc.count_text(p.text), "thinking"
            elif isinstance(p, ImagePart):
                n, key = acc.count_message(Message(role="user", parts=(p,))) - f.per_message, "images"
            else:  # pragma: no cover - the message model has no other part
                continue
            comp[key] += n
            parts += n
        comp["framing"] += total - parts
        row = by_role.setdefault(m.role, {"messages": 0, "tokens": 0})
        row["messages"] += 1
        row["tokens"] += total
    comp["framing"] += f.reply_priming
    return by_role, {k: comp[k] for k in _COMPONENT_ORDER if comp.get(k)}


def count_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Transcript: JSON list, JSONL, or a request body.", show_default=False)],
    model: ModelOpt = None,
    window: WindowOpt = None,
    format: FormatOpt = "auto",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Token breakdown of a transcript by role and component, for a model."""
    settings = get_settings(ctx)
    loaded = load_transcript(file, format=format)
    model = model or settings.model or DEFAULT_COUNT_MODEL
    ctx_window = settings.window_for(model, window)
    info = lookup_model(model, window=ctx_window)
    counter, framing = token_counting(settings, model, info.provider)
    acc = TokenAccountant(counter, framing=framing)
    by_role, components = _breakdown(loaded.messages, acc)
    if loaded.tools:
        components["tool_schemas"] = acc.count_tools(loaded.tools)
    total = sum(components.values())
    reserved = settings.reserved_output_for(model, info.context_window)
    budget = Budget(
        info.context_window,
        reserved,
        tool_schemas=components.get("tool_schemas", 0),
        thresholds=settings.thresholds(),
    )
    used = total - components.get("tool_schemas", 0)
    limits = settings.component_budgets(budget)
    usage = {
        "system": components.get("system", 0),
        "history": sum(components.get(k, 0) for k in ("text", "tool_calls", "thinking", "images", "framing")),
        "tool_results": components.get("tool_results", 0),
        "tools": components.get("tool_schemas", 0),
    }
    result: dict[str, Any] = {
        "file": str(file),
        "format": loaded.format,
        "model": info.name,
        "tokenizer": counter.name,
        "messages": len(loaded.messages),
        "total_tokens": total,
        "by_role": by_role,
        "by_component": components,
        "budget": {
            "window": budget.window,
            "reserved_output": budget.reserved_output,
            "effective": budget.effective,
            "used": used,
            "ratio": round(used / budget.effective, 4),
            "state": budget.state(used),
        },
        "limits": {k: {"used": v, "hard": limits.hard[k], "soft": limits.soft[k]} for k, v in usage.items()},  # type: ignore[index]
    }
    if json_out:
        print_json(result)
        return
    roles = Table(
        title=f"{plain(file.name)}: {len(loaded.messages)} messages ({loaded.format}), {plain(info.name)} / "
        f"{plain(counter.name)}"
    )
    roles.add_column("role")
    roles.add_column("messages", justify="right")
    roles.add_column("tokens", justify="right")
    roles.add_column("share", justify="right")
    for role, row in sorted(by_role.items(), key=lambda kv: -kv[1]["tokens"]):
        roles.add_row(role, str(row["messages"]), f"{row['tokens']:,}", f"{row['tokens'] / max(total, 1):.1%}")
    out.print(roles)
    comps = Table(title="by component")
    for col in ("component", "tokens", "share"):
        comps.add_column(col, justify="left" if col == "component" else "right")
    for name, n in components.items():
        comps.add_row(name, f"{n:,}", f"{n / max(total, 1):.1%}")
    comps.add_row("[b]total[/b]", f"[b]{total:,}[/b]", "100%")
    out.print(comps)
    b = result["budget"]
    colour = {"normal": "green", "warning": "yellow", "error": "dark_orange", "critical": "red"}.get(b["state"], "red")
    out.print(
        f"window {b['window']:,} − reserved output {b['reserved_output']:,} − tool schemas "
        f"{components.get('tool_schemas', 0):,} = effective {b['effective']:,}; messages use {b['used']:,} "
        f"([{colour}]{b['ratio']:.1%}, {b['state']}[/{colour}])"
    )
    over = [
        f"{k} ({v['used']:,} > {v['hard']:,})"
        for k, v in result["limits"].items()
        if v["hard"] is not None and v["used"] > v["hard"]
    ]
    if over:
        out.print(f"[red]above the \\[budgets] hard limit: {', '.join(over)}[/red]")

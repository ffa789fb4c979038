"""``contextwarden replay FILE --config A.toml --config B.toml``: a recorded transcript under several configurations."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ..messages import Message
from ..replay import ReplayRun, replay_transcript, write_report
from ..session import Session
from ..settings import Settings, load_settings
from ._common import CLIError, atomic_write, build_session, err, get_settings, load_transcript, out, plain
from .sessions import open_cli_store
from .transcript import FormatOpt, ModelOpt, WindowOpt, summarizer_for

__all__ = ["replay_command"]


def _settings_note(settings: Settings, effective: int) -> dict[str, Any]:
    config = settings.compaction_config(effective=effective)
    return {"high_water": config.high_water, "low_water": config.low_water, "layers": ",".join(config.layers)}


def _transcript(ctx: typer.Context, file: Path | None, session_id: str | None, store: str | None, format: str) -> tuple[
    list[Message], list[Any], str
]:  # fmt: skip
    if (file is None) == (session_id is None):
        raise CLIError("give a transcript FILE or --session ID (a stored session), not both.", exit_code=2)
    if file is not None:
        loaded = load_transcript(file, format=format)
        return loaded.messages, list(loaded.tools), file.name
    settings = get_settings(ctx, store={"url": store} if store else None)
    with open_cli_store(settings) as opened:
        messages = opened.load_messages(session_id or "")
    if not messages:
        raise CLIError(f"session {session_id!r} holds no messages.")
    return messages, [], f"session {session_id}"


def replay_command(
    ctx: typer.Context,
    file: Annotated[
        Path | None, typer.Argument(help="Transcript: JSON list, JSONL, or a request body.", show_default=False)
    ] = None,
    configs: Annotated[
        list[Path] | None,
        typer.Option(
            "--config",
            "-c",
            help="A config file (TOML or YAML) to replay under; repeat to compare. Default: the current settings.",
            metavar="PATH",
        ),
    ] = None,
    session_id: Annotated[
        str | None, typer.Option("--session", help="Replay a stored session instead of a file.")
    ] = None,
    store: Annotated[str | None, typer.Option("--store", "-s", help="Session store URL for --session.")] = None,
    model: ModelOpt = None,
    window: WindowOpt = None,
    budget: Annotated[
        int | None, typer.Option("--budget", "-b", min=1, help="Token budget of every view (overrides the window).")
    ] = None,
    format: FormatOpt = "auto",
    html: Annotated[Path | None, typer.Option("--html", help="Write the HTML report here.", metavar="PATH")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the results as JSON.", metavar="OUT")] = None,
) -> None:
    """Replay a transcript under each configuration and print them side by side.

    Per configuration: tokens sent, prompt-cache prefix reuse, peak, compactions by layer, retention
    of the facts the transcript's last turn uses, and time per turn. A turn is one model call: the
    transcript is cut before each assistant message.
    """
    messages, tools, source = _transcript(ctx, file, session_id, store, format)
    named: list[tuple[str, Settings]] = []
    if configs:
        for path in configs:
            if not path.is_file():
                raise CLIError(f"--config {path}: no such file.", exit_code=2)
            named.append((path.stem, load_settings(path)))
    else:
        named.append(("current settings", get_settings(ctx)))
    if len({name for name, _ in named}) < len(named):  # same stem in two folders
        named = [(f"{name} ({i + 1})", s) for i, (name, s) in enumerate(named)]
    runs: list[ReplayRun] = []
    for name, settings in named:
        summarizer, _ = summarizer_for(settings)

        def make(settings: Settings = settings, summarizer: Any = summarizer) -> Session:
            return build_session(
                settings, model=model, window=window, budget=budget, tools=tools, summarizer=summarizer
            )

        probe = make()
        note = _settings_note(settings, probe.budget.effective)
        with err.status(f"replaying under {plain(name)}…"):
            runs.append(replay_transcript(messages, make, name=name, settings=note))
    table = Table(title=f"{plain(source)}: {len(messages)} messages, {len(runs[0].turns)} turns")
    for col in (
        "configuration",
        "tokens sent",
        "prefix reuse",
        "peak",
        "compactions",
        "last-turn facts kept",
        "p50 ms/turn",
        "p95 ms/turn",
    ):
        table.add_column(col, justify="left" if col in ("configuration", "compactions") else "right")
    for r in runs:
        retention = "-" if r.retention is None else f"{r.retention:.0%} ({len(r.facts_kept)}/{len(r.facts)})"
        table.add_row(
            plain(r.name),
            f"{r.tokens_sent:,}",
            f"{r.prefix_reuse:.3f}",
            f"{r.peak:,} ({r.peak_utilization:.0%})",
            ", ".join(f"{k} {v}" for k, v in r.compactions.items()) or "none",
            retention,
            f"{r.time_per_turn_ms(0.5):.2f}",
            f"{r.time_per_turn_ms(0.95):.2f}",
        )
    out.print(table)
    if html is not None:
        write_report(runs, html, title=f"contextwarden replay: {source}")
        err.print(f"report: {plain(str(html))}")
    if json_out is not None:
        import json

        atomic_write(json_out, json.dumps({"source": source, "runs": [r.to_dict() for r in runs]}, indent=2) + "\n")

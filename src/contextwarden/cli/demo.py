"""``contextwarden demo``: run a long generated coding-agent session with a live view and a report."""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ..demo import DemoResult, generate_session, run_demo, write_report
from ..demo.run import CompactionRecord, TurnClock, TurnStats
from ..exceptions import SessionNotFound
from ..settings import user_dir
from ..stores import SessionStore
from ._common import build_session, command_prefix, err, get_settings, out, print_json
from .sessions import DEMO_SLOT, open_cli_store
from .transcript import summarizer_for

__all__ = ["demo_command"]

STATE_STYLE = {
    "normal": "green",
    "warning": "yellow",
    "error": "dark_orange",
    "critical": "red",
    "overflow": "bold red",
}
LAYER_STYLE = {"clear": "cyan", "evict": "dark_orange", "summarize": "magenta", "shrink": "red"}


class _LiveView:
    """What the terminal shows while the session replays."""

    def __init__(self, *, turns: int, result: DemoResult, rule: str = "band") -> None:
        self.result = result
        self.rule = rule
        """The state rule's mode, shown next to the state."""
        self.turns = turns
        self.events: deque[CompactionRecord] = deque(maxlen=8)
        self.last: TurnStats | None = None
        self.layer: str | None = None
        self.progress = Progress(
            TextColumn("turns"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), expand=False
        )
        self.task = self.progress.add_task("replay", total=turns)

    def update(self, stats: TurnStats, new: list[CompactionRecord]) -> None:
        self.last = stats
        self.events.extend(new)
        if new:
            self.layer = new[-1].layer
        self.progress.update(self.task, completed=stats.turn)

    def gauge(self, stats: TurnStats, width: int = 48) -> Text:
        ratio = min(stats.ratio, 1.0)
        filled = round(ratio * width)
        style = STATE_STYLE.get(stats.state, "white")
        bar = Text("▕")
        bar.append("█" * filled, style=style)
        bar.append("░" * (width - filled), style="grey35")
        bar.append("▏ ")
        bar.append(f"{stats.used:,} / {stats.budget:,} tokens ({stats.ratio:.0%}) ", style="bold")
        bar.append(stats.state, style=style)
        bar.append(f" ({self.rule} rule)", style="dim")
        return bar

    def __rich__(self) -> RenderableType:
        r = self.result
        head = Text.assemble(
            ("contextwarden demo", "bold"),
            f" · seed {r.seed} · {r.model} · window {r.window:,} → effective budget {r.budget:,}",
        )
        parts: list[RenderableType] = [head]
        s = self.last
        if s is not None:
            parts.append(self.gauge(s))
            layers = r.compactions_by_layer
            layer_text = Text("current layer: ")
            layer = s.layer or "—  (appending: the cached prefix is unchanged)"
            layer_text.append(layer, style=LAYER_STYLE.get(s.layer or "", "dim"))
            parts.append(layer_text)
            reused = sum(t.reused for t in r.turns)
            sent = sum(t.sent for t in r.turns)
            parts.append(
                Text(
                    f"turn {s.turn}/{self.turns} · transcript {s.transcript_tokens:,} tokens · view {s.view_messages} "
                    f"messages · compactions {sum(layers.values())} "
                    f"({', '.join(f'{k} {v}' for k, v in sorted(layers.items())) or 'none yet'}) · prefix reuse "
                    f"{reused / sent if sent else 0:.1%} · facts in view {s.facts_in_view}/{s.facts_planted}"
                )
            )
        events = Table.grid(padding=(0, 2))
        for col in ("turn", "layer", "tokens", "items"):
            events.add_column(col)
        for e in self.events:
            events.add_row(
                f"turn {e.turn}",
                Text(e.layer, style=LAYER_STYLE.get(e.layer, "white")),
                f"{e.before:,} → {e.after:,} (−{e.before - e.after:,})",
                f"{e.items} item(s), {e.duration_ms:.1f} ms",
            )
        parts.append(Text("compaction events", style="bold") if self.events else Text("no compaction yet", style="dim"))
        parts.append(events)
        parts.append(self.progress)
        return Group(*parts)


def _final_table(r: DemoResult, report: Path) -> Table:
    table = Table(title="contextwarden demo: results", show_header=False, title_justify="left")
    table.add_column("metric", style="bold")
    table.add_column("value")
    full = r.tokens_full_history
    saved = 1 - r.tokens_sent / full if full else 0.0
    rows = [
        ("turns", f"{len(r.turns):,} ({r.messages:,} messages)"),
        ("tokens seen", f"{r.tokens_seen:,} (the whole transcript)"),
        (
            "tokens sent",
            f"{r.tokens_sent:,} over {len(r.turns)} requests (resending everything: {full:,}; −{saved:.0%})",
        ),
        ("largest request", f"{r.peak:,} of {r.budget:,} tokens (window {r.window:,})"),
        (
            "compactions",
            f"{len(r.compactions)} layer runs on {r.compaction_turns} turns: "
            + (
                ", ".join(
                    f"{k} {v} (−{r.saved_by_layer.get(k, 0):,} tokens)"
                    for k, v in sorted(r.compactions_by_layer.items())
                )
                or "none"
            ),
        ),
        ("prefix reuse", f"{r.prefix_reuse:.1%} of the tokens sent (common prefix with the previous request)"),
        (
            "probe retention",
            f"{len(r.found)}/{len(r.facts)} planted facts in the final view"
            + (
                f" (lost: {', '.join(f.kind for f in r.facts if f.value not in r.found)})"
                if len(r.found) < len(r.facts)
                else ""
            ),
        ),
        ("memory", r.memory or "off (--no-memory)"),
        ("snapshots", f"{r.snapshots:,} full originals kept in the store"),
        ("summarizer", r.summarizer),
        ("time", f"{r.compute_s:.2f} s of compute, {r.wall_s:.2f} s wall"),
        (
            "session",
            f"{r.session_id} in {r.store_url}  "
            + (
                "(the memory store ends with this command: pass --store to keep the session)"
                if r.store_url.startswith("memory:")
                else f"({command_prefix()} inspect {r.session_id} --store {r.store_url})"
            ),
        ),
        ("report", str(report)),
    ]
    for k, v in rows:
        table.add_row(k, Text(v))  # paths and URLs as they are (a "[" in them is not markup)
    return table


def _free_id(store: SessionStore, base: str) -> str:
    """``base``, or ``base-2``, ``base-3``… : the first id the store does not have (a rerun never replaces a run)."""
    candidate, n = base, 1
    while True:
        try:
            store.get_session(candidate)
        except SessionNotFound:
            return candidate
        n += 1
        candidate = f"{base}-{n}"


def demo_command(
    ctx: typer.Context,
    turns: Annotated[int, typer.Option(min=30, max=5000, help="Turns (model calls) in the session.")] = 300,
    seed: Annotated[int, typer.Option(help="Seed of the generated session (same seed, same session).")] = 7,
    window: Annotated[int, typer.Option(min=4000, help="Context window in tokens.")] = 32_000,
    model: Annotated[str, typer.Option(help="Model (tokenizer and output reserve).")] = "gpt-4o",
    report: Annotated[
        Path | None, typer.Option(help="Where to write the HTML report (default: <user dir>/demo-report.html).")
    ] = None,
    no_live: Annotated[bool, typer.Option("--no-live", help="No live view; print progress lines instead.")] = False,
    delay: Annotated[
        float | None,
        typer.Option(
            min=0.0, help="Pause per turn in seconds so the live view can be followed (default 0.04 live, else 0)."
        ),
    ] = None,
    store: Annotated[
        str | None, typer.Option(help="Session store URL (default: \\[store] url, else SQLite in the user dir).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as JSON instead of the table.")] = False,
    memory: Annotated[
        bool,
        typer.Option(
            "--memory/--no-memory",
            help="Long-term memory: what compaction removes is remembered and the request recalls it into the view.",
        ),
    ] = True,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="Replace the session demo-<seed> if it exists (default: keep it and use the next free id).",
        ),
    ] = False,
) -> None:
    """Replay a long, realistic coding-agent session through the full pipeline (no network, no API key).

    A seeded generator writes the session: file reads, greps, pytest logs with stack traces, shell
    output, edits, some Chinese; facts planted early are asked for at the end. Each turn is added to
    a Session backed by the session store, and the view for the next model call is prepared. Shows
    a live context gauge, the compaction events and a progress bar, then a results table and an
    HTML report with charts.
    """
    started = time.perf_counter()
    settings = get_settings(ctx, store={"url": store} if store else None)
    demo = generate_session(seed=seed, turns=turns)
    summarizer, note = summarizer_for(settings)
    session_id = f"demo-{seed}"
    report_path = report if report is not None else user_dir() / "demo-report.html"
    live = not no_live and not json_out and out.is_terminal
    pause = delay if delay is not None else (0.04 if live else 0.0)
    clock = TurnClock()
    with open_cli_store(settings) as st:
        if replace:
            try:
                st.delete_session(session_id)
            except SessionNotFound:
                pass
            if memory:  # the replaced run's memories go with it
                replaced = settings.memory_options().long_term(store_url=settings.store_url)
                try:
                    replaced.forget_session(session_id)
                finally:
                    replaced.backend.close()
        else:
            session_id = _free_id(st, session_id)
        st.create_session(session_id, model=model, window=window, metadata={"demo": True, "seed": seed, "turns": turns})
        session = build_session(
            settings,
            session_id=session_id,
            model=model,
            window=window,
            tools=demo.tools,
            summarizer=summarizer,
            store=st,
            # a rerun, under a new id, recalls its own run only: same seed, same session
            memory=settings.session_memory(across_sessions=False, clock=clock) if memory else None,
        )
        rule = session.status().rule
        mode = rule.mode if rule is not None else "band"
        result = DemoResult(
            seed=seed,
            model=model,
            window=window,
            reserved_output=session.budget.reserved_output,
            tool_schemas=session.budget.tool_schemas,
            budget=session.status().budget,
            # the marks the state uses: the fixed thresholds in the ratio mode, the band's otherwise
            thresholds={k: v for k, v in dataclasses.asdict(session.budget.thresholds).items() if k != "overflow"}
            if session.config.pressure_states == "ratio"
            else {},
            rule=rule.text if rule is not None else "",
            high_water=session.config.high_water,
            low_water=session.config.low_water,
            session_id=session_id,
            store_url=settings.store_url,
            summarizer=note,
        )
        if live:
            view = _LiveView(turns=len(demo.turns), result=result, rule=mode)
            with Live(view, console=out, refresh_per_second=12, transient=False):
                run_demo(demo, session, result=result, on_turn=view.update, delay=pause, clock=clock)
        else:
            every = max(1, len(demo.turns) // 6)

            def progress_line(stats: TurnStats, new: list[CompactionRecord]) -> None:
                if not json_out and (stats.turn % every == 0 or stats.turn == len(demo.turns)):
                    layers = result.compactions_by_layer
                    err.print(
                        f"turn {stats.turn}/{len(demo.turns)}: view {stats.used:,}/{stats.budget:,} tokens "
                        f"({stats.ratio:.0%}, {stats.state}, {mode} rule); compactions "
                        f"{', '.join(f'{k} {v}' for k, v in sorted(layers.items())) or 'none yet'}"
                    )

            run_demo(demo, session, result=result, on_turn=progress_line, delay=pause, clock=clock)
        session.save_status()  # the figures and timeline of the last turn, for inspect and the dashboard
        _, version = st.load_state(session_id, slot=DEMO_SLOT)
        st.save_state(
            session_id,
            {k: v for k, v in result.to_dict().items() if k not in ("facts", "alerts")},
            expected_version=version,
            slot=DEMO_SLOT,
        )
    path = write_report(result, report_path)
    result.wall_s = time.perf_counter() - started
    if json_out:
        print_json({**result.to_dict(), "report": str(path)})
        return
    out.print(_final_table(result, path))
    out.print(f"open the report: file://{path.resolve()}", soft_wrap=True)

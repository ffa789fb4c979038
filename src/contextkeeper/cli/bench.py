"""``contextkeeper bench ...``: the benchmark commands (they print a table and write JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..benchmarks.probes import run_probes

bench_app = typer.Typer(help="Run the benchmarks (tables on stdout, JSON with --json).", no_args_is_help=True)
console = Console()


def _budgets(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r}: give token budgets as a comma list, e.g. 2000,3000,4000") from None
    if not values or min(values) <= 0:
        raise typer.BadParameter(f"{text!r}: budgets must be positive integers")
    return values


@bench_app.command("probes")
def probes(
    data: Annotated[Path, typer.Option(help="Probe traces (JSONL): {id, messages, probes} per line.")],
    budgets: Annotated[str, typer.Option(help="Comma list of token budgets.")] = "2000,3000,4000",
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the results here.")] = None,
) -> None:
    """Retention of probe facts in the view after compaction, per budget."""
    if not data.is_file():
        raise typer.BadParameter(f"{data}: no such file", param_hint="--data")
    result = run_probes(data, _budgets(budgets))
    table = Table(title=f"probes: {data.name}")
    for col in ("budget", "retention", "found/total", "all fit", "pairs ok", "seconds"):
        table.add_column(col)
    for budget, row in result["budgets"].items():
        table.add_row(
            budget,
            f"{row['retention']:.3f}",
            f"{row['found']}/{row['total']}",
            str(row["all_fit"]),
            str(row["all_pairs_ok"]),
            f"{row['seconds']:.2f}",
        )
    console.print(table)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=2))

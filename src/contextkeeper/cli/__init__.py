"""The ``contextkeeper`` command line (typer + rich): a thin layer over the library."""

from __future__ import annotations

import typer

from .bench import bench_app

__all__ = ["app", "main"]

app = typer.Typer(
    name="contextkeeper",
    help="Keep long-running LLM agents inside their context window without forgetting.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(bench_app, name="bench")


def main() -> None:
    """Entry point of the ``contextkeeper`` script."""
    app()

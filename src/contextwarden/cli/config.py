"""``contextwarden config show|validate``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ..exceptions import ContextWardenError
from ..figures import state_rule
from ..settings import (
    ConfigProblem,
    config_file_of,
    find_config_file,
    iter_env_keys,
    load_settings,
    user_dir,
    validate_config_file,
)
from ._common import CLIError, get_settings, out, plain, print_json, state
from .sessions import open_cli_store

__all__ = ["config_app"]

config_app = typer.Typer(help="Show the effective configuration or validate a config file.", no_args_is_help=True)


@config_app.command("show")
def show_command(
    ctx: typer.Context,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Resolve window and budget for this model.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The effective settings (defaults < file < CONTEXTWARDEN_* variables), and what they build."""
    settings = get_settings(ctx)
    model = model or settings.model
    derived: dict[str, Any] = {
        "thresholds": dataclasses.asdict(settings.thresholds()),
        "compaction": settings.compaction_config().to_dict(),
        "store_url": settings.store_url,
    }
    if model is not None:
        window = settings.window_for(model)
        from ..models import lookup_model

        info = lookup_model(model, window=window)
        reserved = settings.reserved_output_for(model, info.context_window)
        effective = info.context_window - reserved
        derived["model"] = {
            "name": info.name,
            "window": info.context_window,
            "reserved_output": reserved,
            "effective": effective,
        }
        derived["compaction"] = settings.compaction_config(effective=effective).to_dict()
    compaction = settings.compaction_config()
    derived["state_rule"] = state_rule(
        compaction.pressure_states,
        settings.thresholds(),
        high_water=compaction.high_water,
        low_water=compaction.low_water,
    ).to_dict()
    env_keys = list(iter_env_keys())
    result: dict[str, Any] = {
        "config_file": str(config_file_of(settings)) if config_file_of(settings) else None,
        "user_dir": str(user_dir()),
        "environment": env_keys,
        "settings": settings.model_dump(mode="json"),
        "derived": derived,
    }
    if json_out:
        print_json(result)
        return
    out.print(f"config file: {plain(result['config_file'] or '(none)')}")
    out.print(f"user dir:    {plain(result['user_dir'])}")
    out.print(f"environment: {plain(', '.join(env_keys) or '(no CONTEXTWARDEN_* variables)')}")
    out.print(f"store:       {plain(settings.store_url)}")
    out.print(f"summarizer:  {plain(settings.summarizer.model)}")
    if "model" in derived:
        m = derived["model"]
        out.print(
            f"model:       {m['name']}: window {m['window']:,} − reserved {m['reserved_output']:,} "
            f"= effective {m['effective']:,}"
        )
    rule = derived["state_rule"]
    out.print(f"state rule:  {plain(rule['text'])}")
    if rule["mode"] != "ratio":
        t = derived["thresholds"]
        out.print(
            f"             (the fixed thresholds warning {t['warning']} · error {t['error']} · critical "
            f"{t['critical']} apply only with compaction.pressure_states = 'ratio')"
        )
    table = Table(title="compaction (effective)")
    table.add_column("option")
    table.add_column("value")
    table.add_column("set by")
    explicit = settings.compaction_options()
    for key, value in derived["compaction"].items():
        table.add_row(key, plain(str(value)), "config" if key in explicit else "default")
    out.print(table)
    if settings.models:
        overrides = Table(title="\\[models] overrides")
        for col in ("model", "context_length", "max_output"):
            overrides.add_column(col)
        for name, o in settings.models.items():
            overrides.add_row(plain(name), str(o.context_length or "-"), str(o.max_output or "-"))
        out.print(overrides)


@config_app.command("validate")
def validate_command(
    ctx: typer.Context,
    file: Annotated[
        Path | None, typer.Argument(help="Config file (default: the one in force, see `config show`).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    connect: Annotated[
        bool, typer.Option("--connect", help="Also open the session store and list one session (a network call).")
    ] = False,
) -> None:
    """Check a config file and the CONTEXTWARDEN_* variables; list every invalid key with its line.

    Store URLs are checked without connecting (scheme, host, port, options, a writable SQLite
    directory); --connect also opens the store.
    """
    if file is not None and not file.is_file():
        raise CLIError(f"{file}: no such file; check the path.", exit_code=2)
    path = file if file is not None else find_config_file(state(ctx).config)
    problems = validate_config_file(path)
    if connect and not problems:
        problems = _connect_problems(path)
    if json_out:
        print_json(
            {"file": str(path) if path else None, "ok": not problems, "problems": [p.to_dict() for p in problems]}
        )
    else:
        for p in problems:
            typer.echo(p.render())
        where = str(path) if path else "no config file"
        if problems:
            typer.echo(f"{len(problems)} problem(s) in {where} and the environment", err=True)
        else:
            typer.echo(f"ok: {where} and the CONTEXTWARDEN_* variables are valid")
    if problems:
        raise typer.Exit(1)


def _connect_problems(path: Path | None) -> list[ConfigProblem]:
    """Open the store the configuration names and list one session; the failure as a problem."""
    settings = load_settings(path)
    try:
        with open_cli_store(settings) as store:
            store.list_sessions(limit=1)
    except (ContextWardenError, CLIError, OSError, ImportError) as exc:
        return [
            ConfigProblem(
                source=str(path) if path else "environment",
                line=None,
                key="store.url",
                message=f"cannot use the store {settings.store_url!r}: {exc}",
                allowed="a store that is reachable with the given URL",
            )
        ]
    return []

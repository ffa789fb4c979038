"""``contextwarden doctor``: check what ``serve`` will need (config, upstream, window, store) before it runs.

Each check prints one line, and a ``fix:`` line under each problem. ``--json`` prints the same as
one object. The exit code is 1 when any check failed (warnings alone exit 0).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import httpx
import typer

from ..exceptions import ContextWardenError, UnknownModelError
from ..llm.served_window import ServedWindow, probe
from ..models import lookup_model
from ..settings import Settings
from ..stores import open_store
from ._common import print_json, quiet_pool_log, settings_from_flags, state

__all__ = ["Check", "doctor_command", "run_checks"]

Outcome = Literal["ok", "warn", "fail"]


@dataclass(frozen=True, kw_only=True)
class Check:
    """One check's result: what was checked, what was found, and the fix when it is a problem."""

    name: str
    outcome: Outcome
    detail: str
    fix: str | None = None


def _upstream(settings: Settings, timeout: float) -> Check:
    url = settings.service.upstream_url.rstrip("/")
    key_env = settings.service.upstream_api_key_env
    key = os.environ.get(key_env) if key_env else None
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.get(f"{url}/models", headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        return Check(
            name="upstream",
            outcome="fail",
            detail=f"{url}/models cannot be reached ({type(exc).__name__}: {exc})",
            fix=f"start the model server at {url}, or point the proxy at it: `serve --upstream URL` "
            "or `[service] upstream_url` (an API root ending in /v1)",
        )
    if response.status_code in (401, 403):
        return Check(
            name="upstream",
            outcome="warn" if not key else "fail",
            detail=f"{url}/models answered {response.status_code}: it wants a key",
            fix=f"export {key_env or 'OPENAI_API_KEY'}=<key> for the proxy, or let clients send their own "
            "(forwarded when the service has no API keys of its own)",
        )
    if response.status_code >= 400:
        return Check(
            name="upstream",
            outcome="warn",
            detail=f"{url}/models answered {response.status_code} (a server may list no models and still answer)",
            fix="check that upstream_url is the API root (it usually ends in /v1)",
        )
    return Check(name="upstream", outcome="ok", detail=f"{url} answered GET /models ({response.status_code})")


def _window(settings: Settings, model: str | None, timeout: float) -> tuple[Check, ServedWindow | None]:
    url = settings.service.upstream_url
    configured = settings.window_for(model)
    try:
        served = probe(url, model=model, timeout=timeout, overflow_probe=False)
    except ContextWardenError as exc:
        return Check(name="window", outcome="warn", detail=f"the upstream was not asked for its window: {exc}"), None
    if served.window is not None and configured is not None and configured > served.window:
        return (
            Check(
                name="window",
                outcome="fail",
                detail=f"configured window {configured:,} tokens, but {served.server} serves {served.window:,} "
                f"for {served.model or 'its model'} ({served.source})",
                fix=f"set `[agent_context] max_context_tokens = {served.window}` (or remove the setting and let "
                "the proxy use the served window), or start the server with a larger context",
            ),
            served,
        )
    if served.window is not None:
        detail = f"{served.server} serves {served.window:,} tokens for {served.model or 'its model'} ({served.source})"
        if configured is not None:
            detail += f"; configured {configured:,}"
        return Check(name="window", outcome="ok", detail=detail), served
    if configured is not None:
        return Check(name="window", outcome="ok", detail=f"configured {configured:,} tokens ({served.server})"), served
    name = model or served.model
    if name is not None:
        try:
            info = lookup_model(name)
        except UnknownModelError:
            pass
        else:
            detail = f"{name}: {info.context_window:,} tokens (model registry)"
            return Check(name="window", outcome="ok", detail=detail), served
    return (
        Check(
            name="window",
            outcome="warn",
            detail=f"{served.server} does not say its window; model {name or '(none named)'} is not in the registry",
            fix=f'set `[models."{name or "MODEL"}"] context_length = N` or `[agent_context] max_context_tokens = N`',
        ),
        served,
    )


def store_check(settings: Settings) -> Check:
    """Open the configured store and list its sessions (what ``serve`` needs of it)."""
    url = settings.store_url
    shown = url.split("://", 1)[0]
    try:
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///").split("?", 1)[0]).expanduser().parent.mkdir(parents=True, exist_ok=True)
        with quiet_pool_log():
            store = open_store(url)
            try:
                store.list_sessions()
            finally:
                store.close()
    except Exception as exc:  # any driver's failure is the answer to this check
        return Check(
            name="store",
            outcome="fail",
            detail=f"the {shown} store cannot be used: {type(exc).__name__}: {exc}",
            fix="start the server it names, or choose another: `serve --store URL` or `[store] url` "
            "(sqlite:///path.db needs no server)",
        )
    return Check(name="store", outcome="ok", detail=f"{shown} store opened and listed its sessions")


def run_checks(settings: Settings, *, model: str | None = None, timeout: float = 5.0) -> list[Check]:
    """Check the upstream, the window it serves against the configured one, and the store."""
    checks = [_upstream(settings, timeout)]
    if checks[0].outcome != "fail":
        checks.append(_window(settings, model or settings.model, timeout)[0])
    checks.append(store_check(settings))
    return checks


def doctor_command(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Config file (TOML or YAML); default: see `config show`.", metavar="PATH"),
    ] = None,
    upstream: Annotated[
        str | None, typer.Option(help="Upstream API root (default: `\\[service] upstream_url`).")
    ] = None,
    store: Annotated[str | None, typer.Option(help="Session store URL (default: `\\[store] url`).")] = None,
    model: Annotated[str | None, typer.Option(help="Model to ask the upstream about (default: its first).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
) -> None:
    """Check the upstream, its window and the session store; print a `fix:` line per problem."""
    if config is not None:
        state(ctx).config = config
    flags: dict[str, object] = {}
    if upstream is not None:
        flags["service"] = {"upstream_url": upstream}
    if store is not None:
        flags["store"] = {"url": store}
    try:
        settings = settings_from_flags(state(ctx).config, **flags)
        settings.check()
    except ContextWardenError as exc:
        checks = [Check(name="config", outcome="fail", detail=str(exc), fix="correct the setting it names")]
    else:
        checks = [Check(name="config", outcome="ok", detail="settings load"), *run_checks(settings, model=model)]
    failed = any(c.outcome == "fail" for c in checks)
    if as_json:
        print_json({"ok": not failed, "checks": [dataclasses.asdict(c) for c in checks]})
    else:
        for check in checks:
            typer.echo(f"{check.outcome:<4}  {check.name:<8}  {check.detail}")
            if check.fix is not None:
                typer.echo(f"      fix: {check.fix}")
    if failed:
        raise typer.Exit(1)

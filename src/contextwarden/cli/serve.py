"""``contextwarden serve``: run the OpenAI-compatible proxy service with uvicorn."""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Annotated

import typer

from ..exceptions import ContextWardenError
from ..llm.served_window import probe
from ..settings import Settings
from ._common import CLIError, get_settings, state
from .doctor import store_check

__all__ = ["serve_command"]

_DEFAULT = Settings()
"""The settings' built-in values, the defaults the help shows (a config file or the environment may change them)."""


def serve_command(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Config file (TOML or YAML); default: see `config show`.", metavar="PATH"),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option(help=f"Interface to listen on (default: {_DEFAULT.service.host}, or `\\[service] host`)."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(help=f"Port; 0 picks a free one (default: {_DEFAULT.service.port}, or `\\[service] port`)."),
    ] = None,
    upstream: Annotated[
        str | None,
        typer.Option(
            help="OpenAI-compatible API root to forward to "
            f"(default: {_DEFAULT.service.upstream_url}, or `\\[service] upstream_url`)."
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(help="Session store URL (default: `\\[store] url`, else a SQLite file in the user directory)."),
    ] = None,
    hash_key: Annotated[
        str | None, typer.Option("--hash-key", help="Print the SHA-256 of an API key for `\\[service] api_keys`, exit.")
    ] = None,
    log_level: Annotated[str, typer.Option(help="Log level: debug, info, warning, error.")] = "info",
    shadow: Annotated[
        bool,
        typer.Option(
            "--shadow",
            help="Forward every request unchanged; record the sessions and the views the proxy would send.",
        ),
    ] = False,
    check_store: Annotated[
        bool,
        typer.Option(
            "--store-check/--no-store-check",
            help="Open the store and list its sessions before starting; refuse to start when that fails "
            "(default: on, or `\\[store] check_on_start`).",
            show_default=False,
        ),
    ] = True,
    detect_window: Annotated[
        bool,
        typer.Option(
            "--detect-window/--no-detect-window",
            help="Ask the upstream for the window it serves (llama.cpp /props, vLLM /v1/models, Ollama /api/show) "
            "when none is configured.",
        ),
    ] = True,
) -> None:
    """Run the OpenAI-compatible proxy: sessions API, SSE events, /metrics and the dashboard at /."""
    try:
        import uvicorn

        from ..service import create_app
        from ..service.auth import hash_key as digest
        from ..service.upstream import redact_url
    except ImportError as exc:
        raise CLIError(
            f"`contextwarden serve` needs the service extra ({exc.name} is missing); install it with "
            "`pip install 'contextwarden[service]'`."
        ) from None
    if hash_key is not None:
        typer.echo(digest(hash_key))
        return
    if config is not None:
        state(ctx).config = config
    flags: dict[str, object] = {}
    service: dict[str, object] = {}
    if host is not None:
        service["host"] = host
    if port is not None:
        service["port"] = port
    if upstream is not None:
        service["upstream_url"] = upstream
    if shadow:
        service["shadow"] = True
    if service:
        flags["service"] = service
    stored: dict[str, object] = {}
    if store is not None:
        stored["url"] = store
    if not check_store:
        stored["check_on_start"] = False
    if stored:
        flags["store"] = stored
    settings = get_settings(ctx, **flags)
    level = log_level.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise CLIError(f"--log-level {log_level!r}: use debug, info, warning or error.", exit_code=2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if detect_window and settings.window_for(settings.model) is None:
        detected = served_window_flags(settings)
        if detected:
            flags = {**flags, **detected}
            settings = get_settings(ctx, **flags)
    if settings.store.check_on_start:
        _refuse_unusable_store(settings)
    app = create_app(settings)
    listener = _listen(settings.service.host, settings.service.port)
    base = _url(settings.service.host, listener.getsockname()[1])
    upstream_shown = redact_url(settings.service.upstream_url)
    typer.echo(f"contextwarden: dashboard {base}/  ·  clients use {base}/v1  ·  upstream {upstream_shown}")
    if not settings.service.api_keys and not _loopback(settings.service.host):
        typer.echo(
            f"contextwarden: warning: {settings.service.host} is not a loopback address and no `[service] api_keys` "
            "are set: anyone who reaches this port can send completions on the upstream key and read every "
            "session (see the reliability guide)",
            err=True,
        )
    if settings.service.shadow:
        typer.echo(
            "contextwarden: shadow mode: requests go upstream unchanged; the dashboard shows the views it would send"
        )
    server = uvicorn.Config(app, log_level=log_level.lower(), access_log=False, timeout_graceful_shutdown=5)
    uvicorn.Server(server).run(sockets=[listener])


def served_window_flags(settings: Settings) -> dict[str, object]:
    """Settings flags for the window the upstream says it serves (none when it does not say).

    A single-model server (llama.cpp, llama-cpp-python) serves its window whatever model a client
    names, so it becomes the window of every session; a server of several models (vLLM, Ollama)
    gives the window of the model it was asked about.
    """
    try:
        served = probe(settings.service.upstream_url, model=settings.model, timeout=5.0, overflow_probe=False)
    except ContextWardenError as exc:
        typer.echo(f"contextwarden: the upstream's window is unknown ({exc}); the model registry applies")
        return {}
    if served.window is None:
        return {}
    typer.echo(f"contextwarden: window {served.window:,} tokens, as {served.server} serves it ({served.source})")
    if served.server in ("llama.cpp", "llama-cpp-python") or served.model is None:
        return {"agent_context": {"max_context_tokens": served.window}}
    models = {name: override.model_dump(exclude_none=True) for name, override in settings.models.items()}
    models[served.model] = {**models.get(served.model, {}), "context_length": served.window}
    return {"models": models}


def _refuse_unusable_store(settings: Settings) -> None:
    """Refuse to start on a store that cannot be used: requests would all fail, and only ``/readyz`` would say so."""
    check = store_check(settings)
    if check.outcome == "fail":
        raise CLIError(
            f"{check.detail.rstrip('.')}; fix: {check.fix}; to start anyway (the store may come up later), pass "
            "`--no-store-check` or set `[store] check_on_start = false`."
        )


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound now so that the printed URL has the real port (also for port 0)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        raise CLIError(
            f"cannot listen on {host}:{port} ({exc.strerror}); choose another interface with `--host` or port "
            "with `--port` (or `[service] host` and `port` in the config file)."
        ) from None
    listener.listen(2048)
    listener.set_inheritable(True)
    return listener


def _url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host == "::" else host
    return f"http://[{shown}]:{port}" if ":" in shown and not shown.startswith("[") else f"http://{shown}:{port}"


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False

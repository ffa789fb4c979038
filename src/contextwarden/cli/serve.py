"""``contextwarden serve``: run the OpenAI-compatible proxy service with uvicorn."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from ._common import CLIError, get_settings, state

__all__ = ["serve_command"]


def serve_command(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Config file (TOML or YAML); default: see `config show`.", metavar="PATH"),
    ] = None,
    host: Annotated[str | None, typer.Option(help="Interface to listen on (default: [service] host).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: [service] port; 0 picks a free one).")] = None,
    upstream: Annotated[
        str | None, typer.Option(help="OpenAI-compatible API root to forward to (default: [service] upstream_url).")
    ] = None,
    store: Annotated[str | None, typer.Option(help="Session store URL (default: [store] url).")] = None,
    hash_key: Annotated[
        str | None, typer.Option("--hash-key", help="Print the SHA-256 of an API key for `[service] api_keys`, exit.")
    ] = None,
    log_level: Annotated[str, typer.Option(help="Log level: debug, info, warning, error.")] = "info",
) -> None:
    """Run the OpenAI-compatible proxy: sessions API, SSE events, /metrics and the dashboard at /."""
    try:
        import uvicorn

        from ..service import create_app
        from ..service.auth import hash_key as digest
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
    if service:
        flags["service"] = service
    if store is not None:
        flags["store"] = {"url": store}
    settings = get_settings(ctx, **flags)
    level = log_level.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise CLIError(f"--log-level {log_level!r}: use debug, info, warning or error.", exit_code=2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.service.host,
        port=settings.service.port,
        log_level=log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=5,
    )

"""``/healthz`` (the process answers), ``/readyz`` (store, events and upstream reachable) and ``/metrics``."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import os

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .auth import presented_key
from .errors import ServiceError
from .metrics import CONTENT_TYPE_LATEST
from .runtime import state_of

__all__ = ["healthz", "metrics", "readyz"]


async def healthz(request: Request) -> Response:
    """The process is up."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Ready when the store and the upstream answer (503 naming what does not)."""
    svc = state_of(request)
    checks: dict[str, str] = {}

    async def store() -> None:
        try:
            await asyncio.wait_for(svc.store.list_sessions(tenant="readyz-probe", limit=1), timeout=3.0)
            checks["store"] = "ok"
        except Exception as exc:
            checks["store"] = type(exc).__name__

    async def events() -> None:
        try:
            await asyncio.wait_for(svc.hub.ping(), timeout=3.0)
            checks["events"] = "ok"
        except Exception as exc:
            checks["events"] = type(exc).__name__

    async def upstream() -> None:
        ok, detail = await svc.upstream.reachable()
        checks["upstream"] = "ok" if ok else detail

    await asyncio.gather(store(), events(), upstream())
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks}, status_code=200 if ready else 503
    )


async def metrics(request: Request) -> Response:
    """Prometheus exposition of the service's metrics: to the holder of the metrics token, or (without
    one configured) to loopback clients only.

    Raises:
        ServiceError: 401 without the configured token, 403 for a remote client when none is configured.
    """
    svc = state_of(request)
    _check_metrics_access(request, svc.settings.service.metrics_token_env)
    svc.metrics.open_sessions.set(len(svc.pool))
    return Response(svc.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def _check_metrics_access(request: Request, token_env: str | None) -> None:
    token = os.environ.get(token_env) if token_env else None
    if token:
        given = presented_key(request) or ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise ServiceError(
                401,
                f"/metrics needs the metrics token (the value of ${token_env}) as `Authorization: Bearer <token>`.",
                code="invalid_metrics_token",
            )
        return
    client = request.client.host if request.client is not None else ""
    if not _loopback(client):
        raise ServiceError(
            403,
            "/metrics answers loopback clients only; set `[service] metrics_token_env` to the name of a variable "
            "holding a token to scrape it from elsewhere.",
            code="metrics_forbidden",
        )


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False

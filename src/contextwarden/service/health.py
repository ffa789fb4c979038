"""``/healthz`` (the process answers), ``/readyz`` (store, events and upstream reachable) and ``/metrics``."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

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
    """Prometheus exposition of the service's metrics."""
    svc = state_of(request)
    svc.metrics.open_sessions.set(len(svc.pool))
    return Response(svc.metrics.render(), media_type=CONTENT_TYPE_LATEST)

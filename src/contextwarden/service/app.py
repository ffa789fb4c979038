"""`create_app(settings)`: the Starlette app of the service, and its lifespan.

The lifespan opens the async store named by ``[store] url`` (SQLite in the user directory by
default), the event hub (Redis pub/sub when the store is Redis, else in process) and the
upstream client, and closes them on shutdown.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..exceptions import StoreUnavailable
from ..settings import Settings, load_settings
from ..stores import AsyncSessionStore, open_async_store
from ..stores.sqlite import sqlite_path_from_url
from ..tokens import counter_for_model, get_counter
from . import api, health
from .auth import Tenants
from .bounds import ReplyLimits
from .dashboard import STATIC_DIR, index
from .dialects import DIALECTS, Dialect
from .errors import ServiceError, error_response
from .events import open_hub
from .guard import BrowserGuard, GuardPolicy
from .headers import SecurityHeaders
from .identity import PATH_SESSION, split_session_path
from .limits import Concurrency
from .metrics import ServiceMetrics
from .passthrough import count_tokens, pass_through
from .proxy import proxy
from .redact import Redactor, install, uninstall
from .runtime import ServiceState
from .sessions import SessionPool
from .upstream import Upstream

__all__ = ["create_app"]

logger = logging.getLogger("contextwarden.service")


class _Observe:
    """Counts requests by route and status and times them (a stream until its end); plain ASGI, so
    streams and client disconnects pass through untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            svc: ServiceState | None = getattr(scope["app"].state, "service", None)
            if svc is not None:
                svc.metrics.answered(_route_name(scope["path"]), status, time.perf_counter() - started)


_DIALECTS: dict[str, Dialect] = {dialect.route: dialect for dialect in DIALECTS}
_COUNT_TOKENS = "/v1/messages/count_tokens"


class _ProxyRoute:
    """Serves the proxy routes past the router and the exception middleware: two exception wrappers
    and a route match cost every request tens of microseconds (and wrap every streamed chunk), and
    `proxy` answers its own errors. A session in the path (``/s/{id}/v1/...``) is taken off here;
    any other ``/v1/`` route than the service's own goes to the upstream as it is."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        named = split_session_path(path)
        if named is not None:
            scope = {**scope, "path": named[1], PATH_SESSION: named[0]}
            path = named[1]
        dialect = _DIALECTS.get(path)
        if dialect is not None and scope["method"] == "POST":
            await self._answer(scope, receive, send, dialect)
        elif path == _COUNT_TOKENS and scope["method"] == "POST":
            await (await count_tokens(Request(scope, receive, send)))(scope, receive, send)
        elif path.startswith("/v1/") and not path.startswith("/v1/sessions") and dialect is None:
            await self._pass(scope, receive, send, path)
        else:
            await self.app(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send, dialect: Dialect) -> None:
        request = Request(scope, receive, send)
        response: Response
        try:
            response = await proxy(request, dialect)
        except StoreUnavailable as exc:
            response = dialect.error_response(
                503, f"The session store cannot be reached: {exc}", code="store_unavailable"
            )
        await response(scope, receive, send)

    async def _pass(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        request = Request(scope, receive, send)
        response: Response
        try:
            response = await pass_through(request, path.removeprefix("/v1/"))
        except ServiceError as exc:
            response = exc.response()
        await response(scope, receive, send)


def _error_shape(path: str, status: int, message: str, code: str) -> Response:
    """An error of the service's own (the browser guard's) in the shape of the route at ``path``."""
    named = split_session_path(path)
    dialect = _DIALECTS.get(named[1] if named is not None else path)
    if dialect is not None:
        return dialect.error_response(status, message, code=code)
    return error_response(status, message, code=code)


def _route_name(path: str) -> str:
    named = split_session_path(path)
    if named is not None:
        path = named[1]
    dialect = _DIALECTS.get(path)
    if dialect is not None:
        return dialect.name
    if path.startswith("/v1/sessions"):
        return "events" if path.endswith("/events") else "sessions"
    if path in ("/metrics", "/healthz", "/readyz"):
        return path[1:]
    if path.startswith("/v1/"):
        return "pass_through"
    return "dashboard"


async def _service_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    return exc.response()


async def _not_found(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    if status == 405:
        return error_response(405, f"{request.method} is not allowed on {request.url.path}.", code="method_not_allowed")
    return error_response(404, f"No route {request.url.path}.", code="not_found")


async def _internal(request: Request, exc: Exception) -> Response:
    logger.exception("unexpected error answering %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "The service failed unexpectedly; its log has the details.", code="internal_error")


async def _store_down(request: Request, exc: Exception) -> Response:
    return error_response(503, f"The session store cannot be reached: {exc}", code="store_unavailable")


def _service_loggers() -> list[str]:
    """The package's loggers (made at import): each gets the redacting filter, since a logger's
    filters do not see the records of its children."""
    names = [n for n in logging.Logger.manager.loggerDict if n == "contextwarden" or n.startswith("contextwarden.")]
    return sorted({*names, "contextwarden.service", "contextwarden.service.proxy"})


def _open_store(url: str) -> AsyncSessionStore:
    if url.startswith("sqlite:///"):
        path, _ = sqlite_path_from_url(url)
        if path != ":memory:":  # the embedded default lives in the user directory, maybe not made yet
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    return open_async_store(url)


def _warm_counters(settings: Settings) -> None:
    """Load the tokenizers of the configured models now, not in a client's first request (about a second each)."""
    if settings.tokenizer:
        get_counter(settings.tokenizer)
    for model in {settings.model, *settings.models} - {None}:
        assert model is not None
        counter_for_model(model)


def create_app(
    settings: Settings | None = None,
    *,
    store: AsyncSessionStore | None = None,
    upstream_client: aiohttp.ClientSession | None = None,
) -> Starlette:
    """The service's ASGI app.

    Args:
        settings: The settings (``[service]``, ``[store]``, compaction...); default: `load_settings()`.
        store: An async store to use instead of opening ``settings.store_url`` (the caller closes it).
        upstream_client: An aiohttp session for the upstream (the caller closes it).
    """
    settings = settings or load_settings()
    settings.check()
    service = settings.service

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        owned = store is None
        opened = store if store is not None else _open_store(settings.store_url)
        hub = open_hub(settings.store_url, history=service.event_history)
        tenants = Tenants(service.api_keys)
        upstream = Upstream.from_env(
            service.upstream_url,
            key_env=service.upstream_api_key_env,
            open_service=tenants.open,
            timeout=service.upstream_timeout,
            connect_timeout=service.upstream_connect_timeout,
            forward_client_credentials=service.forward_client_credentials,
        )
        if upstream_client is not None:
            upstream = Upstream(
                service.upstream_url,
                api_key=upstream._api_key,
                forward_client_key=upstream._forward_client_key,
                timeout=service.upstream_timeout,
                connect_timeout=service.upstream_connect_timeout,
                client=upstream_client,
            )
        upstream.limits = ReplyLimits(
            max_reply_bytes=service.max_reply_bytes,
            max_stream_bytes=service.max_stream_bytes,
            max_event_bytes=service.max_event_bytes,
        )
        redactor = Redactor([upstream._api_key])
        logged = _service_loggers()
        log_filter = install(redactor, logged)
        metrics = ServiceMetrics(max_sessions=service.metrics_sessions)
        state = ServiceState(
            settings=settings,
            store=opened,
            pool=None,  # type: ignore[arg-type]  # set below: the pool calls back into the state
            hub=hub,
            metrics=metrics,
            tenants=tenants,
            limits=Concurrency(service.max_concurrent_per_tenant),
            upstream=upstream,
            redactor=redactor,
        )
        state.pool = SessionPool(
            opened, settings, on_event=state.on_event, watch=state.watch, limit=service.max_cached_sessions
        )
        app.state.service = state
        await hub.start()
        await asyncio.to_thread(_warm_counters, settings)
        # What startup made (modules, tokenizers) lives as long as the process: kept out of the
        # collector's reach, a full collection walks only what requests made (tens of ms less).
        gc.freeze()
        logger.info(
            "contextwarden service: upstream %s, store %s, %s",
            upstream.shown_url,
            settings.store_url.split("://", 1)[0],
            "open (no API keys)" if tenants.open else f"{len(service.api_keys)} API keys",
        )
        try:
            yield
        finally:
            await hub.stop()
            await upstream.aclose()
            if owned:
                await opened.aclose()
            uninstall(log_filter, logged)

    routes = [
        Route("/v1/sessions", api.list_sessions, methods=["GET"]),
        Route("/v1/sessions/{session_id}", api.get_session, methods=["GET"]),
        Route("/v1/sessions/{session_id}", api.delete_session, methods=["DELETE"]),
        Route("/v1/sessions/{session_id}/view", api.session_view, methods=["GET"]),
        Route("/v1/sessions/{session_id}/events", api.session_events, methods=["GET"]),
        Route("/v1/sessions/{session_id}/compact", api.compact_session, methods=["POST"]),
        Route("/v1/sessions/{session_id}/snapshots/{ref:path}", api.snapshot_page, methods=["GET"]),
        Route("/metrics", health.metrics, methods=["GET"]),
        Route("/healthz", health.healthz, methods=["GET"]),
        Route("/readyz", health.readyz, methods=["GET"]),
        Route("/", index, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR, check_dir=False), name="static"),
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[
            Middleware(_Observe),
            Middleware(SecurityHeaders),
            Middleware(
                BrowserGuard,
                policy=GuardPolicy.of(service.host, service.allowed_origins, service.allowed_hosts),
                error=_error_shape,
            ),
            Middleware(_ProxyRoute),
        ],
        exception_handlers={
            ServiceError: _service_error,
            StoreUnavailable: _store_down,
            404: _not_found,
            405: _not_found,
            Exception: _internal,
        },
    )

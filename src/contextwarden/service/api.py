"""The sessions API: list, inspect, view, read snapshots, compact, delete, and the SSE event stream.

Every route is the tenant's: session ids are scoped per tenant (`contextwarden.stores.tenancy`), so
an id another tenant uses answers exactly like an unused one.
"""

from __future__ import annotations

import dataclasses

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..exceptions import SessionNotFound, SnapshotError, UsageError
from ..stores import SessionInfo
from ..stores.tenancy import alocate, client_info
from ..timeline import STATUS_SLOT
from .describe import describe_live, describe_stored, listed_figures
from .errors import ServiceError
from .events import sse_stream
from .intake import check_query_text
from .runtime import ServiceState, state_of
from .sessions import Lease

__all__ = [
    "compact_session",
    "delete_session",
    "get_session",
    "list_sessions",
    "session_events",
    "session_view",
    "snapshot_page",
]


def _not_found(session_id: str) -> ServiceError:
    return ServiceError(404, f"No session {session_id!r}.", code="session_not_found")


async def _lease(svc: ServiceState, tenant: str, session_id: str) -> Lease:
    try:
        return await svc.pool.acquire(tenant, session_id, create=False)
    except (SessionNotFound, UsageError):
        raise _not_found(session_id) from None


async def _located(svc: ServiceState, tenant: str, session_id: str) -> SessionInfo:
    """The tenant's session (its info names the store key), or 404."""
    try:
        return await alocate(svc.store, tenant, session_id)
    except (SessionNotFound, UsageError):
        raise _not_found(session_id) from None


async def list_sessions(request: Request) -> Response:
    """``GET /v1/sessions``: one page of the tenant's sessions (``limit``, ``cursor``)."""
    svc = state_of(request)
    tenant = svc.tenants.tenant(request)
    try:
        limit = min(max(int(request.query_params.get("limit", "100")), 1), 1000)
    except ValueError:
        raise ServiceError(400, "`limit` must be an integer.", param="limit") from None
    given = request.query_params.get("cursor") or None
    if given is not None:
        check_query_text("cursor", given)
    try:
        sessions, cursor = await svc.store.list_sessions(tenant=tenant, limit=limit, cursor=given)
    except UsageError as exc:  # a cursor the store refuses (too long, not one it made)
        raise ServiceError(400, f"`cursor` is not valid: {exc}", param="cursor", code="invalid_cursor") from None
    data = []
    for info in sessions:
        shown = client_info(info)
        item = shown.to_dict()
        loaded = svc.pool.loaded(tenant, shown.session_id)
        record = None
        if loaded is None:
            record, _ = await svc.store.load_state(info.session_id, slot=STATUS_SLOT, tenant=tenant)
        listed = listed_figures(loaded, record)
        if listed is not None:
            item["figures"] = listed
            item["status"] = {k: listed[k] for k in ("used", "ratio", "state")} | {"budget": listed["effective"]}
        data.append(item)
    return JSONResponse({"object": "list", "data": data, "next_cursor": cursor})


async def get_session(request: Request) -> Response:
    """``GET /v1/sessions/{id}``: metadata, figures, timeline, cache reuse, ledger, working set, summary.

    A session this process holds is described live; any other from what the store saved.
    """
    svc = state_of(request)
    tenant = svc.tenants.tenant(request)
    session_id = request.path_params["session_id"]
    info = await _located(svc, tenant, session_id)
    if svc.pool.loaded(tenant, session_id) is None:
        return JSONResponse(await describe_stored(svc.store, info))
    lease = await _lease(svc, tenant, session_id)
    try:
        described = describe_live(info, lease.session)
        described["status"] = dataclasses.asdict(lease.session.status())
        return JSONResponse(described)
    finally:
        svc.pool.release(lease)


async def session_view(request: Request) -> Response:
    """``GET /v1/sessions/{id}/view``: the view the next request would send (compacting first when due)."""
    svc = state_of(request)
    tenant = svc.tenants.tenant(request)
    session_id = request.path_params["session_id"]
    lease = await _lease(svc, tenant, session_id)
    try:
        prepared = await lease.session.prepare(format="openai")
        await lease.session.flush()
        return JSONResponse({"messages": prepared.messages, "status": dataclasses.asdict(prepared.status)})
    except BaseException:
        lease.failed = True
        raise
    finally:
        svc.pool.release(lease)


async def snapshot_page(request: Request) -> Response:
    """``GET /v1/sessions/{id}/snapshots/{ref}?page=N``: a page of a snapshot, ledger step or span."""
    svc = state_of(request)
    tenant = svc.tenants.tenant(request)
    session_id = request.path_params["session_id"]
    ref = request.path_params["ref"]
    try:
        page = int(request.query_params.get("page", "1"))
    except ValueError:
        raise ServiceError(400, "`page` must be a whole number from 1.", param="page") from None
    lease = await _lease(svc, tenant, session_id)
    try:
        text = await lease.session.aread_context(ref, page=page)
    except SnapshotError as exc:
        raise ServiceError(404, str(exc), code="snapshot_not_found") from None
    finally:
        svc.pool.release(lease)
    return JSONResponse({"ref": ref, "page": page, "text": text})


async def compact_session(request: Request) -> Response:
    """``POST /v1/sessions/{id}/compact``: compact now, as deep as after a context-length error."""
    svc = state_of(request)
    tenant = svc.tenants.tenant(request)
    session_id = request.path_params["session_id"]
    lease = await _lease(svc, tenant, session_id)
    try:
        before = lease.session.status().used
        prepared = await lease.session.on_context_overflow(format="openai")
        await lease.session.flush()
        return JSONResponse({"tokens_before": before, "status": dataclasses.asdict(prepared.status)})
    except BaseException:
        lease.failed = True
        raise
    finally:
        svc.pool.release(lease)


async def delete_session(request: Request) -> Response:
    """``DELETE /v1/sessions/{id}``."""
    svc = state_of(request)
    tenant = svc.tenants.tenant(request)
    session_id = request.path_params["session_id"]
    lease = await _lease(svc, tenant, session_id)
    try:
        await svc.store.delete_session(lease.store_key, tenant=tenant)
        lease.failed = True  # dropped from memory on release
    except SessionNotFound:
        raise _not_found(session_id) from None
    finally:
        svc.pool.release(lease)
    svc.hub.forget(tenant, session_id)
    svc.metrics.forget(tenant, session_id)
    return JSONResponse({"id": session_id, "object": "session.deleted", "deleted": True})


async def session_events(request: Request) -> Response:
    """``GET /v1/sessions/{id}/events``: the session's events as Server-Sent Events (``Last-Event-ID`` resumes)."""
    svc = state_of(request)
    tenant = svc.tenants.tenant(request)
    session_id = request.path_params["session_id"]
    await _located(svc, tenant, session_id)
    raw = request.headers.get("last-event-id") or request.query_params.get("last_event_id") or "0"
    try:
        last = max(int(raw), 0)
    except ValueError:
        raise ServiceError(400, f"`Last-Event-ID` must be an event number, got {raw[:40]!r}.") from None
    stream = sse_stream(
        svc.hub, tenant, session_id, last_event_id=last, keepalive=svc.settings.service.keepalive_seconds
    )
    return StreamingResponse(
        stream,
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no", "content-encoding": "identity"},
    )

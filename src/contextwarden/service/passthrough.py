"""Routes the proxy does not manage, and Anthropic's token counting for the managed view.

Any other ``/v1/...`` route (``/v1/models``, ``/v1/embeddings``, ...) is sent to the upstream as
the client sent it (method, body, query), with the service's or the client's credentials as for
the managed routes, and its answer comes back with its status.

``POST /v1/messages/count_tokens`` is answered here: the request's system prompt, messages and
tools are counted with the model's counter, and the count is capped at what the proxy holds the
view to (the window less the reserved output), since that is what the upstream will receive.
A client that compacts on its own when the count nears its window then leaves compaction to
the proxy.
"""

from __future__ import annotations

import logging

import aiohttp
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..adapters import anthropic
from ..exceptions import ContextWardenError, MessageError
from ..tokens import ANTHROPIC_FRAMING, TokenAccountant, get_counter
from .dialects import AnthropicMessages
from .encodings import read_decoded_body
from .errors import ServiceError
from .limits import read_body
from .runtime import state_of
from .sessions import session_options

__all__ = ["count_tokens", "pass_through"]

logger = logging.getLogger("contextwarden.service.passthrough")

_HOP_HEADERS = frozenset(
    {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade", "authorization",
     "x-api-key", "cookie", "accept-encoding"}
)  # fmt: skip
"""Headers not copied from the client (hop-by-hop ones; credentials go as `Upstream.headers` decides)."""

_MESSAGES = AnthropicMessages()


async def pass_through(request: Request, path: str) -> Response:
    """Send the request to the upstream as it is (``path`` without the ``/v1`` the API root ends with)."""
    svc = state_of(request)
    tenant = svc.tenants.tenant(request)
    body = await read_body(request, svc.settings.service.max_body_bytes)
    upstream = svc.upstream
    headers = upstream.headers(request, stream=False)
    headers.pop("accept", None)
    headers.pop("content-type", None)
    for name, value in request.headers.items():
        if name not in _HOP_HEADERS and name not in headers:
            headers[name] = value
    target = upstream.path_url(path)
    if request.url.query:
        target = f"{target}?{request.url.query}"
    try:
        async with upstream.client.request(
            request.method, target, data=body or None, headers=headers, proxy=upstream.proxy
        ) as reply:
            content = await reply.read()
            kept = {k: v for k, v in reply.headers.items() if k.lower() in ("content-type", "retry-after")}
    except TimeoutError as exc:
        raise upstream.timed_out(exc) from None
    except aiohttp.ClientError as exc:
        raise upstream.unreachable(exc) from None
    svc.metrics.unmanaged.labels("other_route").inc()
    logger.info("pass-through tenant=%s %s %s status=%s", tenant, request.method, path, reply.status)
    return Response(content, status_code=reply.status, headers=kept)


async def count_tokens(request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: the tokens of the request as the proxy would send it."""
    svc = state_of(request)
    try:
        svc.tenants.tenant(request)
        body = _MESSAGES.parse(await read_decoded_body(request, svc.settings.service.max_body_bytes))
    except ServiceError as exc:
        return _MESSAGES.error_response(exc.status, exc.message, code=exc.code, param=exc.param)
    try:
        options = session_options(svc.settings, body["model"])
        counter = options.get("counter", "heuristic")
        accountant = TokenAccountant(
            get_counter(counter) if isinstance(counter, str) else counter, framing=ANTHROPIC_FRAMING
        )
        messages = anthropic.to_messages(body["messages"], system=body.get("system"))
        tools = body.get("tools") or []
        counted = sum(accountant.count_message(m) for m in messages) + accountant.count_tools(tools)
    except MessageError as exc:
        return _MESSAGES.error_response(400, str(exc), param="messages")
    except ContextWardenError as exc:
        return _MESSAGES.error_response(400, str(exc), param="model")
    held = max(1, options["window"] - options["reserved_output"])
    return JSONResponse({"input_tokens": min(counted, held)})

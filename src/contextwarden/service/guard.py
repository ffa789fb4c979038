"""The browser guard: no page on another site can write through the service or read it by DNS rebinding.

A web page can make a browser send requests to any address it knows, the service on loopback
included. It cannot set ``Content-Type: application/json`` on a cross-site request without the
service's consent (a CORS preflight, which the service never grants), and the browser tells where
the request comes from (``Origin``, ``Sec-Fetch-Site``). So, for every route and every dialect:

* a request with a body must say it is JSON (``application/json`` or ``application/*+json``):
  otherwise 415, before anything is read, appended or sent upstream;
* a state-changing request (anything but GET, HEAD, OPTIONS) from a browser page must come from
  the service's own origin or one of ``[service] allowed_origins``: otherwise 403;
* a request a browser sends (it carries ``Origin`` or ``Sec-Fetch-Site``) must name the service by
  a loopback name, the configured ``host`` or one of ``[service] allowed_hosts``: otherwise 403. A
  page that rebinds its own DNS name to 127.0.0.1 sends its own name as ``Host``.

Clients that are not browsers (SDKs, curl, agents) send neither header and are unaffected beyond
the content type, which every OpenAI and Anthropic SDK sends.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_response

__all__ = ["BrowserGuard", "ErrorShape", "GuardPolicy", "refusal"]

ErrorShape = Callable[[str, int, str, str], Response]
"""(path, status, message, code) -> the error reply in the shape of the route at ``path``."""


def _openai_shape(path: str, status: int, message: str, code: str) -> Response:
    return error_response(status, message, code=code)


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})


@dataclass(frozen=True)
class GuardPolicy:
    """Which origins and host names browsers may use; built from ``[service]``."""

    bind_host: str = "127.0.0.1"
    allowed_origins: frozenset[str] = frozenset()
    allowed_hosts: frozenset[str] = frozenset()

    @classmethod
    def of(cls, bind_host: str, origins: Iterable[str], hosts: Iterable[str]) -> GuardPolicy:
        """The policy of the settings' values (origins and hosts compared in lower case)."""
        return cls(
            bind_host=bind_host.strip("[]").lower(),
            allowed_origins=frozenset(o.rstrip("/").lower() for o in origins),
            allowed_hosts=frozenset(h.strip("[]").lower() for h in hosts),
        )

    def host_allowed(self, host: str) -> bool:
        """Whether a browser may reach the service by the name ``host`` (without its port)."""
        if "*" in self.allowed_hosts or host in self.allowed_hosts:
            return True
        if host == self.bind_host and host not in _WILDCARD_HOSTS:
            return True
        return _is_loopback(host)

    def origin_allowed(self, origin: str, own: str) -> bool:
        """Whether a page of ``origin`` may change state through the service reached as ``own``."""
        origin = origin.rstrip("/").lower()
        return origin == own or "*" in self.allowed_origins or origin in self.allowed_origins


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split_host(value: str) -> str:
    """The name of a ``Host`` header value, without port or IPv6 brackets, in lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value[1:]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _is_json_type(value: str) -> bool:
    media = value.split(";", 1)[0].strip().lower()
    if media == "application/json":
        return True
    kind, _, subtype = media.partition("/")
    return kind == "application" and subtype.endswith("+json")


def _has_body(headers: dict[str, str]) -> bool:
    length = headers.get("content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return "transfer-encoding" in headers


def refusal(scope: Scope, policy: GuardPolicy) -> tuple[int, str, str] | None:
    """Why the guard refuses the HTTP request of ``scope``: (status, code, message), or None to let it in."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
    method = scope.get("method", "GET")
    origin = headers.get("origin")
    fetch_site = headers.get("sec-fetch-site", "").lower()
    host_header = headers.get("host", "")
    if origin is not None or fetch_site:
        host = _split_host(host_header)
        if not policy.host_allowed(host):
            return (
                403,
                "host_not_allowed",
                f"A browser reached the service as {host!r}, which is not a loopback name, the configured host "
                "or one of `[service] allowed_hosts`; add the name there if this page is yours.",
            )
    if method not in _SAFE_METHODS:
        scheme = scope.get("scheme", "http")
        own = f"{scheme}://{host_header.lower()}"
        cross = origin is not None and not policy.origin_allowed(origin, own)
        if origin is None and fetch_site in ("cross-site", "same-site"):
            cross = True
        if cross:
            return (
                403,
                "cross_origin_refused",
                f"A page of another origin ({origin or fetch_site!s}) may not send {method} requests to this "
                "service; add its origin to `[service] allowed_origins` if it is yours.",
            )
        if _has_body(headers) and not _is_json_type(headers.get("content-type", "")):
            shown = headers.get("content-type") or "none"
            return (
                415,
                "unsupported_media_type",
                f"The request body's content type is {shown!r}; send JSON with `Content-Type: application/json`.",
            )
    return None


class BrowserGuard:
    """ASGI middleware applying `refusal` to every HTTP request; refused ones never reach a route."""

    def __init__(self, app: ASGIApp, policy: GuardPolicy, error: ErrorShape = _openai_shape) -> None:
        self.app = app
        self.policy = policy
        self.error = error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = refusal(scope, self.policy)
            if refused is not None:
                status, code, message = refused
                response = self.error(scope.get("path", ""), status, message, code)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

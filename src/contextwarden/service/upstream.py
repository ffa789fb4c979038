"""The upstream model server: one pooled aiohttp session, its credentials, transport failures as 502/504.

aiohttp rather than httpx here: under 50 concurrent sessions httpx's connection pool rescans every
pooled connection (a ``poll`` each) for every request, which cost the proxy a few milliseconds of
CPU per request; aiohttp's pool hands a kept-alive connection back in constant time.

The upstream key comes from the environment (``[service] upstream_api_key_env``); it is sent to
the upstream only, never echoed to a client or written to a log. A service without API keys of its
own and without an upstream key forwards the client's bearer instead (a local proxy in front of
one agent that brings its own key).
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from starlette.requests import Request

from .bounds import ReplyLimits, reply_too_large, stream_too_long
from .errors import ServiceError

__all__ = ["Upstream", "UpstreamBroken", "UpstreamReply", "env_proxy", "redact_url"]

_IDLE_SECONDS = 2.0
"""Idle upstream connections are dropped before common servers' 5 s keep-alive timeout closes one
under a request (a race that surfaces as a dropped reply)."""


def redact_url(url: str) -> str:
    """``url`` without user info or query (where credentials hide)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class UpstreamBroken(Exception):
    """The upstream connection broke while a reply was being read (not a timeout)."""


class UpstreamReply:
    """An upstream response: status and headers at once; the body read whole (``content``) or streamed."""

    def __init__(self, response: aiohttp.ClientResponse, upstream: Upstream, content: bytes | None = None) -> None:
        self._response = response
        self._upstream = upstream
        self.status_code = response.status
        self.headers: Mapping[str, str] = response.headers
        self._content = content

    @property
    def content(self) -> bytes:
        """The body of a reply that was read whole (not streamed)."""
        assert self._content is not None, "a streamed reply has no content: read it with aiter_raw() or aread()"
        return self._content

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive.

        Raises:
            ServiceError: 504 when the upstream stops sending for longer than the timeout.
            UpstreamBroken: the connection broke.
        """
        limit = self._upstream.limits.max_stream_bytes
        size = 0
        try:
            async for chunk in self._response.content.iter_any():
                size += len(chunk)
                if size > limit:
                    raise stream_too_long(self._upstream.shown_url, limit)
                yield chunk
        except TimeoutError as exc:
            raise self._upstream.timed_out(exc) from None
        except aiohttp.ClientError as exc:
            raise UpstreamBroken(type(exc).__name__) from None

    async def aread(self) -> bytes:
        """The rest of a streamed body.

        Raises:
            ServiceError: 504 when the upstream stops sending for longer than the timeout, 502 past
                `ReplyLimits.max_reply_bytes`.
            UpstreamBroken: the connection broke.
        """
        if self._content is not None:
            return self._content
        limit = self._upstream.limits.max_reply_bytes
        declared = self._response.content_length
        if declared is not None and declared > limit:
            raise reply_too_large(self._upstream.shown_url, declared, limit)
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in self._response.content.iter_any():
                size += len(chunk)
                if size > limit:
                    raise reply_too_large(self._upstream.shown_url, size, limit)
                chunks.append(chunk)
            self._content = b"".join(chunks)
        except TimeoutError as exc:
            raise self._upstream.timed_out(exc) from None
        except aiohttp.ClientError as exc:
            raise UpstreamBroken(type(exc).__name__) from None
        return self._content

    async def aclose(self) -> None:
        """Give the connection back: to the pool when the body was read to its end, else closed (which
        cancels an unfinished upstream call)."""
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


def env_proxy(url: str) -> str | None:
    """The proxy ``HTTP_PROXY``/``HTTPS_PROXY`` name for ``url``, unless ``NO_PROXY`` exempts its host.

    Credentials go in the proxy URL (``http://user:pass@proxy:3128``).
    """
    parts = urlsplit(url)
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies_environment().get(parts.scheme)


class Upstream:
    """Sends requests to the configured model server (chat completions, messages, responses, other routes)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        forward_client_key: bool,
        timeout: float,
        connect_timeout: float,
        client: aiohttp.ClientSession | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.shown_url = redact_url(self.url)
        """The URL as errors and logs name it."""
        self._api_key = api_key
        self._forward_client_key = forward_client_key
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._owned = client is None
        self._client = client
        self.proxy = env_proxy(self.url)
        """The proxy the environment names for the upstream (read once; None: connect directly)."""
        self.limits = ReplyLimits()
        """How much of a reply is read (the app sets ``[service]``'s bounds)."""

    @property
    def client(self) -> aiohttp.ClientSession:
        """The pooled session (made on first use: aiohttp binds it to the running event loop)."""
        if self._client is None:
            self._client = aiohttp.ClientSession(
                # a read timeout per wait for bytes, not for the whole reply: a stream may run for minutes
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=self.connect_timeout, sock_connect=self.connect_timeout, sock_read=self.timeout
                ),
                connector=aiohttp.TCPConnector(limit=1000, limit_per_host=0, keepalive_timeout=_IDLE_SECONDS),
                # the environment's proxy is read once (`proxy`): trust_env would read the variables
                # and ~/.netrc again for every request
                trust_env=False,
                skip_auto_headers=("User-Agent",),
            )
        return self._client

    @classmethod
    def from_env(
        cls,
        base_url: str,
        *,
        key_env: str | None,
        open_service: bool,
        timeout: float,
        connect_timeout: float,
        forward_client_credentials: bool | None = None,
    ) -> Upstream:
        """The upstream with its key read from the environment variable ``key_env``.

        ``forward_client_credentials``: None forwards the client's key when the service is open and has
        no upstream key; True forwards it whenever the service is open (a client's key is the service's
        own when the service has API keys, and is never sent on); False never forwards it.
        """
        key = os.environ.get(key_env) if key_env else None
        forward = open_service and (not key if forward_client_credentials is None else forward_client_credentials)
        return cls(
            base_url,
            api_key=key or None,
            forward_client_key=forward,
            timeout=timeout,
            connect_timeout=connect_timeout,
        )

    def headers(
        self,
        request: Request,
        *,
        stream: bool,
        forward: tuple[str, ...] = (),
        key_header: str = "authorization",
    ) -> dict[str, str]:
        """Headers for the upstream request: the client's ``forward`` headers, and the credentials.

        The client's own credentials (``Authorization``, ``X-Api-Key``) go upstream when the
        operator allows it; else the service's key, in ``key_header``.
        """
        out = {"content-type": "application/json", "accept": "text/event-stream" if stream else "application/json"}
        for name in forward:
            value = request.headers.get(name)
            if value is not None:
                out[name] = value
        if self._forward_client_key and (request.headers.get("authorization") or request.headers.get("x-api-key")):
            for name in ("authorization", "x-api-key"):
                if request.headers.get(name):
                    out[name] = request.headers[name]
        elif self._api_key:
            out[key_header] = f"Bearer {self._api_key}" if key_header == "authorization" else self._api_key
        return out

    def path_url(self, path: str) -> str:
        """The upstream URL of ``path`` under the API root (``models`` -> ``<root>/models``)."""
        return f"{self.base_url}/{path.lstrip('/')}"

    @property
    def forwards_client_key(self) -> bool:
        """The client's own credentials go upstream (its upstream's refusal is the client's to see)."""
        return self._forward_client_key

    async def send(
        self, body: bytes, headers: Mapping[str, str], *, stream: bool, path: str | None = None
    ) -> UpstreamReply:
        """POST the body (to ``path`` under the API root; default chat completions); the reply's body is read
        whole unless ``stream`` (then read it and `aclose` it).

        Raises:
            ServiceError: 504 when the upstream does not answer in time, 502 when it cannot be reached or
                breaks the connection before the whole reply is read.
        """
        try:
            url = self.url if path is None else self.path_url(path)
            response = await self.client.post(url, data=body, headers=headers, proxy=self.proxy)
        except TimeoutError as exc:
            raise self.timed_out(exc) from None
        except aiohttp.ClientError as exc:
            raise self.unreachable(exc) from None
        reply = UpstreamReply(response, self)
        if stream:
            return reply
        try:
            await reply.aread()
        except UpstreamBroken as exc:
            raise ServiceError(
                502,
                f"The upstream at {self.shown_url} broke the connection before the end of its reply ({exc}).",
                code="upstream_disconnected",
            ) from None
        finally:
            await reply.aclose()
        return reply

    def unreachable(self, exc: BaseException) -> ServiceError:
        """The 502 for an upstream that cannot be reached."""
        return ServiceError(
            502,
            f"The upstream at {self.shown_url} could not be reached ({type(exc).__name__}); check "
            "`[service] upstream_url` and that the server is running.",
            code="upstream_unreachable",
        )

    def timed_out(self, exc: BaseException) -> ServiceError:
        """The 504 for an upstream that did not answer in time."""
        return ServiceError(
            504,
            f"The upstream at {self.shown_url} did not answer within {self.timeout:g}s ({type(exc).__name__}); retry, "
            "or raise `[service] upstream_timeout`.",
            code="upstream_timeout",
        )

    async def reachable(self) -> tuple[bool, str]:
        """Whether the upstream answers HTTP at all (any status counts) at ``/models``."""
        try:
            async with self.client.get(
                f"{self.base_url}/models",
                headers=self._probe_headers(),
                timeout=aiohttp.ClientTimeout(total=3.0),
                proxy=self.proxy,
            ):
                pass
        except aiohttp.ClientConnectorError:
            return False, f"cannot connect to {redact_url(self.base_url)}"
        except TimeoutError:
            return False, f"no answer within 3 s from {redact_url(self.base_url)}"
        except aiohttp.ClientError as exc:
            return False, f"{type(exc).__name__} from {redact_url(self.base_url)}"
        return True, "ok"

    def _probe_headers(self) -> dict[str, Any]:
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    async def aclose(self) -> None:
        """Close the session when this object made it."""
        if self._owned and self._client is not None:
            await self._client.close()

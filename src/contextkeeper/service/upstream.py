"""The upstream model server: one pooled httpx client, its credentials, transport failures as 502/504.

The upstream key comes from the environment (``[service] upstream_api_key_env``); it is sent to
the upstream only, never echoed to a client or written to a log. A service without API keys of its
own and without an upstream key forwards the client's bearer instead (a local proxy in front of
one agent that brings its own key).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import httpx
from starlette.requests import Request

from .errors import ServiceError

__all__ = ["Upstream", "redact_url"]


def redact_url(url: str) -> str:
    """``url`` without user info or query (where credentials hide)."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(userinfo=b"", query=None))


class Upstream:
    """Sends chat-completions requests to the configured OpenAI-compatible server."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        forward_client_key: bool,
        timeout: float,
        connect_timeout: float,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self._parsed_url = httpx.URL(self.url)  # parsed once: httpx would parse the string on every request
        self.shown_url = redact_url(self.url)
        """The URL as errors and logs name it."""
        self._api_key = api_key
        self._forward_client_key = forward_client_key
        self.timeout = timeout
        self._owned = client is None
        self.client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            # idle connections are dropped before common servers' 5 s keep-alive timeout closes them
            # under a request (a race that surfaces as a dropped reply)
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200, keepalive_expiry=2.0),
        )

    @classmethod
    def from_env(
        cls, base_url: str, *, key_env: str | None, open_service: bool, timeout: float, connect_timeout: float
    ) -> Upstream:
        """The upstream with its key read from the environment variable ``key_env``."""
        key = os.environ.get(key_env) if key_env else None
        return cls(
            base_url,
            api_key=key or None,
            forward_client_key=open_service and not key,
            timeout=timeout,
            connect_timeout=connect_timeout,
        )

    def headers(self, request: Request, *, stream: bool) -> dict[str, str]:
        """Headers for the upstream request."""
        out = {"content-type": "application/json", "accept": "text/event-stream" if stream else "application/json"}
        if self._api_key:
            out["authorization"] = f"Bearer {self._api_key}"
        elif self._forward_client_key and request.headers.get("authorization"):
            out["authorization"] = request.headers["authorization"]
        return out

    async def send(self, body: bytes, headers: Mapping[str, str], *, stream: bool) -> httpx.Response:
        """POST the body; the response is open (streamed) when ``stream``, else read.

        Raises:
            ServiceError: 504 when the upstream does not answer in time, 502 when it cannot be reached.
        """
        request = self.client.build_request("POST", self._parsed_url, content=body, headers=dict(headers))
        try:
            return await self.client.send(request, stream=stream)
        except httpx.TimeoutException as exc:
            raise self.timed_out(exc) from None
        except httpx.TransportError as exc:
            raise ServiceError(
                502,
                f"The upstream at {self.shown_url} could not be reached ({type(exc).__name__}); check "
                "`[service] upstream_url` and that the server is running.",
                code="upstream_unreachable",
            ) from None

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
            await self.client.get(f"{self.base_url}/models", headers=self._probe_headers(), timeout=3.0)
        except httpx.HTTPError as exc:
            return False, f"{type(exc).__name__} from {redact_url(self.base_url)}"
        return True, "ok"

    def _probe_headers(self) -> dict[str, Any]:
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    async def aclose(self) -> None:
        """Close the client when this object made it."""
        if self._owned:
            await self.client.aclose()

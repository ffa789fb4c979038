"""Response headers every answer of the service carries: no MIME sniffing, a strict policy for pages.

The dashboard loads only its own script and style sheet and talks only to its own origin, so its
Content-Security-Policy allows exactly that: an injected ``<script>`` or inline handler would not
run, and no other site may frame the page.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_SECURITY_POLICY", "SecurityHeaders", "header_value"]

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


_HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")


def header_value(text: str) -> str:
    """``text`` as an HTTP header value: printable ASCII as is, anything else (and ``%``) percent-encoded
    as UTF-8, so ``urllib.parse.unquote`` gives the text back. A session id in Japanese or with a
    zero-width character would otherwise fail to encode after the reply was paid for and stored."""
    if text.isascii() and text.isprintable() and "%" not in text:
        return text
    return quote(text, safe=_HEADER_SAFE, errors="surrogatepass")


class SecurityHeaders:
    """ASGI middleware adding ``X-Content-Type-Options``, ``Referrer-Policy`` and (to HTML) the CSP."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("x-content-type-options", "nosniff")
                headers.setdefault("referrer-policy", "no-referrer")
                if headers.get("content-type", "").startswith("text/html"):
                    headers.setdefault("content-security-policy", CONTENT_SECURITY_POLICY)
                    headers.setdefault("x-frame-options", "DENY")
            await send(message)

        await self.app(scope, receive, with_headers)

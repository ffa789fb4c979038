"""An upstream that answers with whatever bytes a test scripts: a body of any size, an endless stream,
an event without its blank line. Each reply closes its connection (the body ends there)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RawAnswer = tuple[int, dict[str, str], Iterable[bytes]]
"""(status, headers, body pieces)."""
RawHandler = Callable[[str, bytes], RawAnswer]
"""(path, request body) -> the answer."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"data": []}')

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        status, headers, pieces = self.server.handler(self.path, body)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("connection", "close")
        self.end_headers()
        try:
            for piece in pieces:
                self.wfile.write(piece)
                self.wfile.flush()
        except OSError:  # the service went away (it cut the reply): what these tests provoke
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler: RawHandler) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.handler = handler

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class RawUpstream:
    """A local HTTP server answering every POST with ``handler``'s bytes."""

    def __init__(self, handler: RawHandler) -> None:
        self._server = _Server(handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> RawUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

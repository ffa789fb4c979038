"""The service in a thread of the calling process, for examples, notebooks and tests.

``contextwarden serve`` is how the service runs in production. A script that wants the proxy
next to its own code starts it with `ServiceThread` and stops it before the interpreter exits:
an event loop still running in a daemon thread while Python shuts down can crash the process
(uvloop's loop does, with SIGSEGV, after the script's output is printed).
"""

from __future__ import annotations

import math
import threading
import time
from types import TracebackType
from typing import Any, Self

import uvicorn

from ..exceptions import UsageError

__all__ = ["ServiceThread"]

_POLL = 0.02
"""Seconds between checks while the server starts."""


class ServiceThread:
    """An ASGI app (`create_app`'s) served by uvicorn in a thread, stopped and joined on exit.

    Use it as a context manager, or call `start` and `stop`::

        with ServiceThread(create_app(settings)) as service:
            client = OpenAI(base_url=service.base_url, api_key="unused")

    Args:
        app: The ASGI app to serve.
        host: The address to listen on (loopback by default).
        port: The port; 0 picks a free one (read it from `port` or `url`).
        start_timeout: Seconds `start` waits for the server to listen before it gives up.
        stop_timeout: Seconds `stop` waits for open requests and the app's shutdown to finish.
    """

    def __init__(
        self,
        app: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        start_timeout: float = 30.0,
        stop_timeout: float = 10.0,
    ) -> None:
        self._config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=math.ceil(stop_timeout),
        )
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        """Start serving and wait until the server listens.

        Raises:
            UsageError: the server did not start within ``start_timeout`` (the port is taken, or
                the app's startup failed; uvicorn logs why).
        """
        if self._server is not None:
            return self
        server = uvicorn.Server(self._config)
        thread = threading.Thread(target=self._serve, args=(server,), name="contextwarden-service", daemon=True)
        self._server, self._thread = server, thread
        thread.start()
        deadline = time.monotonic() + self._start_timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise UsageError(
                    f"the service did not start listening on {self._config.host}:{self._config.port} within "
                    f"{self._start_timeout:g} s; pick a free port (port=0 picks one) and check the log above."
                )
            time.sleep(_POLL)
        return self

    @staticmethod
    def _serve(server: uvicorn.Server) -> None:
        try:
            server.run()
        except SystemExit:  # uvicorn exits when it cannot listen or the app's startup fails; start() reports it
            pass

    def stop(self) -> None:
        """Stop serving: finish open requests, run the app's shutdown, and wait for the thread."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(self._stop_timeout + 5.0)
        if thread.is_alive():  # a request that outlived the graceful shutdown: close it and wait again
            server.force_exit = True
            thread.join()
        self._server, self._thread = None, None

    @property
    def port(self) -> int:
        """The port the server listens on."""
        if self._server is None or not self._server.servers:
            raise UsageError("the service is not running; call start() or use ServiceThread as a context manager.")
        return int(self._server.servers[0].sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        """The service's root URL, ``http://HOST:PORT``."""
        host = self._config.host
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL of the proxy, ending in ``/v1``."""
        return f"{self.url}/v1"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

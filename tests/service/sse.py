"""A small SSE reader for the tests: frames of a stream read in a background thread."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx


class SSEReader:
    """Reads ``url``'s event stream in a thread; ``frames`` are dicts (id, event, data) and comments."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.frames: list[dict[str, Any]] = []
        self.status: int | None = None
        self._stop = threading.Event()
        self._client = httpx.Client(timeout=httpx.Timeout(30, read=None))
        self._thread = threading.Thread(target=self._run, args=(url, headers or {}), daemon=True)
        self._thread.start()

    def _run(self, url: str, headers: dict[str, str]) -> None:
        try:
            with self._client.stream("GET", url, headers=headers) as response:
                self.status = response.status_code
                frame: dict[str, Any] = {}
                for line in response.iter_lines():
                    if self._stop.is_set():
                        return
                    if not line:
                        if frame:
                            self.frames.append(frame)
                        frame = {}
                    elif line.startswith(":"):
                        self.frames.append({"comment": line[1:].strip()})
                    else:
                        name, _, value = line.partition(":")
                        value = value.removeprefix(" ")
                        frame[name] = json.loads(value) if name == "data" else value
        except httpx.HTTPError:
            return

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [f for f in self.frames if "event" in f and (kind is None or f["event"] == kind)]

    def wait_for(self, predicate: Any, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; frames: {self.frames[-5:]}")
            time.sleep(0.02)

    def close(self) -> None:
        self._stop.set()
        self._client.close()
        self._thread.join(timeout=5)

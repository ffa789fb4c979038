"""Running `contextwarden serve` as a process in the service tests."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx


def wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until the service at ``url`` answers /healthz (its stderr goes to ``log``)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"serve exited: {log.read_text()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError("serve did not answer /healthz in 30 s")

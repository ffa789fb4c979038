"""Suite-wide test settings: no paid model requests, asyncio for anyio tests, a private user dir."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import contextwarden.llm

# Every run of the suite (`make test`, CI) tries the same examples, so a correct tree passes every
# time; derandomize also means no example database. `make fuzz` (HYPOTHESIS_PROFILE=fuzz) explores
# with random seeds and a larger budget, and keeps what it finds in .hypothesis/ to replay first;
# each failure it finds becomes a fixed @example or regression test in the suite.
# No deadline and no "too slow" health check: how long an example takes depends on the machine's
# load, and speed is the benchmarks' business (benchmarks/), not the tests'.
settings.register_profile(
    "deterministic",
    derandomize=True,
    print_blob=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("ci", settings.get_profile("deterministic"))
settings.register_profile("fuzz", derandomize=False, print_blob=True, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

# No test may reach a paid API; local test servers stay reachable.
contextwarden.llm.ALLOW_MODEL_REQUESTS = False


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _private_user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Settings and the CLI read CONTEXTWARDEN_HOME; tests never touch the real user directory."""
    monkeypatch.setenv("CONTEXTWARDEN_HOME", str(tmp_path / "cw-home"))
    yield


# Threads that a library starts once for the life of the process and stops at exit itself.
_PROCESS_THREADS = ("TMonitor",)  # tqdm's monitor of slow progress bars


def _threads_still_running(grace_s: float) -> list[threading.Thread]:
    deadline = time.monotonic() + grace_s
    while True:
        left = [
            t
            for t in threading.enumerate()
            if t is not threading.main_thread() and t.is_alive() and type(t).__name__ not in _PROCESS_THREADS
        ]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No test leaves a thread running at interpreter exit (a server thread there can crash the exit).

    Session fixtures are torn down by now, so whatever still runs was started and not stopped.
    """
    left = _threads_still_running(grace_s=5.0)
    if not left:
        return
    names = ", ".join(f"{t.name} ({type(t).__module__}.{type(t).__qualname__}, daemon={t.daemon})" for t in left)
    session.config.get_terminal_writer().line(f"threads still running after the suite: {names}", red=True)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

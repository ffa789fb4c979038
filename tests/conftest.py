"""Suite-wide test settings: no paid model requests, asyncio for anyio tests, a private user dir."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, is_hypothesis_test, settings

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


# The fast tier (`pytest -m "not slow"`, `make unit-fast`) leaves out what takes seconds per test:
# property tests (hypothesis) and fuzz, real Redis/Postgres servers, browsers and agent CLIs, the
# frameworks' own loops, the proxy over real HTTP and the command line's runs (service/, cli/),
# benchmark runs, the docs build and the docs' code blocks. The full suite runs all of them.
SLOW_MARKERS = frozenset({"services", "clients", "browser", "llama_server"})
SLOW_DIRS = frozenset({"fuzz", "realserver", "clients", "integrations", "bench_runs", "service", "cli"})
SLOW_FILES = frozenset(
    {
        "test_docs_blocks.py",  # runs every code block of the docs
        "test_docs_site.py",  # builds the site with mkdocs
        "test_trim_paired.py",  # runs the trim benchmark
        "test_faults.py",  # kills writer processes mid-append
        "test_redis_cluster.py",  # starts a Redis cluster
        "test_wheel.py",  # builds and installs the wheel
        "test_demo_cli.py",  # runs the demo
    }
)
SLOW_TESTS = frozenset(
    {
        # load the packaged sentence-transformers model
        "test_backends_and_the_packaged_embedder",
        "test_packaged_minilm_embeds_offline_and_ranks_by_meaning",
        # wait out lock leases and timeouts (seconds of waiting per backend and twin)
        "test_a_live_holder_keeps_its_lock_past_its_lease_and_the_timeout_says_who",
        "test_a_dead_holders_lease_runs_out_and_its_late_release_frees_nothing",
        # move whole sessions between backends, parse a config nested thousands deep, run hundreds of steps
        "test_export_moves_between_backends",
        "test_deep_nesting_is_a_config_error",
        "test_long_coding_session_keeps_early_facts_hundreds_of_steps_later",
    }
)
SERVER_FIXTURES = frozenset(
    {"redis_url", "redis_cluster_url", "postgres_url", "redis_store_url", "postgres_store_url", "pgvector_url"}
)
SERVER_BACKENDS = frozenset({"redis", "redis-cluster", "postgres"})


def _on_a_server(item: pytest.Function) -> bool:
    if SERVER_FIXTURES & set(item.fixturenames):
        return True
    params = item.callspec.params.values() if hasattr(item, "callspec") else ()
    names = {p for value in params for p in (value if isinstance(value, tuple) else (value,)) if isinstance(p, str)}
    return bool(SERVER_BACKENDS & names)


def _slow(item: pytest.Item) -> bool:
    if isinstance(item, pytest.Function) and (is_hypothesis_test(item.obj) or _on_a_server(item)):
        return True
    if isinstance(item, pytest.Function) and item.originalname in SLOW_TESTS:
        return True
    if any(item.get_closest_marker(name) is not None for name in SLOW_MARKERS):
        return True
    parts = item.path.relative_to(Path(__file__).parent).parts
    return parts[0] in SLOW_DIRS or item.path.name in SLOW_FILES or "bench" in item.path.stem


def _fast_tier(config: pytest.Config) -> bool:
    return str(config.getoption("markexpr", "")).strip() == "not slow"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """In the fast tier, whole directories and files of slow tests are not even imported.

    Everything in them would be deselected anyway; importing them (the service, the command line,
    the frameworks, hypothesis strategies) is about half of the fast tier's collection time.
    """
    if not _fast_tier(config):
        return None
    try:
        parts = collection_path.relative_to(Path(__file__).parent).parts
    except ValueError:
        return None
    if not parts:
        return None
    if collection_path.is_dir():
        return True if len(parts) == 1 and parts[0] in SLOW_DIRS else None
    if collection_path.name in SLOW_FILES or (
        collection_path.name.startswith("test_") and "bench" in collection_path.stem
    ):
        return True
    return None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") is None and _slow(item):
            item.add_marker(pytest.mark.slow)


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

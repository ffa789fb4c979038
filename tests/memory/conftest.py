"""Fixtures for the memory tests: one long-term memory per backend (in process, SQLite file)."""

from __future__ import annotations

import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _memory_helpers import Clock

from _services import POSTGRES_URL, unavailable
from contextwarden.memory import InMemoryBackend, MemoryBackend, SQLiteMemoryBackend


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _postgres() -> tuple[MemoryBackend, Callable[[], None]]:
    import psycopg

    from contextwarden.memory.backends.postgres import PostgresMemoryBackend

    try:
        conn = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        message = (
            f"Postgres at {POSTGRES_URL} is not reachable ({exc}); start it or set CONTEXTWARDEN_TEST_POSTGRES_URL."
            " Set CONTEXTWARDEN_REQUIRE_SERVICES=1 to make this a failure."
        )
        unavailable(message)
    schema = f"cw_mem_{uuid.uuid4().hex[:12]}"
    conn.execute(f"CREATE SCHEMA {schema}")

    def drop() -> None:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
        conn.close()

    return PostgresMemoryBackend(connection=conn, prefix=f"{schema}.memory_"), drop


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryBackend]:
    cleanup: Callable[[], None] | None = None
    if request.param == "memory":
        made: MemoryBackend = InMemoryBackend()
    elif request.param == "sqlite":
        made = SQLiteMemoryBackend(tmp_path / "m.db")
    else:
        made, cleanup = _postgres()
    yield made
    made.close()
    if cleanup is not None:
        cleanup()


@pytest.fixture(scope="session")
def pgvector_url() -> Iterator[str]:
    """A Postgres with pgvector, started from the `pgserver` package (Debian's Postgres has no pgvector)."""
    try:
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset (as in CI)
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError:
        unavailable("pgserver is not installed (pip install 'contextwarden[dev]'); it ships Postgres with pgvector.")
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset (as in CI)
        warnings.simplefilter("ignore")
        # directly under the temp dir: run as root, pgserver starts Postgres as its own user, who
        # cannot enter pytest's private temp folders
        data = tempfile.mkdtemp(prefix="cw_pgvector_")
        server = pgserver.get_server(data, cleanup_mode="stop")  # type: ignore[attr-defined]
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)

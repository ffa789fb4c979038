"""Dense recall ranked in Postgres by pgvector (a server from the `pgserver` package), and its fallbacks."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from _memory_helpers import FACT, WINDOW, memory_blocks, run_turns, shipment_history

from _services import POSTGRES_URL, unavailable
from contextwarden.exceptions import ConfigError
from contextwarden.memory import HashingEmbedder, InMemoryBackend, LongTermMemory, MemoryRecord

psycopg = pytest.importorskip("psycopg")

from contextwarden.memory.backends.postgres import PostgresMemoryBackend  # noqa: E402

TEXTS = [
    "The staging database lives in eu-central-1.",
    "Deploys must never run on Fridays.",
    "Invoices go to billing@globex.example every month.",
    "The nightly reconcile job failed with LedgerImbalanceError.",
    "Rotterdam warehouse shipped SHIP-4471 with Maersk.",
    "Lunch was pasta with the team.",
]


@pytest.fixture
def pgvector_backend(pgvector_url: str) -> Iterator[PostgresMemoryBackend]:
    backend = PostgresMemoryBackend(pgvector_url, prefix=f"m{uuid.uuid4().hex[:8]}_", pgvector=True)
    yield backend
    backend.close()


def _memory(backend: object) -> LongTermMemory:
    memory = LongTermMemory(backend, embedder=HashingEmbedder(dimension=64), neighbours=0)  # type: ignore[arg-type]
    memory.add_many([MemoryRecord(text=t, memory_id=f"m{i}", session_id="s1", position=i) for i, t in enumerate(TEXTS)])
    return memory


def test_pgvector_ranks_like_the_in_process_scan(pgvector_backend: PostgresMemoryBackend) -> None:
    assert pgvector_backend.pgvector and pgvector_backend.ranks_vectors
    assert not InMemoryBackend().ranks_vectors
    in_db, in_process = _memory(pgvector_backend), _memory(InMemoryBackend())
    for query in ("where does the staging database live", "which carrier shipped from Rotterdam", "Friday deploys"):
        dense = pgvector_backend.vector_search("default", "hashing:64", [0.0] * 63 + [1.0], limit=3)
        assert len(dense) == 3 and all(-1.0 <= s <= 1.0 for _, s in dense)
        got = [h.memory.memory_id for h in in_db.recall(query, limit=3, touch=False)]
        want = [h.memory.memory_id for h in in_process.recall(query, limit=3, touch=False)]
        assert got == want
        assert in_db.status().retrieval == "hybrid"


def test_pgvector_search_is_scoped_by_tenant_session_and_forget(pgvector_backend: PostgresMemoryBackend) -> None:
    memory = _memory(pgvector_backend)
    other = LongTermMemory(pgvector_backend, tenant="globex", embedder=HashingEmbedder(dimension=64))
    other.add("Rotterdam warehouse shipped SHIP-9999 with Maersk.", session_id="s9")
    vector = HashingEmbedder(dimension=64).embed(["Rotterdam Maersk"])[0]
    ids = [i for i, _ in pgvector_backend.vector_search("default", "hashing:64", vector, limit=10)]
    assert ids[0] == "m4" and len(ids) == len(TEXTS)
    assert pgvector_backend.vector_search("default", "hashing:64", vector, limit=10, session_id="s9") == []
    memory.forget(["m4"])
    assert "m4" not in [i for i, _ in pgvector_backend.vector_search("default", "hashing:64", vector, limit=10)]


def test_pgvector_required_on_a_server_without_it_is_a_config_error() -> None:
    try:
        conn = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        unavailable(f"Postgres at {POSTGRES_URL} is not reachable: {exc}")
    with conn:
        if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone():
            pytest.skip("this server has pgvector")
        with pytest.raises(ConfigError, match="pgvector"):
            PostgresMemoryBackend(connection=conn, prefix=f"m{uuid.uuid4().hex[:8]}_", pgvector=True)
        fallback = PostgresMemoryBackend(connection=conn, prefix=f"m{uuid.uuid4().hex[:8]}_")
        assert not fallback.pgvector and not fallback.ranks_vectors
        with pytest.raises(NotImplementedError):
            fallback.vector_search("default", "m", [1.0], limit=1)


def test_a_session_recalls_through_pgvector_with_the_packaged_embedder(pgvector_url: str) -> None:
    pytest.importorskip("sentence_transformers")
    from contextwarden.memory import SentenceTransformerEmbedder
    from contextwarden.session import Session

    backend = PostgresMemoryBackend(pgvector_url, prefix=f"m{uuid.uuid4().hex[:8]}_", pgvector=True)
    memory = LongTermMemory(backend, embedder=SentenceTransformerEmbedder())
    session = Session(window=WINDOW, counter="heuristic", memory=memory)
    views = run_turns(session, shipment_history())
    status = views[-1].status.memory
    assert status is not None and status.retrieval == "hybrid" and status.error is None
    assert FACT in "\n".join(b.text for b in memory_blocks(views[-1].view))
    backend.close()

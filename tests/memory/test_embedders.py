"""Dense retrieval: the OpenAI-compatible embedder against the scripted HTTP server, fallbacks, the local model."""

from __future__ import annotations

import os

import pytest
from _memory_helpers import Clock

from contextwarden.exceptions import EmbedderError
from contextwarden.memory import HashingEmbedder, LongTermMemory, MemoryRecord, OpenAIEmbedder
from contextwarden.testing import ScriptedError, ScriptedOpenAIServer
from contextwarden.testing.openai_server import hashed_embedding


def test_openai_embedder_talks_to_the_embeddings_route() -> None:
    with ScriptedOpenAIServer(embedding_dim=8) as server:
        embedder = OpenAIEmbedder("text-embed", dimension=8, base_url=server.base_url, batch_size=2)
        vectors = embedder.embed(["alpha", "beta", "alpha"])
        embedder.close()
        bodies = [r.body for r in server.received if r.path.endswith("/embeddings")]
    assert vectors[0] == pytest.approx(hashed_embedding("alpha", 8)) and vectors[0] == vectors[2]
    assert [b["input"] for b in bodies] == [["alpha", "beta"], ["alpha"]]  # type: ignore[index]
    assert all(b["model"] == "text-embed" for b in bodies)  # type: ignore[index]


def test_wrong_dimension_and_http_errors_are_embedder_errors() -> None:
    with (
        ScriptedOpenAIServer(embedding_dim=4) as server,
        OpenAIEmbedder("m", dimension=8, base_url=server.base_url) as e,
    ):
        with pytest.raises(EmbedderError, match="dimension 4"):
            e.embed(["x"])
    failing = ScriptedOpenAIServer(embed=lambda inputs: ScriptedError.server_error(503))
    with failing as server, OpenAIEmbedder("m", dimension=8, base_url=server.base_url) as e:
        with pytest.raises(EmbedderError, match="HTTP 503") as info:
            e.embed(["x"])
    assert info.value.status_code == 503


def test_dense_recall_finds_what_keywords_cannot(clock: Clock) -> None:
    # The server maps both phrasings to one vector: only the dense path can connect them.
    def embed(inputs: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] if ("feline" in t or "cat" in t) else [0.0, 1.0] for t in inputs]

    with ScriptedOpenAIServer(embed=embed) as server, OpenAIEmbedder("m", dimension=2, base_url=server.base_url) as e:
        memory = LongTermMemory(embedder=e, clock=clock, neighbours=0)
        memory.add_many([MemoryRecord(text="Ann adopted a cat named Pixel."), MemoryRecord(text="Bob fixed the CI.")])
        hits = memory.recall("which feline lives with Ann?")
    assert hits[0].memory.text.startswith("Ann adopted") and hits[0].source == "both"
    assert memory.status().retrieval == "hybrid" and memory.status().reason is None


def test_an_embedder_that_goes_down_falls_back_to_keywords_and_recovers(clock: Clock) -> None:
    server = ScriptedOpenAIServer(embedding_dim=8).start()
    embedder = OpenAIEmbedder("m", dimension=8, base_url=server.base_url, timeout=2)
    memory = LongTermMemory(embedder=embedder, clock=clock, neighbours=0)
    memory.add("the deploy key lives in vault path secret/deploy")
    port = server.url.rsplit(":", 1)[1]
    server.stop()
    stored = memory.add("the staging deploy uses blue-green")  # a failing embedder never fails the write
    hits = memory.recall("deploy key vault")
    status = memory.status()
    assert hits and hits[0].memory.text.startswith("the deploy key")
    assert status.retrieval == "keyword" and "unreachable" in (status.reason or "") and status.pending_vectors == 1
    # The embedder comes back on the same port: pending memories get their vectors.
    with ScriptedOpenAIServer(embedding_dim=8, port=int(port)):
        memory.recall("deploy")
        assert memory.status().retrieval == "hybrid" and memory.status().pending_vectors == 0
    embedder.close()
    assert stored.memory_id in memory.backend.vectors("default", "openai:m")


def test_wrong_dimension_falls_back_to_keywords(clock: Clock) -> None:
    with (
        ScriptedOpenAIServer(embedding_dim=3) as server,
        OpenAIEmbedder("m", dimension=8, base_url=server.base_url) as e,
    ):
        memory = LongTermMemory(embedder=e, clock=clock)
        memory.add("rotate the signing key every 90 days")
        hits = memory.recall("signing key")
    assert hits and memory.status().retrieval == "keyword" and "dimension 3" in (memory.status().reason or "")


def test_hashing_embedder_is_deterministic_and_unit_length() -> None:
    embedder = HashingEmbedder(dimension=32)
    a, b = embedder.embed(["deploy the parser", "deploy the parser"])
    assert a == b and sum(x * x for x in a) == pytest.approx(1.0)


REQUIRE = os.environ.get("CONTEXTWARDEN_REQUIRE_SERVICES") == "1"


@pytest.fixture(scope="module")
def minilm():  # type: ignore[no-untyped-def]
    try:
        from contextwarden.memory import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder()
    except ImportError as exc:
        if REQUIRE:
            pytest.fail(f"the packaged MiniLM model is part of the dev extra and must load: {exc}")
        pytest.skip(f"pip install 'contextwarden[embeddings]' to run this test ({exc})")


def test_packaged_minilm_embeds_offline_and_ranks_by_meaning(minilm, clock: Clock) -> None:  # type: ignore[no-untyped-def]
    assert minilm.dimension == 384
    memory = LongTermMemory(embedder=minilm, clock=clock, neighbours=0)
    memory.add_many(
        [
            MemoryRecord(text="Ann adopted a kitten from the shelter."),
            MemoryRecord(text="The quarterly revenue grew by eight percent."),
            MemoryRecord(text="Bob repaired his bicycle's flat tyre."),
        ]
    )
    hits = memory.recall("Which pet does Ann have?")
    assert hits[0].memory.text.startswith("Ann adopted") and memory.status().retrieval == "hybrid"

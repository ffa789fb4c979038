"""Long-term memory on every backend: recall, scoring, supersession, forget, tenants, bad input."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest
from _memory_helpers import Clock
from hypothesis import HealthCheck, given, settings, strategies as st

from contextwarden.exceptions import MemoryQueryError, MemoryRecordError
from contextwarden.memory import (
    HashingEmbedder,
    LongTermMemory,
    MemoryBackend,
    MemoryRecord,
    ScoreWeights,
    SQLiteMemoryBackend,
)

DAY = 86400.0


def _fill(memory: LongTermMemory) -> None:
    memory.add_many(
        [
            MemoryRecord(text="We decided to deploy with blue-green releases.", session_id="s1", position=0),
            MemoryRecord(text="The parser fails on empty headers (ticket PARSE-12).", session_id="s1", position=1),
            MemoryRecord(text="Nice weather today.", session_id="s1", position=2),
            MemoryRecord(text="The user's customer is Globex Corporation.", session_id="s1", position=3),
        ]
    )


def test_recall_finds_by_keyword_with_provenance(backend: MemoryBackend, clock: Clock) -> None:
    memory = LongTermMemory(backend, clock=clock, neighbours=0)
    stored = memory.add("The build fails with error E42 in src/app.py", session_id="s9", message_ids=("msg_1",))
    _fill(memory)
    hits = memory.recall("why does the build fail?")
    assert hits[0].memory.memory_id == stored.memory_id
    assert hits[0].memory.message_ids == ("msg_1",) and hits[0].memory.session_id == "s9"
    assert hits[0].memory.created_at == clock.now and hits[0].source == "keyword"
    assert memory.status().retrieval == "keyword" and memory.status().reason == "no embedder configured"


def test_neighbours_of_a_hit_come_after_it(backend: MemoryBackend, clock: Clock) -> None:
    memory = LongTermMemory(backend, clock=clock, neighbours=1)
    _fill(memory)
    hits = memory.recall("parser headers", limit=1)
    assert hits[0].memory.text.startswith("The parser")
    assert {h.memory.position for h in hits[1:]} == {0, 2}
    assert all(h.source == "neighbour" and h.score < hits[0].score for h in hits[1:])


def test_score_is_weighted_sum_and_recency_decays_from_last_access(backend: MemoryBackend, clock: Clock) -> None:
    weights = ScoreWeights(relevance=1.0, recency=0.5, importance=0.25, half_life=DAY)
    memory = LongTermMemory(backend, clock=clock, weights=weights, neighbours=0)
    memory.add("deploy checklist for the release", importance=0.8)
    clock.now += DAY
    (hit,) = memory.recall("deploy checklist")
    assert hit.recency == pytest.approx(0.5)
    assert hit.score == pytest.approx(1.0 * hit.relevance + 0.5 * 0.5 + 0.25 * 0.8)
    # That recall was an access: one day later recency is one half again, not one quarter.
    clock.now += DAY
    (again,) = memory.recall("deploy checklist")
    assert again.recency == pytest.approx(0.5)


def test_recency_and_importance_order_equally_relevant_memories(backend: MemoryBackend, clock: Clock) -> None:
    memory = LongTermMemory(backend, clock=clock, neighbours=0, weights=ScoreWeights(recency=0.3, importance=0.3))
    old = memory.add("release notes draft", importance=0.1)
    clock.now += 30 * DAY
    new = memory.add("release notes draft v2", importance=0.9)
    hits = memory.recall("release notes draft", touch=False)
    assert [h.memory.memory_id for h in hits] == [new.memory_id, old.memory_id]


def test_a_newer_memory_on_the_same_subject_supersedes_and_keeps_the_old(backend: MemoryBackend, clock: Clock) -> None:
    memory = LongTermMemory(backend, clock=clock, neighbours=0)
    old = memory.add("The user lives in Lisbon.", subject="user.city")
    clock.now += 10
    new = memory.add("The user moved; the user lives in Porto now.", subject="user.city")
    explicit = memory.add("Deadline is Friday.")
    replacement = memory.add("Deadline moved to Monday.", supersedes=(explicit.memory_id,))
    (kept,) = backend.get("default", [old.memory_id])
    assert kept.superseded_by == new.memory_id and not kept.current
    assert backend.get("default", [explicit.memory_id])[0].superseded_by == replacement.memory_id
    hits = memory.recall("where does the user live")
    assert hits[0].memory.memory_id == new.memory_id
    assert any(h.memory.memory_id == old.memory_id for h in hits)


def test_forget_removes_for_good(backend: MemoryBackend, clock: Clock) -> None:
    memory = LongTermMemory(backend, clock=clock, embedder=HashingEmbedder(), neighbours=0)
    gone = memory.add("secret token abc123 for staging")
    memory.add("staging deploy works")
    assert memory.forget([gone.memory_id, "missing"]) == 1
    assert all(h.memory.memory_id != gone.memory_id for h in memory.recall("secret token staging abc123"))
    assert backend.get("default", [gone.memory_id]) == []
    assert gone.memory_id not in backend.vectors("default", "hashing:256")


def test_tenants_never_see_each_other(backend: MemoryBackend, clock: Clock) -> None:
    a = LongTermMemory(backend, tenant="a", clock=clock)
    b = LongTermMemory(backend, tenant="b", clock=clock)
    a.add("alpha launch codes 1234")
    assert b.recall("alpha launch codes") == []
    assert b.status().memories == 0 and a.status().memories == 1
    assert b.forget([r.memory_id for r in backend.scan("a")]) == 0


@pytest.mark.parametrize("query", ["", "   ", "x" * 20_000, None, 42, ["list"]])
def test_bad_queries_are_typed_errors(query: object) -> None:
    memory = LongTermMemory()
    with pytest.raises(MemoryQueryError) as info:
        memory.recall(query)  # type: ignore[arg-type]
    assert info.value.field == "query"


def test_non_text_memory_is_a_typed_error() -> None:
    with pytest.raises(MemoryRecordError, match="expected a str") as info:
        LongTermMemory().add_many([MemoryRecord(text=b"bytes")])  # type: ignore[arg-type]
    assert info.value.field == "text"


def test_sqlite_memory_survives_reopening(tmp_path, clock: Clock) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "memory.db"
    first = LongTermMemory(SQLiteMemoryBackend(path), clock=clock)
    stored = first.add("the staging database password rotates monthly", message_ids=("m7",))
    first.backend.close()
    again = LongTermMemory(SQLiteMemoryBackend(path), clock=clock)
    (hit,) = again.recall("staging database password")
    assert hit.memory == stored
    assert again.backend.get("default", [stored.memory_id])[0] == dataclasses.replace(stored, last_access=clock.now)
    assert (
        hit.memory == stored.__class__(**{**stored.__dict__, "last_access": clock.now})
        or hit.memory.text == stored.text
    )
    assert hit.memory.message_ids == ("m7",)


def test_concurrent_writers_and_readers(backend: MemoryBackend, clock: Clock) -> None:
    memory = LongTermMemory(backend, clock=clock)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(20):
                memory.add(f"worker {n} note {i} about deploys")
                memory.recall("deploys note")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert memory.status().memories == 80


def test_async_twins(clock: Clock) -> None:
    memory = LongTermMemory(clock=clock)

    async def main() -> list[str]:
        await asyncio.gather(*(memory.aadd(f"async note {i} on caching") for i in range(10)))
        hits = await memory.arecall("caching note", limit=3)
        removed = await memory.aforget([h.memory.memory_id for h in hits])
        assert removed == 3
        return [h.memory.text for h in hits]

    assert len(asyncio.run(main())) == 3
    assert memory.status().memories == 7


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(st.text(st.characters(exclude_characters="\x00"), min_size=1, max_size=60), min_size=1, max_size=25),
    query=st.text(min_size=1, max_size=40),
)
def test_recall_returns_distinct_stored_memories_sorted_by_score(texts: list[str], query: str) -> None:
    memory = LongTermMemory(neighbours=1)
    stored = {
        r.memory_id
        for r in memory.add_many([MemoryRecord(text=t, session_id="s", position=i) for i, t in enumerate(texts)])
    }
    if not query.strip():
        return
    hits = memory.recall(query, limit=5)
    ids = [h.memory.memory_id for h in hits]
    assert len(ids) == len(set(ids)) and set(ids) <= stored
    primary = [h for h in hits if h.source != "neighbour"]
    assert len(primary) <= 5
    assert [h.score for h in primary] == sorted((h.score for h in primary), reverse=True)


def test_sqlite_matches_by_selective_terms_and_still_answers_common_ones(tmp_path, clock: Clock) -> None:  # type: ignore[no-untyped-def]
    memory = LongTermMemory(SQLiteMemoryBackend(tmp_path / "m.db"), clock=clock, neighbours=0)
    memory.add_many([MemoryRecord(text=f"deploy number {i} went fine") for i in range(1200)])
    rare = memory.add("the zebra deploy needs a manual approval")
    hits = memory.recall("zebra deploy approval", limit=5)
    assert hits[0].memory.memory_id == rare.memory_id
    assert len(memory.recall("deploy went fine", limit=5)) == 5

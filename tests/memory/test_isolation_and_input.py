"""Memory keeps tenants and sessions apart on every backend, and refuses bad input with typed errors."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest
from _memory_helpers import Clock
from hypothesis import given, settings, strategies as st

from contextwarden import Session
from contextwarden.exceptions import MemoryQueryError, MemoryRecordError, SchemaError
from contextwarden.memory import (
    HybridMemory,
    LongTermMemory,
    MemoryBackend,
    MemoryRecord,
    SQLiteMemoryBackend,
    clean_text,
)
from contextwarden.memory._codec import decode_record, encode_record
from contextwarden.messages import Message
from contextwarden.recall import SessionMemory

# --- sessions and tenants ----------------------------------------------------------------


def _session_with(memory: HybridMemory | LongTermMemory, *, across: bool) -> Session:
    return Session("mine", window=4000, counter="heuristic", memory=SessionMemory(memory, across_sessions=across))


@pytest.mark.parametrize("kind", ["hybrid", "long-term"])
def test_a_session_that_recalls_only_its_own_memories_sees_no_other_session(kind: str, clock: Clock) -> None:
    long_term = LongTermMemory(clock=clock)
    memory = HybridMemory(long_term) if kind == "hybrid" else long_term
    memory.add(MemoryRecord(text="Other session: the parcel id is PX-77123", session_id="theirs", tenant="default"))
    session = _session_with(memory, across=False)
    session.add([Message.user("What is the parcel id?")])
    view = "\n".join(m.text for m in session.prepare(format="internal").view)
    assert "PX-77123" not in view


def test_memories_of_other_sessions_are_labelled_as_such(clock: Clock) -> None:
    memory = HybridMemory(LongTermMemory(clock=clock))
    memory.add(MemoryRecord(text="Other session: the parcel id is PX-77123", session_id="theirs"))
    session = _session_with(memory, across=True)
    session.add([Message.user("What is the parcel id?")])
    view = "\n".join(m.text for m in session.prepare(format="internal").view)
    assert "PX-77123" in view
    assert "other sessions" in view and "session theirs" in view


def test_hybrid_recall_filters_by_session(clock: Clock) -> None:
    memory = HybridMemory(LongTermMemory(clock=clock))
    memory.add(MemoryRecord(text="the parcel id is PX-1", session_id="a"))
    memory.add(MemoryRecord(text="the parcel id is PX-2", session_id="b"))
    hits = memory.recall("parcel id", session_id="a")
    assert [h.memory.session_id for h in hits] == ["a"]


def test_one_tenants_writes_do_not_change_anothers_recall(backend: MemoryBackend, clock: Clock) -> None:
    victim = LongTermMemory(backend, tenant="victim", clock=clock, neighbours=0)
    victim.add("the deploy key for staging is kept in vault path ops/staging")
    before = [h.memory.text for h in victim.recall("where is the staging deploy key kept?")]
    noisy = LongTermMemory(backend, tenant="noisy", clock=clock, neighbours=0)
    # enough rows to make every query term "common" and to push the victim out of a shared window
    noisy.add_many([MemoryRecord(text=f"staging deploy key kept where {i}", importance=0.5) for i in range(6000)])
    after = [h.memory.text for h in victim.recall("where is the staging deploy key kept?")]
    assert before == after == ["the deploy key for staging is kept in vault path ops/staging"]


def test_keyword_scores_do_not_depend_on_other_tenants(tmp_path: Path, clock: Clock) -> None:
    backend = SQLiteMemoryBackend(tmp_path / "m.db")
    mine = LongTermMemory(backend, tenant="mine", clock=clock, neighbours=0)
    mine.add_many([MemoryRecord(text=t, importance=0.5) for t in ("alpha beta", "alpha gamma", "delta")])
    before = backend.keyword_search("mine", ["alpha"], limit=10)
    other = LongTermMemory(backend, tenant="other", clock=clock)
    other.add_many([MemoryRecord(text="alpha", importance=0.5) for _ in range(50)])
    assert backend.keyword_search("mine", ["alpha"], limit=10) == before


def test_a_shared_index_is_moved_to_per_tenant_tables(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "m.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE memory_records (seq INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL,"
        " memory_id TEXT NOT NULL, session_id TEXT, position INTEGER NOT NULL, subject TEXT, data TEXT NOT NULL,"
        " UNIQUE (tenant, memory_id));"
        "CREATE VIRTUAL TABLE memory_fts USING fts5 (tokens, tenant UNINDEXED, tokenize = 'unicode61');"
        "CREATE VIRTUAL TABLE memory_fts_vocab USING fts5vocab (memory_fts, 'row');"
    )
    record = MemoryRecord(text="the invoice number is INV-42", memory_id="m1", tenant="t", importance=0.5)
    conn.execute(
        "INSERT INTO memory_records (tenant, memory_id, session_id, position, subject, data)"
        " VALUES ('t', 'm1', NULL, 0, NULL, ?)",
        (encode_record(record),),
    )
    conn.execute("INSERT INTO memory_fts (rowid, tokens, tenant) VALUES (1, 'invoice number inv 42', 't')")
    conn.commit()
    conn.close()
    memory = LongTermMemory(SQLiteMemoryBackend(path), tenant="t", clock=clock)
    assert [h.memory.memory_id for h in memory.recall("invoice number")] == ["m1"]


# --- bad records ---------------------------------------------------------------------------


BAD_FIELDS: list[tuple[str, object]] = [
    ("importance", "high"),
    ("importance", math.nan),
    ("importance", 1.5),
    ("importance", True),
    ("created_at", math.inf),
    ("created_at", math.nan),
    ("created_at", "yesterday"),
    ("last_access", -math.inf),
    ("position", "3"),
    ("position", 10**30),
    ("position", 2.5),
    ("metadata", {"step": 3}),
    ("metadata", {3: "x"}),
    ("metadata", ["a"]),
    ("message_ids", ["m1"]),
    ("message_ids", (1,)),
    ("session_id", 7),
    ("text", "lone \ud800 surrogate"),
    ("text", "nul \x00 char"),
    ("speaker", "bad\udfff"),
    ("memory_id", ""),
]


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS, ids=[f"{f}={v!r}"[:40] for f, v in BAD_FIELDS])
def test_a_bad_field_is_refused_at_add_and_the_tenant_keeps_working(
    backend: MemoryBackend, clock: Clock, field: str, value: object
) -> None:
    memory = LongTermMemory(backend, tenant="t", clock=clock)
    memory.add("the release branch is release-7")
    fields: dict[str, object] = {"text": "a bad record about release-7", field: value}
    with pytest.raises(MemoryRecordError) as info:
        memory.add(MemoryRecord(**fields))  # type: ignore[arg-type]
    assert info.value.field == field
    assert [h.memory.text for h in memory.recall("release branch")] == ["the release branch is release-7"]


def test_a_long_single_token_is_data(backend: MemoryBackend, clock: Clock) -> None:
    memory = LongTermMemory(backend, tenant="t", clock=clock)
    blob = "Q" * 40_000
    stored = memory.add(f"the blob is {blob}")
    assert memory.backend.get("t", [stored.memory_id])[0].text == f"the blob is {blob}"
    # the word is indexed by its head: a query naming the word finds it
    assert [h.memory.memory_id for h in memory.recall(f"blob {blob[:500]}")] == [stored.memory_id]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"limit": "5"}, "limit"), ({"limit": 0}, "limit"), ({"now": math.nan}, "now"), ({"now": "soon"}, "now")],
)
def test_bad_recall_arguments_are_typed_errors(kwargs: dict[str, object], field: str, clock: Clock) -> None:
    memory = LongTermMemory(clock=clock)
    memory.add("something to find")
    with pytest.raises(MemoryQueryError) as info:
        memory.recall("something", **kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_a_corrupted_stored_record_is_a_schema_error() -> None:
    raw = encode_record(MemoryRecord(text="x", importance=0.5)).replace('"importance": 0.5', '"importance": "high"')
    with pytest.raises(SchemaError):
        decode_record(raw)


@settings(max_examples=60)
@given(st.text(alphabet=st.sampled_from(["a", "\x00", "\ud800", "\udfff", "中", " ", "é"]), max_size=40))
def test_clean_text_makes_any_text_storable(text: str) -> None:
    cleaned = clean_text(text)
    cleaned.encode("utf-8")
    assert "\x00" not in cleaned and len(cleaned) == len(text)
    MemoryRecord(text=cleaned)  # and the checks accept it
    from contextwarden.memory.checks import check_record

    check_record(MemoryRecord(text=cleaned))


def test_messages_with_unstorable_text_are_remembered_cleaned(backend: MemoryBackend, clock: Clock) -> None:
    from contextwarden.memory import from_messages

    memory = LongTermMemory(backend, tenant="t", clock=clock)
    stored = memory.add_many(from_messages([Message.user("ticket \ud800 TK-9 \x00 done")], session_id="s"))
    assert stored[0].text == "ticket \ufffd TK-9 \ufffd done"
    assert [h.memory.text for h in memory.recall("ticket TK-9")] == [stored[0].text]

"""Messages that left the view as memories: chunks, provenance, searchable context."""

from __future__ import annotations

from hypothesis import given, strategies as st

from contextwarden.memory import LongTermMemory, MemoryRecord
from contextwarden.memory.chunking import (
    CHUNK_SLOTS,
    Source,
    chunk_lines,
    content_kinds,
    memories_from_messages,
    memory_id_for,
    with_neighbour_context,
)
from contextwarden.messages import Message

TABLE = "\n".join(
    ["  id  | customer_id  | amount", "------+--------------+-------"]
    + [f" {i:>4} | cus_{i:08d} | {i}.50" for i in range(40)]
)


@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=3000), st.integers(40, 600))
def test_chunks_keep_every_line_and_their_size(text: str, max_chars: int) -> None:
    chunks = chunk_lines(text, max_chars=max_chars)
    assert all(len(c) <= max_chars for c in chunks)
    # every non-blank line is in a chunk, whole or cut into pieces in order
    assert "".join("".join(c.split("\n")) for c in chunks) == "".join(
        line for line in text.splitlines() if line.strip()
    )


def test_a_tables_header_starts_every_chunk_of_its_rows() -> None:
    chunks = chunk_lines(TABLE, max_chars=200)
    assert len(chunks) > 3
    assert all(c.startswith("  id  | customer_id") for c in chunks)
    assert "table rows record" in content_kinds(chunks[-1])


def test_kinds_name_what_outputs_show() -> None:
    assert "commit git history" in content_kinds("3b1612dd27 Mei Chen: switch refund rounding")
    assert "test tests failing passed" in content_kinds("FAILED tests/a/test_b.py::test_c - KeyError")
    assert "config configuration setting environment value" in content_kinds("REFUND_GRACE_WINDOW_S=300")
    assert "url link endpoint address" in content_kinds("Health check: https://staging.internal/healthz")
    assert content_kinds("we had lunch") == []


def test_memories_carry_provenance_the_call_and_stable_ids() -> None:
    out = Message.tool_result("c1", TABLE, name="bash", created_at=1_700_000_000.0)
    sources = [Source(index=7, message=out, task="msg_task", call="Who paid? bash psql -c ...", step=3)]
    records = memories_from_messages(sources, session_id="s1", tenant="acme", max_chars=200)
    assert len(records) > 3
    for k, r in enumerate(records):
        assert r.message_ids == (out.message_id,) and r.session_id == "s1" and r.tenant == "acme"
        assert r.created_at == 1_700_000_000.0 and r.role == "tool" and r.speaker == "bash"
        assert r.position == 7 * CHUNK_SLOTS + k and r.group == "msg_task" and r.metadata["step"] == "3"
        assert "Who paid?" in r.metadata["keywords"] and r.memory_id == memory_id_for("s1", out.message_id, k)
    again = memories_from_messages(sources, session_id="s1", tenant="acme", max_chars=200)
    assert [r.memory_id for r in again] == [r.memory_id for r in records], "writing again replaces"
    system = memories_from_messages([Source(index=0, message=Message.system("rules"))], session_id="s1", tenant="a")
    assert system == []


def test_a_reply_is_found_by_the_question_it_answers() -> None:
    turns = [
        MemoryRecord(text="What did you do last weekend?", session_id="c", position=0, group="session 1"),
        MemoryRecord(text="Went hiking with the kids!", session_id="c", position=1, group="session 1"),
        MemoryRecord(text="Nice, any plans for spring?", session_id="c", position=2, group="session 2"),
    ]
    contextual = with_neighbour_context(turns)
    assert "What did you do last weekend?" in contextual[1].metadata["keywords"]
    assert "Nice" not in contextual[1].metadata["keywords"], "context stays within the group"
    memory = LongTermMemory(neighbours=0)
    memory.add_many(contextual)
    best = memory.recall("what happened on the weekend", limit=3)
    assert "hiking" in " ".join(h.memory.text for h in best[:2])

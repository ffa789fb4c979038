"""Sensory, short-term and hybrid memory; memories made from transcript messages."""

from __future__ import annotations

from _memory_helpers import Clock

from contextwarden.memory import HybridMemory, LongTermMemory, SensoryMemory, ShortTermMemory, from_messages
from contextwarden.messages import Message, ToolCall


def test_sensory_keeps_the_latest_inputs() -> None:
    sensory = SensoryMemory(capacity=2)
    for text in ("a", "b", "c"):
        sensory.observe(text)
    assert sensory.latest() == ["b", "c"]


def test_short_term_is_bounded_and_reports_what_fell_out(clock: Clock) -> None:
    short = ShortTermMemory(capacity=2)
    memory = LongTermMemory(clock=clock)
    first, second, third = (memory.add(f"note {i} about caching") for i in range(3))
    assert short.add(first) is None and short.add(second) is None
    assert short.add(third) == first
    assert [r.memory_id for r in short.recent()] == [second.memory_id, third.memory_id]
    assert [r.memory_id for r in short.match("caching")] == [third.memory_id, second.memory_id]


def test_hybrid_lifts_recent_fragments_and_forgets_everywhere(clock: Clock) -> None:
    hybrid = HybridMemory(
        LongTermMemory(clock=clock, neighbours=0), short_term=ShortTermMemory(capacity=1), short_term_boost=0.5
    )
    old = hybrid.add("the cache key format is v2:{tenant}:{id}")
    new = hybrid.add("the cache key format changed to v3:{tenant}:{id}")
    hits = hybrid.recall("cache key format")
    assert hits[0].memory.memory_id == new.memory_id and hits[0].source == "short-term"
    assert any(h.memory.memory_id == old.memory_id and h.source != "short-term" for h in hits)
    assert hybrid.forget([new.memory_id]) == 1
    assert hybrid.short_term.recent() == [] and hybrid.status().memories == 1


def test_from_messages_keeps_provenance_and_skips_system() -> None:
    call = ToolCall(call_id="c1", name="grep", arguments='{"pattern": "TODO"}')
    messages = [
        Message.system("You are helpful."),
        Message.user("Fix the flaky test test_login_retry.", created_at=100.0),
        Message.assistant(tool_calls=[call], created_at=101.0),
        Message.tool_result("c1", "src/auth.py:12: TODO retry", name="grep", created_at=102.0),
    ]
    records = from_messages(messages, session_id="s1", tenant="t", group="round 3", start=40)
    assert [r.role for r in records] == ["user", "assistant", "tool"]
    assert [r.message_ids[0] for r in records] == [m.message_id for m in messages[1:]]
    assert [r.position for r in records] == [41, 42, 43]
    assert records[1].text.startswith("called grep(") and records[2].speaker == "grep"
    assert all(r.session_id == "s1" and r.tenant == "t" and r.group == "round 3" for r in records)
    assert records[0].created_at == 100.0

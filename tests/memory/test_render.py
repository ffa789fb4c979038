"""Rendering and packing hits into a token budget."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings, strategies as st

from contextwarden.memory import Hit, MemoryRecord, pack_hits, render_hits
from contextwarden.tokens import get_counter

COUNTER = get_counter("heuristic")


def _hit(text: str, position: int, score: float, group: str = "session 1", speaker: str = "Ann") -> Hit:
    record = MemoryRecord(
        text=text,
        session_id="s",
        position=position,
        group=group,
        speaker=speaker,
        created_at=1000.0 + position,
        metadata={"date": "8 May 2023"},
    )
    return Hit(memory=record, score=score, relevance=score, recency=0.0, importance=0.0, source="keyword")


def test_compact_rendering_groups_turns_in_spoken_order() -> None:
    hits = [_hit("second", 2, 0.9), _hit("first", 1, 0.5), _hit("other", 3, 0.4, group="session 2")]
    # one header per time: sessions said on the same day share it; a run of one speaker's lines
    # names the speaker once
    assert render_hits(hits) == "[8 May 2023]\nAnn: first\nsecond\nother"
    later = _hit("next day", 4, 0.3, group="session 3")
    later = replace(later, memory=replace(later.memory, metadata={"date": "9 May 2023"}))
    # a new header names the speaker again
    assert render_hits([*hits, later]).endswith("Ann: first\nsecond\nother\n[9 May 2023]\nAnn: next day")
    labelled = render_hits(hits[:1], style="labelled")
    assert labelled.startswith("- [8 May 2023 · ") and "score 0.90" in labelled and labelled.endswith("Ann: second")


def test_compact_rendering_names_each_change_of_speaker() -> None:
    hits = [_hit("a", 1, 0.9), _hit("b", 2, 0.8, speaker="Bob"), _hit("c", 3, 0.7), _hit("d", 4, 0.6)]
    assert render_hits(hits) == "[8 May 2023]\nAnn: a\nBob: b\nAnn: c\nd"
    # a text that opens like another speaker's label keeps its own speaker's
    quoting = [_hit("a", 1, 0.9), _hit("Bob: said so", 2, 0.8), _hit("Ideas from everywhere: people, books", 3, 0.7)]
    assert render_hits(quoting) == "[8 May 2023]\nAnn: a\nAnn: Bob: said so\nIdeas from everywhere: people, books"
    # a memory with a role and no speaker is labelled by its role
    roles = [replace(h, memory=replace(h.memory, speaker=None, role="user")) for h in hits[:2]]
    assert render_hits(roles) == "[8 May 2023]\nuser: a\nb"


def test_naming_a_speaker_once_lets_more_memories_fit() -> None:
    counter = get_counter("tiktoken:cl100k_base")
    hits = [_hit(f"I walked the dog on day {i}.", i, 1.0 - i / 100, speaker="Caroline") for i in range(40)]
    packed = pack_hits(hits, budget_tokens=120, counter=counter)
    assert counter.count_text(render_hits(packed)) <= 120
    named_each = [f"Caroline: {h.memory.text}" for h in hits]
    fit_named_each = max(
        k for k in range(len(hits)) if counter.count_text("\n".join(["[8 May 2023]", *named_each[:k]])) <= 120
    )
    assert len(packed) > fit_named_each


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.text(min_size=1, max_size=80), min_size=0, max_size=30),
    budget=st.integers(min_value=0, max_value=400),
    groups=st.integers(min_value=1, max_value=4),
)
def test_packed_hits_fit_the_budget_keep_order_and_are_a_subset(texts: list[str], budget: int, groups: int) -> None:
    hits = [_hit(t, i, 1.0 - i / 100, group=f"g{i % groups}") for i, t in enumerate(texts)]
    packed = pack_hits(hits, budget_tokens=budget, counter=COUNTER)
    assert COUNTER.count_text(render_hits(packed)) <= budget or not packed
    ids = [h.memory.memory_id for h in hits]
    positions = [ids.index(h.memory.memory_id) for h in packed]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    # Greedy: a hit left out did not fit beside the better ones chosen before it.
    if packed and len(packed) < len(hits):
        assert COUNTER.count_text(render_hits(hits)) > budget

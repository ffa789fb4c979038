"""Relevance priors: the speaker a query names, and memories that only ask."""

from __future__ import annotations

from _memory_helpers import Clock

from contextwarden.memory import LongTermMemory, MemoryBackend, MemoryRecord
from contextwarden.memory.priors import named_speakers, relevance_priors


def _turn(text: str, speaker: str, position: int) -> MemoryRecord:
    return MemoryRecord(text=text, speaker=speaker, session_id="chat", position=position, memory_id=f"t{position}")


def test_named_speakers_matches_whole_names_in_any_case() -> None:
    speakers = {"Ann", "Joanna", "Jo"}
    assert named_speakers("What did ann's sister bake?", speakers) == {"Ann"}
    assert named_speakers("When did Joanna move?", speakers) == {"Joanna"}  # not "Jo" inside "Joanna"
    assert named_speakers("Did Ann and Jo meet?", speakers) == {"Ann", "Jo"}
    assert named_speakers("What happened?", speakers) == set()


def test_the_named_speaker_ranks_above_an_equal_match_by_the_other() -> None:
    records = [_turn("I ran a marathon.", "Ann", 0), _turn("I ran a marathon.", "Bob", 1)]
    relevance = {"t0": 0.8, "t1": 0.8}
    out = relevance_priors(records, relevance, "Did Ann run a marathon?", speaker_weight=0.25, question_weight=0)
    assert out["t0"] == 0.8 and out["t1"] < 0.8
    assert all(0 <= v <= 1 for v in out.values())
    # a query naming both speakers, or none, says nothing about who answers it
    for query in ("Did Ann and Bob run?", "Who ran a marathon?"):
        assert relevance_priors(records, relevance, query, speaker_weight=0.25, question_weight=0) == relevance


def test_a_strong_match_by_the_other_speaker_still_ranks_above_a_weak_one() -> None:
    records = [_turn("marathon", "Ann", 0), _turn("marathon in Boston", "Bob", 1)]
    out = relevance_priors(records, {"t0": 0.5, "t1": 0.9}, "Ann's marathon?", speaker_weight=0.25, question_weight=0)
    assert out["t1"] > out["t0"]


def test_a_memory_that_only_asks_loses_a_share() -> None:
    records = [_turn("Why did you pick pottery?", "Bob", 0), _turn("Pottery calms me down.", "Ann", 1)]
    out = relevance_priors(records, {"t0": 0.6, "t1": 0.6}, "pottery", speaker_weight=0, question_weight=0.1)
    assert out["t1"] == 0.6 and abs(out["t0"] - 0.54) < 1e-9


def test_recall_applies_the_priors(backend: MemoryBackend, clock: Clock) -> None:
    turns = [
        _turn("Hiking with my dog is how I relax on weekends.", "Bob", 0),
        _turn("I relax with pottery on weekends.", "Ann", 1),
        _turn("How do you relax on weekends?", "Bob", 2),
    ]
    query = "How does Ann relax on weekends?"

    def relevance(**weights: float) -> dict[str, float]:
        memory = LongTermMemory(backend, clock=clock, neighbours=0, group_weight=0, **weights)
        memory.add_many(turns)
        return {h.memory.memory_id: h.relevance for h in memory.recall(query, limit=3)}

    off = relevance(speaker_weight=0, question_weight=0)
    on = relevance(speaker_weight=0.25, question_weight=0.1)
    assert on["t1"] == off["t1"]  # Ann's answer keeps its relevance
    assert abs(on["t0"] - off["t0"] / 1.25) < 1e-9  # Bob's statement is divided by 1 + 0.25
    assert abs(on["t2"] - off["t2"] / 1.25 * 0.9) < 1e-9  # Bob's question loses a tenth as well


def test_a_memory_is_found_by_the_date_it_was_said(backend: MemoryBackend, clock: Clock) -> None:
    memory = LongTermMemory(backend, clock=clock, neighbours=0)
    memory.add_many(
        [
            MemoryRecord(text="I went to a pottery class.", speaker="Ann", metadata={"date": "8 May 2023"}),
            MemoryRecord(text="I went to a painting class.", speaker="Ann", metadata={"date": "3 July 2023"}),
        ]
    )
    hits = memory.recall("What did Ann do in July?", limit=1)
    assert hits[0].memory.text == "I went to a painting class."


def test_a_name_that_addresses_a_speaker_does_not_match_a_query_about_them(
    backend: MemoryBackend, clock: Clock
) -> None:
    memory = LongTermMemory(backend, clock=clock, neighbours=0, group_weight=0, speaker_weight=0)
    memory.add_many(
        [
            _turn("Thanks, Ann! Have fun.", "Bob", 0),
            _turn("On weekends I swim with the kids, and then we bake bread together at home.", "Ann", 1),
        ]
    )
    # "Ann" in Bob's thanks is whom he speaks to: a query about Ann finds what she said
    hits = memory.recall("What does Ann do?", limit=2)
    assert hits[0].memory.memory_id == "t1"
    assert "t0" not in {h.memory.memory_id for h in hits if h.source != "dense"}

"""SessionState: what a session holds, read without reaching into its engine and without copies."""

from __future__ import annotations

import pytest

from compaction._helpers import make_text, session, tool_round
from contextwarden.exceptions import ToolPairError
from contextwarden.messages import Message
from contextwarden.session import Session
from contextwarden.stores.memory import MemoryStore


def _history(turns: int) -> list[Message]:
    out = [Message.system("You are a coding agent."), Message.user("Fix the failing test in parser.py.")]
    for i in range(turns):
        out += tool_round(f"c{i}", make_text(900, seed=i), path=f"src/mod{i}.py")
    return out


def test_the_transcript_by_length_index_and_slice() -> None:
    s, _ = session(4000)
    history = _history(3)
    s.add(history)
    state = s.state
    assert state.transcript_length == len(history)
    assert state.message(0) == history[0]
    assert state.message(-1) == history[-1]
    assert state.messages() == tuple(history)
    assert state.messages(2, 4) == tuple(history[2:4])
    assert state.messages(-2) == tuple(history[-2:])
    with pytest.raises(IndexError):
        state.message(len(history))


def test_the_transcript_stays_whole_after_compaction() -> None:
    s, _ = session(2500)
    history = _history(12)
    s.add(history)
    prepared = s.prepare(format="internal")
    state = s.state
    assert state.transcript_length == len(history)
    assert state.messages() == tuple(history)
    assert len(state.view) < len(history)  # the view was compacted; the transcript was not
    assert list(state.view) == prepared.view
    assert state.summary is None or state.summary_span is not None


def test_the_view_is_the_same_object_between_compactions() -> None:
    s, _ = session(50_000)
    s.add(_history(2))
    s.prepare()
    state = s.state
    view, generation = state.view, state.view_generation
    s.add([Message.assistant("Done.")])
    s.prepare()
    assert state.view is view and state.view_generation == generation
    assert state.view[-1].text == "Done."


def test_fresh_names_what_add_would_append_and_adds_nothing() -> None:
    s, _ = session(4000)
    history = _history(1)
    s.add(history)
    extra = Message.user("and the docs")
    assert s.state.fresh([*history, extra]) == [extra]
    assert s.state.transcript_length == len(history)
    with pytest.raises(ToolPairError):
        s.state.fresh([Message.tool_result("nowhere", "x")])
    assert s.state.transcript_length == len(history)


def test_accounting_matches_the_session() -> None:
    s, _ = session(4000)
    s.add(_history(2))
    s.prepare()
    state = s.state
    assert state.status() == s.status()
    assert state.reading().status() == s.status()
    assert state.used == s.status().used_raw
    assert state.turn == 1
    assert state.summarizer_failures == 0
    assert state.count(state.message(0)) > 0
    assert state.ledger is s.ledger
    assert state.notes is s.notes
    assert state.working_set.to_dict() == s.engine.working_set.to_dict()


def test_a_session_reloaded_from_its_store_hands_out_its_new_state() -> None:
    store = MemoryStore()
    s = Session("st", window=4000, counter="heuristic", store=store)
    s.add(_history(2))
    again = Session("st", window=4000, counter="heuristic", store=store)
    assert again.state.messages() == s.state.messages()
    assert again.state is not s.state

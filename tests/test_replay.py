"""Replay splits a transcript into model calls without losing, duplicating or reordering a message."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from contextwarden import Message, Session
from contextwarden.replay import replay_transcript, split_turns

_text = st.text(alphabet="abc XY-12", min_size=1, max_size=20)
_message = st.one_of(_text.map(Message.user), _text.map(Message.assistant))


@settings(max_examples=80, deadline=None)
@given(st.lists(_message, max_size=30))
def test_split_turns_is_a_partition_cut_before_replies(messages: list[Message]) -> None:
    chunks = split_turns(messages)
    assert [m for c in chunks for m in c] == messages
    for previous, chunk in zip(chunks, chunks[1:], strict=False):
        assert chunk and chunk[0].role == "assistant" and previous[-1].role != "assistant"


@settings(max_examples=25, deadline=None)
@given(st.lists(_message, min_size=1, max_size=25))
def test_replay_sends_one_request_per_call_and_never_more_than_it_holds(messages: list[Message]) -> None:
    run = replay_transcript(messages, lambda: Session(window=100_000, counter="heuristic"), name="x")
    assert len(run.turns) == len(split_turns(messages))
    for earlier, later in zip(run.turns, run.turns[1:], strict=False):
        assert later.reused == earlier.sent  # nothing compacts in a roomy window: each request extends the last
    assert run.prefix_reuse <= 1.0

"""Text no store can hold never makes a session unsaveable, on every backend.

A lone surrogate (half of a UTF-16 pair, raw or as the JSON escape ``\\ud83d``) cannot be
written as UTF-8. Where it is input (tool-call arguments, message text, metadata, notes) it is
refused with a typed error naming the message and field; where the library derives state from
text that legitimately carries such an escape (JSON tool outputs, a summarizer's reply), the
derived state is made storable. Either way every later compaction saves its view state.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from compaction._helpers import make_text, tool_round
from contextwarden.compaction.config import CompactionConfig
from contextwarden.exceptions import MessageError, UsageError
from contextwarden.messages import Message, TextPart, ToolCall
from contextwarden.session import Session
from contextwarden.summarize.base import SummaryRequest

from .conftest import Backend

SID = "ses_unsaveable"
OPTIONS: dict[str, Any] = {
    "window": 3000,
    "reserved_output": 0,
    "counter": "tiktoken:cl100k_base",
    "config": CompactionConfig(keep_recent_rounds=1, clear_after_rounds=1),
}
HALF = "\\ud83d"  # the JSON escape of half a pair
ESCAPED = '{"p": "' + HALF + '"}'  # arguments whose JSON decodes to half a pair
RAW = '{"p": "\ud83d"}'  # arguments holding the raw code point


def grow_until_saved(s: Session, store: Any, *, compactions: int = 2, tag: str = "r") -> int:
    """Add rounds until ``compactions`` compactions saved their state; returns the stored version."""
    saved = 0
    for i in range(40):
        s.add(tool_round(f"{tag}{i}", make_text(2500, seed=i), q=f"{tag}-{i}"))
        if s.prepare(format="internal").status.layer is not None:
            saved += 1
            if saved == compactions:
                break
    version = store.load_state(SID)[1]
    assert saved == compactions and version >= compactions
    return int(version)


def json_output(i: int) -> str:
    """A JSON tool output whose values carry escaped half surrogates (a truncated emoji, say)."""
    rows = [{"id": f"ORD-{1000 + i * 10 + k}", "note": f"cut {HALF} emoji", "k": f"{HALF}x{k}"} for k in range(40)]
    return json.dumps({"rows": rows}).replace("\\\\ud83d", HALF)


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (Message.assistant(tool_calls=[ToolCall(call_id="c", name="f", arguments=ESCAPED)]), "arguments"),
        (Message.assistant(tool_calls=[ToolCall(call_id="c", name="f", arguments=RAW)]), "arguments"),
        (Message(role="user", parts=(TextPart(text="half \udc00 a pair"),)), "parts[0].text"),
        (Message.user("fine", extra={"meta": {"tag": "x\ud83d"}}), "extra.meta.tag"),
    ],
)
def test_unstorable_input_is_refused_at_add_and_nothing_is_stored(
    sync_backend: Backend, message: Message, field: str
) -> None:
    store = sync_backend.make()
    s = Session(SID, store=store, **OPTIONS)
    s.add([Message.system("You are a test agent."), Message.user("Go.")])
    before = store.load_messages(SID)
    with pytest.raises(MessageError) as info:
        s.add([Message.user("fine"), message])
    assert info.value.index == 1 and info.value.field is not None and info.value.field.endswith(field)
    assert repr(message.message_id) in str(info.value) and "surrogate" in str(info.value)
    assert store.load_messages(SID) == before and s.transcript == before
    grow_until_saved(s, store)  # the session goes on saving


def test_json_outputs_with_escaped_half_surrogates_do_not_stop_the_saves(sync_backend: Backend) -> None:
    store = sync_backend.make()
    s = Session(SID, store=store, **OPTIONS)
    s.add([Message.system("You are a test agent."), Message.user("Go.")])
    for i in range(3):  # valid text (ASCII escapes): accepted, and kept exactly
        s.add(tool_round(f"j{i}", json_output(i), q=f"json-{i}"))
    assert HALF in s.transcript[-1].text
    version = grow_until_saved(s, store, compactions=3)
    state, _ = store.load_state(SID)
    assert state is not None and "ORD-1000" in json.dumps(state)  # the facts made it, without the halves
    again = Session(SID, store=sync_backend.make(), **OPTIONS)
    assert again.prepare(format="internal").view == s.prepare(format="internal").view
    assert store.load_state(SID)[1] == version


def test_a_note_with_a_lone_surrogate_is_refused_and_the_session_keeps_saving(sync_backend: Backend) -> None:
    store = sync_backend.make()
    s = Session(SID, store=store, **OPTIONS)
    s.add([Message.system("You are a test agent."), Message.user("Go.")])
    answer = s.handle_tool_call("write_note", '{"kind": "decision", "text": "use ' + HALF + ' region"}')
    assert answer is not None and answer.startswith("error: ") and "surrogate" in answer
    with pytest.raises(UsageError, match="surrogate"):
        s.notes.add("lesson", "raw \ud83d half")
    assert len(s.notes) == 0
    grow_until_saved(s, store)


class HalfSurrogateSummarizer:
    """A model that writes a summary with half an emoji (as small local models do)."""

    def summarize(self, request: SummaryRequest) -> str:
        ids = " ".join(sorted({w for m in request.messages for w in m.text.split() if w.startswith("ORD-")}))
        return f"Worked through the batch \ud83d; ids: {ids}"


def test_a_summary_with_a_lone_surrogate_is_saved_scrubbed(sync_backend: Backend) -> None:
    store = sync_backend.make()
    s = Session(SID, store=store, summarizer=HalfSurrogateSummarizer(), **OPTIONS)
    s.add([Message.system("You are a test agent."), Message.user("Go.")])
    grow_until_saved(s, store, compactions=4)
    state, _ = store.load_state(SID)
    assert state is not None and state["summary"] and "\ufffd" in state["summary"]

"""contextwarden's own tools (`read_context`, `write_note`) answer whatever the model sends with a text.

Arguments come from the model: NaN, Infinity, huge or negative numbers, wrong types and JSON
nested thousands deep must give an ``error: ...`` result the model can read and correct, never
a Python exception, and never change the notes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from contextwarden import Message, ToolCall
from contextwarden.notes import NOTES_TOOL
from contextwarden.session import Session
from contextwarden.snapshots import READ_CONTEXT_TOOL

READ = READ_CONTEXT_TOOL["function"]["name"]
NOTE = NOTES_TOOL["function"]["name"]
DEEP = '{"ref":' * 5000 + '"#1"' + "}" * 5000

HOSTILE_READ = [
    '{"ref": "#1", "page": Infinity}',
    '{"ref": "#1", "page": -Infinity}',
    '{"ref": "#1", "page": NaN}',
    '{"ref": "#1", "page": 1e400}',
    '{"ref": "#1", "page": ' + "9" * 5000 + "}",
    '{"ref": "#1", "page": 99999999999999999999}',
    '{"ref": "#1", "page": -3}',
    '{"ref": "#1", "page": 0}',
    '{"ref": "#1", "page": "two"}',
    '{"ref": "#1", "page": [1]}',
    '{"ref": "#1", "page": true}',
    '{"ref": "#' + "9" * 5000 + '"}',
    '{"ref": "#-1"}',
    '{"ref": "#Infinity"}',
    '{"ref": 12}',
    '{"ref": null}',
    '{"ref": ["#1"]}',
    '{"ref": "' + "x" * 100_000 + '"}',
    DEEP,
    "[" * 5000 + "]" * 5000,
    "[1, 2]",
    "not json",
    "",
    '"#1"',
]

HOSTILE_NOTES = [
    '{"resolve_id": Infinity}',
    '{"resolve_id": NaN}',
    '{"resolve_id": 1e400}',
    '{"resolve_id": ' + "9" * 5000 + "}",
    '{"resolve_id": -1}',
    '{"resolve_id": "one"}',
    '{"resolve_id": [1]}',
    '{"resolve_id": true}',
    '{"text": {"a": 1}}',
    '{"text": ["x"]}',
    '{"text": "ok", "kind": ["open"]}',
    '{"text": "ok", "kind": "bogus"}',
    '{"text": "half a pair \\ud83d here"}',
    '{"text": "' + "x" * 100_000 + '"}',
    '{"text":' * 5000 + '"x"' + "}" * 5000,
    "not json",
    "[]",
]


def session() -> Session:
    s = Session("tools", window=4000, counter="heuristic")
    call = ToolCall(call_id="c1", name="grep", arguments='{"q": "x"}')
    s.add([Message.user("find x"), Message.assistant(tool_calls=[call]), Message.tool_result("c1", "x found")])
    return s


@pytest.mark.parametrize("arguments", HOSTILE_READ, ids=lambda a: a[:40])
def test_read_context_answers_hostile_arguments_with_an_error_text(arguments: str) -> None:
    answer = session().handle_tool_call(READ, arguments)
    assert isinstance(answer, str) and answer.startswith("error: "), answer
    assert len(answer) < 600  # short enough to put in front of the model


@pytest.mark.parametrize("arguments", HOSTILE_NOTES, ids=lambda a: a[:40])
def test_write_note_answers_hostile_arguments_with_an_error_text_and_keeps_the_notes(arguments: str) -> None:
    s = session()
    s.handle_tool_call(NOTE, '{"kind": "open", "text": "Ask about SSO."}')
    before = s.notes.to_dict()
    answer = s.handle_tool_call(NOTE, arguments)
    assert isinstance(answer, str) and answer.startswith("error: "), answer
    assert s.notes.to_dict() == before


def test_mapping_arguments_are_checked_like_json_text() -> None:
    s = session()
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(5000):
        node["ref"] = {}
        node = node["ref"]
    assert s.handle_tool_call(READ, deep).startswith("error: the arguments nest deeper")  # type: ignore[union-attr]
    assert s.handle_tool_call(READ, {"ref": "#1", "page": float("inf")}).startswith("error: page")  # type: ignore[union-attr]
    assert s.handle_tool_call(NOTE, {"resolve_id": float("nan")}).startswith("error: resolve_id")  # type: ignore[union-attr]
    assert s.handle_tool_call(NOTE, {"text": "half \ud83d"}).startswith("error: ")  # type: ignore[union-attr]


def test_good_arguments_still_work_in_every_spelling() -> None:
    s = session()
    page = s.read_context("#1")
    assert s.handle_tool_call(READ, '{"ref": "#1"}') == page
    assert s.handle_tool_call(READ, '{"ref": "#1", "page": 1.0}') == page
    assert s.handle_tool_call(READ, {"ref": " #1 ", "page": "1"}) == page
    assert s.handle_tool_call(NOTE, '{"kind": "open", "text": "Pick a region."}') == "noted #1 (open)"
    assert s.handle_tool_call(NOTE, '{"resolve_id": "1"}') == "resolved #1"


@settings(max_examples=150, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats()
        | st.text(max_size=20)
        | st.sampled_from(["#1", "#0", "#-1", "snap_" + "0" * 24]),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["ref", "page", "x"]), inner),
        max_leaves=10,
    )
)
def test_any_json_arguments_get_a_text_answer(value: Any) -> None:
    s = session()
    for arguments in (json.dumps(value), value if isinstance(value, dict) else {"ref": value, "page": value}):
        for tool in (READ, NOTE):
            answer = s.handle_tool_call(tool, arguments)
            assert isinstance(answer, str)

from __future__ import annotations

import json

import pytest

from contextwarden.exceptions import ConfigError, SchemaError, UsageError
from contextwarden.notes import NOTES_TOOL, Notes
from contextwarden.tokens import get_counter

CL100K = get_counter("tiktoken:cl100k_base")


def test_add_list_resolve_remove() -> None:
    notes = Notes()
    d = notes.add("decision", "Use PostgreSQL 16 for the queue.", turn=3, source_ids=("m7",))
    assert notes.add("decision", "Use  PostgreSQL 16 for the queue. ") is d  # same text once
    notes.add("subtask", "Migrated table orders (migration 0042).")
    notes.add("lesson", "pytest -x hides the second failure; run the whole file.")
    item = notes.add("open", "Ask which region to deploy to.")
    assert [n.kind for n in notes.list()] == ["decision", "subtask", "lesson", "open"]
    assert notes.list("decision") == [d] and d.turn == 3 and d.source_ids == ("m7",)
    version = notes.version
    notes.resolve(item.note_id)
    assert notes.version == version + 1
    assert notes.list("open") == []
    assert notes.list("open", include_resolved=True)[0].resolved
    notes.remove(d.note_id)
    assert notes.list("decision") == []
    with pytest.raises(UsageError, match="no open item with id 99"):
        notes.resolve(99)
    with pytest.raises(UsageError):
        notes.remove(99)
    with pytest.raises(ConfigError, match="kind"):
        notes.add("idea", "x")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        notes.add("lesson", "   ")


def test_render_within_budget_by_precedence() -> None:
    notes = Notes()
    for i in range(40):
        notes.add("subtask", f"Finished subtask {i}: updated module_{i}.py and its tests.")
    notes.add("decision", "Keep the v1 API until 2025-01-31.")
    notes.add("open", "Confirm the budget of 40 EUR with finance.")
    full = notes.render(max_tokens=5000, counter=CL100K)
    assert full.startswith("[Notes kept across compactions]")
    assert full.index("Open items:") < full.index("Decisions:") < full.index("Finished subtasks:")
    small = notes.render(max_tokens=120, counter=CL100K)
    assert CL100K.count_text(small) <= 120
    assert "Confirm the budget of 40 EUR" in small and "Keep the v1 API until 2025-01-31." in small
    assert "Finished subtask 39" in small and "Finished subtask 0:" not in small  # newest kept
    assert "older notes not shown" in small
    assert notes.render(max_tokens=5) == ""
    assert Notes().render(max_tokens=100) == ""
    assert notes.render(max_tokens=300) == notes.render(max_tokens=300)
    assert notes.render(max_tokens=300, counter=CL100K.count_text) == notes.render(max_tokens=300, counter=CL100K)


def test_json_round_trip() -> None:
    notes = Notes()
    notes.add("decision", "Use PostgreSQL 16.", turn=1, source_ids=("a", "b"))
    item = notes.add("open", "Pick a region.")
    notes.resolve(item.note_id)
    data = json.loads(json.dumps(notes.to_dict()))
    again = Notes.from_dict(data)
    assert again.list(include_resolved=True) == notes.list(include_resolved=True)
    assert again.add("lesson", "new").note_id == 3
    with pytest.raises(SchemaError, match=r"notes\.notes\[0\]\.kind"):
        Notes.from_dict({"notes": [{"note_id": 1, "kind": "bogus", "text": "x"}]})


def test_tool_call() -> None:
    notes = Notes()
    assert NOTES_TOOL["function"]["name"] == "write_note"
    assert notes.handle_tool_call('{"kind": "open", "text": "Ask about SSO."}') == "noted #1 (open)"
    assert notes.handle_tool_call({"resolve_id": 1, "kind": "decision", "text": "SSO via Okta."}) == (
        "resolved #1; noted #2 (decision)"
    )
    assert notes.handle_tool_call("not json").startswith("error: the arguments text is not valid JSON")
    assert notes.handle_tool_call('{"resolve_id": 7}').startswith("error: no open item")
    assert notes.handle_tool_call("{}").startswith("error:")

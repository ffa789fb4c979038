"""Structured notes: written through the session's tool, shown in the context block after compaction."""

from __future__ import annotations

import json

from contextwarden import Message, ToolCall
from contextwarden.notes import NOTES_TOOL
from contextwarden.session import Session


def _tool_round(i: int, size: int = 1600) -> list[Message]:
    call = ToolCall(call_id=f"c{i}", name="read_file", arguments=json.dumps({"path": f"src/mod_{i}.py"}))
    body = "\n".join(f"line {j} of module {i}: value={i * 100 + j}" for j in range(size // 30))
    return [Message.assistant(tool_calls=[call]), Message.tool_result(f"c{i}", body, name="read_file")]


def test_notes_written_by_the_tool_survive_compaction() -> None:
    s = Session("notes", window=3000, reserved_output=0, counter="tiktoken:cl100k_base")
    s.add([Message.system("You are a coding agent."), Message.user("Fix the parser.")])
    answer = s.handle_tool_call(
        NOTES_TOOL["function"]["name"],
        json.dumps({"kind": "decision", "text": "Use parser v2 (ticket PAY-1432) instead of patching v1."}),
    )
    assert answer == "noted #1 (decision)"
    assert len(s.notes) == 1
    compacted = False
    for i in range(12):
        s.add(_tool_round(i))
        view = s.prepare(format="internal")
        compacted = compacted or bool(view.status.compactions)
    assert compacted
    block = next(m for m in view.view if m.extra.get("contextwarden") == "context")
    assert "PAY-1432" in block.text
    # the note is part of the saved view state
    state = s.engine.export_state()
    assert state["notes"]["notes"][0]["text"].startswith("Use parser v2")


def test_other_tools_are_left_to_the_caller() -> None:
    s = Session("notes", window=3000, counter="heuristic")
    assert s.handle_tool_call("run_tests", "{}") is None

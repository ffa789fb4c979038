"""A single request or reply larger than the whole budget is offloaded to a preview; it never wedges the view."""

from __future__ import annotations

import re

import pytest

from contextkeeper import Message, Session, ToolCall
from contextkeeper.toolpairs import validate


def _snapshot_of(view: list[Message]) -> str:
    found = re.findall(r'read_context\("(snap_[0-9a-f]+)"\)', "\n".join(m.text for m in view))
    assert found, "the preview names the snapshot with the full message"
    return found[-1]


@pytest.mark.parametrize("role", ["user", "assistant"])
def test_an_oversized_message_becomes_a_preview_and_reads_back_whole(role: str) -> None:
    session = Session("big", window=2000, reserved_output=0)
    huge = "alpha beta gamma delta\n" * 2000  # ~10,000 tokens: five times the budget
    session.add([Message.system("sys"), Message.user("hello"), Message.assistant("hi")])
    session.add([Message.user(huge)] if role == "user" else [Message.user("go"), Message.assistant(huge)])
    view = session.prepare(format="internal").view
    assert session.status().used <= session.budget.effective
    assert view[0].role == "system" and not validate(view)
    page = session.handle_tool_call("read_context", {"ref": _snapshot_of(view)})
    assert "alpha beta gamma delta" in page and "error" not in page.split("\n", 1)[0]
    assert session.transcript[-1].text == huge, "the transcript keeps the message whole"


def test_an_oversized_reply_with_a_tool_call_keeps_its_call_and_result_paired() -> None:
    session = Session("big-call", window=2000, reserved_output=0)
    call = Message.assistant("x " * 9000, tool_calls=[ToolCall(call_id="c1", name="ls", arguments="{}")])
    session.add([Message.system("sys"), Message.user("go"), call, Message.tool_result("c1", "a.py")])
    view = session.prepare(format="internal").view
    assert not validate(view)
    assert any(m.tool_calls for m in view) and any(m.role == "tool" for m in view)
    assert session.status().used <= session.budget.effective

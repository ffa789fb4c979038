"""`check_message` on one-text messages: its fast path refuses exactly what the full check refuses."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, strategies as st

from contextkeeper.exceptions import MessageError
from contextkeeper.messages import ROLES, Message, TextPart, ToolCall, check_message

texts = st.one_of(
    st.text(alphabet=st.characters(max_codepoint=127), max_size=40),  # ASCII: the fast path
    st.text(max_size=40),  # any text, lone surrogates included
    st.just("half a pair \ud800 here"),
)
roles = st.sampled_from([*sorted(ROLES), "robot", "Tool"])


def expected_error(role: str, text: str, call_id: str | None) -> str | None:
    if role not in ROLES:
        return "role"
    if role == "tool" and not call_id:
        return "tool_call_id"
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return "parts[0].text"
    return None


@given(roles, texts, st.sampled_from([None, "", "call_1"]))
def test_one_text_messages_are_refused_exactly_when_they_are_invalid(role: str, text: str, call_id: Any) -> None:
    message = Message(role=role, parts=(TextPart(text=text),), tool_call_id=call_id)  # type: ignore[arg-type]
    field = expected_error(role, text, call_id)
    if field is None:
        assert check_message(message, index=3) is message
    else:
        with pytest.raises(MessageError) as info:
            check_message(message, index=3)
        assert info.value.field == field
        assert "message 3" in str(info.value)


def test_a_non_string_text_is_refused_with_its_field() -> None:
    message = Message(role="user", parts=(TextPart(text=b"bytes"),))  # type: ignore[arg-type]
    with pytest.raises(MessageError, match="must be a string"):
        check_message(message, index=0)


def test_tool_calls_are_cached_and_equal_to_the_parts() -> None:
    call = ToolCall(call_id="c1", name="grep", arguments='{"q": "x"}')
    message = Message.assistant("looking", tool_calls=[call])
    assert message.tool_calls == (call,)
    assert message.tool_calls is message.tool_calls  # built once
    assert Message.user("hi").tool_calls == ()

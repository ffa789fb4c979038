"""`check_message` on common messages (ASCII text, tool calls): its fast path refuses exactly what
the full check refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, strategies as st

from contextwarden.exceptions import MessageError
from contextwarden.messages import ROLES, Message, TextPart, ToolCall, check_message

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


# --- text no store can keep, JSON no parser should recurse into ----------------------------------
DEEP_ARGUMENTS = '{"a":' * 5000 + "1" + "}" * 5000


def assistant_call(arguments: str) -> Message:
    return Message.assistant(tool_calls=[ToolCall(call_id="c1", name="grep", arguments=arguments)], message_id="m7")


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ('{"p": "\\ud83d"}', "lone surrogate"),  # an escape that decodes to half a pair
        ('{"p": ["x", "\\uDC00"]}', "lone surrogate"),
        ('{"p": "\ud83d"}', "lone surrogate"),  # the raw code point
        (DEEP_ARGUMENTS, "deeper than 100 levels"),
        ("[" * 5000 + "]" * 5000, "deeper than 100 levels"),
        ('{"n": ' + "9" * 5000 + "}", "cannot be read"),
    ],
)
def test_tool_arguments_no_store_can_keep_are_refused_with_the_message_and_field(arguments: str, problem: str) -> None:
    with pytest.raises(MessageError, match=problem) as info:
        check_message(assistant_call(arguments), index=4)
    assert info.value.field == "parts[0].arguments" and info.value.index == 4
    assert "message 4 ('m7')" in str(info.value)


def test_a_whole_escaped_pair_and_brackets_in_strings_are_fine() -> None:
    check_message(assistant_call('{"p": "\\ud83d\\ude00", "q": "' + "[" * 300 + '"}'), index=0)


call_arguments = st.one_of(
    st.dictionaries(st.text(max_size=8), st.text(max_size=12) | st.integers(), max_size=3).map(json.dumps),
    st.just(""),
    st.text(alphabet='{}[]":,\\u0123456789abcdDEF ', max_size=30),  # mostly not JSON, some escapes
    st.sampled_from(['{"p": "\\ud83d"}', '{"p": "\\ud83d\\ude00"}', '{"p": "caf\u00e9"}']),
)


def parses_to_storable(arguments: str) -> bool:
    if not arguments:
        return True
    try:
        value = json.loads(arguments)
    except ValueError:
        return False
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in json.dumps(value, ensure_ascii=False))


@given(st.sampled_from(["assistant", "user", "tool"]), call_arguments)
def test_tool_call_messages_are_refused_exactly_when_they_are_invalid(role: str, arguments: str) -> None:
    call = ToolCall(call_id="c1", name="grep", arguments=arguments)
    message = Message(role=role, parts=(TextPart(text="looking"), call), tool_call_id="c0" if role == "tool" else None)  # type: ignore[arg-type]
    if role == "assistant" and parses_to_storable(arguments):
        assert check_message(message, index=2) is message
    else:
        with pytest.raises(MessageError) as info:
            check_message(message, index=2)
        assert info.value.field == ("parts[1]" if role != "assistant" else "parts[1].arguments")


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"note": "half \ud83d"}, "extra.note"),
        ({"score": float("nan")}, "extra.score"),
        ({"obj": object()}, "extra.obj"),
        ({"deep": json.loads('{"a":' * 150 + "1" + "}" * 150)}, "extra.deep" + ".a" * 100),
    ],
)
def test_metadata_must_be_storable_json(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(MessageError, match="extra") as info:
        check_message(Message.user("hi", extra=extra, message_id="m1"), index=0)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"message_id": "m\ud800"}, "message_id"),
        ({"message_id": ""}, "message_id"),
        ({"message_id": 7}, "message_id"),
        ({"name": "n\udfff"}, "name"),
    ],
)
def test_ids_and_names_are_checked_like_text(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(MessageError) as info:
        check_message(Message(role="user", parts=(TextPart(text="hi"),), **changes), index=0)
    assert info.value.field == field


def test_messages_keep_their_attribute_keys_in_one_order_whatever_they_compute_first() -> None:
    # A long session keeps thousands of messages: instances whose attribute dicts gain keys in one
    # order share one key table; an instance that gains them in another order gets a dict of its own.
    from contextwarden.tokens import get_counter
    from contextwarden.tokens.accountant import TokenAccountant

    accountant = TokenAccountant(get_counter("heuristic"))
    call = Message(role="assistant", parts=(ToolCall(call_id="c1", name="read", arguments="{}"),))
    result = Message.tool_result("c1", "file contents", name="read")
    user = Message.user("hello")
    accountant.count_message(result, shared=False)  # the count first
    _ = result.content_hash
    _ = call.content_hash  # the hash first
    _ = call.tool_calls
    accountant.count_message(call, shared=False)
    _ = user.tool_calls  # the tool calls first
    accountant.count_message(user)
    assert list(result.__dict__) == list(call.__dict__) == list(user.__dict__) == list(Message.user("x").__dict__)

"""Format detection, and what each format's fields become."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from contextwarden.adapters import detect_format, from_messages, openai_chat, to_messages
from contextwarden.messages import ImagePart, Message, TextPart, ThinkingPart, ToolCall


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([], "openai"),
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "openai"),
        ([{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}], "openai"),
        ([{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "c", "content": "r"}], "openai"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}], "openai"),
        (
            [
                {"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": ""},
            ],
            "responses",
        ),
        ([{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}], "responses"),
        ([{"type": "message", "role": "user", "content": "hi"}], "responses"),
        ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]}], "anthropic"),
        ([{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "u"}}]}], "anthropic"),
        ([Message.user("x"), {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}]}], "anthropic"),
        ([HumanMessage("hi")], "langchain"),
    ],
)
def test_detect_format(items, expected):
    assert detect_format(items) == expected
    to_messages(items)  # the detected format reads the list


def test_openai_fields():
    items = [
        {"role": "developer", "content": "rules", "name": "ops"},
        {
            "role": "user",
            "id": "u1",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "https://x/c.png", "detail": "low"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "look", "arguments": '{"zoom": 2}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
    ]
    dev, user, assistant, tool = to_messages(items)
    assert (dev.role, dev.name, dev.text) == ("developer", "ops", "rules")
    assert user.message_id == "u1"
    assert user.parts == (TextPart(text="what is this?"), ImagePart(url="https://x/c.png", detail="low"))
    assert assistant.parts == (ToolCall(call_id="c1", name="look", arguments='{"zoom": 2}'),)
    assert assistant.tool_calls[0].parsed_arguments() == {"zoom": 2}
    assert (tool.tool_call_id, tool.name, tool.text) == ("c1", "look", "a cat")  # name from its call
    assert openai_chat.from_messages([dev, user, assistant, tool]) == items


def test_openai_plain_rendering_of_messages_built_in_code():
    call = ToolCall(call_id="c", name="f", arguments="{}")
    assert from_messages(
        [
            Message.user("u"),
            Message.assistant(tool_calls=[call]),
            Message.tool_result("c", "r", name="f"),
            Message.assistant("a"),
        ],
        format="openai",
    ) == [
        {"role": "user", "content": "u"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "r", "tool_call_id": "c"},
        {"role": "assistant", "content": "a"},
    ]


def test_anthropic_fields():
    items = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "plan", "signature": "sig=="},
                {"type": "tool_use", "id": "t1", "name": "run", "input": {"cmd": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True}],
        },
    ]
    user, assistant, tool = to_messages(items, format="anthropic")
    assert assistant.parts == (
        ThinkingPart(text="plan", signature="sig=="),
        ToolCall(call_id="t1", name="run", arguments='{"cmd": "ls"}'),
    )
    assert (tool.role, tool.tool_call_id, tool.name, tool.is_error, tool.text) == ("tool", "t1", "run", True, "boom")
    assert from_messages([user, assistant, tool], format="anthropic") == items


def test_langchain_fields():
    items = [
        SystemMessage("be kind", additional_kwargs={"__openai_role__": "developer"}),
        HumanMessage("hi", id="h-1"),
        AIMessage("", tool_calls=[{"name": "f", "args": {"a": 1}, "id": "c1"}], id="ai-1"),
        ToolMessage("failed", tool_call_id="c1", status="error", name="f"),
    ]
    dev, user, ai, tool = to_messages(items)
    assert dev.role == "developer"
    assert (user.message_id, ai.message_id) == ("h-1", "ai-1")
    assert ai.parts == (ToolCall(call_id="c1", name="f", arguments='{"a": 1}'),)
    assert (tool.is_error, tool.name) == (True, "f")
    assert from_messages([dev, user, ai, tool], format="langchain") == items


def test_ids_are_generated_when_the_source_has_none_and_never_written_back():
    (m,) = to_messages([{"role": "user", "content": "hi"}])
    assert m.message_id.startswith("msg_")
    assert from_messages([m], format="openai") == [{"role": "user", "content": "hi"}]

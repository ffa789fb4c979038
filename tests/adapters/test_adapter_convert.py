"""Converting between formats, and what happens to hints when compaction rewrites a message."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings, strategies as st

from contextwarden.adapters import FORMATS, anthropic, from_messages, to_messages
from contextwarden.messages import ImagePart, Message, TextPart, ThinkingPart, ToolCall
from contextwarden.toolpairs import validate

WORD = st.sampled_from(["hello", "读取文件", "a\nb", "🙂", "x" * 30])


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Messages built in code (no hints): texts, images, parallel calls with results."""
    msgs: list[Message] = []
    if draw(st.booleans()):
        msgs.append(Message(role=draw(st.sampled_from(["system", "developer"])), parts=(TextPart(text=draw(WORD)),)))
    n = iter(range(1000))
    for _ in range(draw(st.integers(0, 4))):
        parts = [TextPart(text=t) for t in draw(st.lists(WORD, min_size=1, max_size=2))]
        if draw(st.booleans()):
            parts.append(ImagePart(url="https://x/a.png"))
        msgs.append(Message(role="user", parts=tuple(parts)))
        for _ in range(draw(st.integers(0, 2))):
            calls = [
                ToolCall(call_id=f"c{next(n)}", name="grep", arguments='{"q": 1}')
                for _ in range(draw(st.integers(1, 3)))
            ]
            msgs.append(Message.assistant(draw(st.sampled_from(["", "checking"])), tool_calls=calls))
            for call in calls:
                msgs.append(Message.tool_result(call.call_id, draw(WORD), name=call.name, is_error=draw(st.booleans())))
        if draw(st.booleans()):
            msgs.append(Message.assistant(draw(WORD)))
    return msgs


def semantics(messages: list[Message], fmt: str) -> list[tuple]:
    out = []
    for m in messages:
        role = "system" if fmt == "anthropic" and m.role == "developer" else m.role
        error = m.is_error if fmt in ("anthropic", "langchain") else None
        out.append((role, m.parts, m.tool_call_id, m.name if m.role == "tool" else None, error))
    return out


@settings(max_examples=200)
@given(histories(), st.sampled_from(FORMATS))
def test_messages_built_in_code_survive_every_format(msgs, fmt):
    back = to_messages(from_messages(msgs, format=fmt), format=fmt)
    assert semantics(back, fmt) == semantics(msgs, fmt)
    assert validate(back) == validate(msgs) == []


@settings(max_examples=200)
@given(histories(), st.sampled_from(FORMATS), st.sampled_from(FORMATS))
def test_any_format_converts_to_any_other(msgs, a, b):
    via_a = to_messages(from_messages(msgs, format=a), format=a)
    via_b = to_messages(from_messages(via_a, format=b), format=b)
    lossy = {a, b} - {"anthropic", "langchain"}
    expected = semantics(msgs, "anthropic" if "anthropic" in (a, b) else b)
    got = semantics(via_b, "anthropic" if "anthropic" in (a, b) else b)
    if lossy:  # is_error is not carried by the OpenAI formats
        expected = [t[:4] for t in expected]
        got = [t[:4] for t in got]
    assert got == expected


def test_openai_tool_results_merge_into_one_anthropic_user_message():
    chat = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "look"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "grep", "arguments": '{"q": "x"}'}},
                {"id": "b", "type": "function", "function": {"name": "read", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "found"},
        {"role": "tool", "tool_call_id": "b", "content": "text"},
        {"role": "user", "content": "and?"},
    ]
    system, out = anthropic.from_messages(to_messages(chat, format="openai"))
    assert system == "be brief"
    assert out == [
        {"role": "user", "content": "look"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "a", "name": "grep", "input": {"q": "x"}},
                {"type": "tool_use", "id": "b", "name": "read", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "found"},
                {"type": "tool_result", "tool_use_id": "b", "content": "text"},
                {"type": "text", "text": "and?"},
            ],
        },
    ]
    # And back: the merged user message splits into two tool messages and a user message.
    back = anthropic.to_messages(out, system=system)
    assert [(m.role, m.tool_call_id, m.name) for m in back] == [
        ("system", None, None),
        ("user", None, None),
        ("assistant", None, None),
        ("tool", "a", "grep"),
        ("tool", "b", "read"),
        ("user", None, None),
    ]
    assert from_messages(back, format="openai") == [
        {"role": "system", "content": "be brief"},
        *chat[1:3],
        {"role": "tool", "tool_call_id": "a", "content": "found"},
        {"role": "tool", "tool_call_id": "b", "content": "text"},
        {"role": "user", "content": "and?"},
    ]


def test_thinking_is_written_only_to_its_own_provider():
    items = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "hmm", "signature": "sig"}, {"type": "text", "text": "a"}],
        },
    ]
    msgs = to_messages(items, format="anthropic")
    assert msgs[1].parts[0] == ThinkingPart(text="hmm", signature="sig")
    assert from_messages(msgs, format="openai")[1] == {"role": "assistant", "content": "a"}
    assert from_messages(msgs, format="responses")[1] == {"type": "message", "role": "assistant", "content": "a"}
    assert from_messages(msgs, format="anthropic") == items
    # Thinking built in code has no provider, so no signature any provider would accept.
    built = Message(role="assistant", parts=(ThinkingPart(text="t", signature="s"), TextPart(text="a")))
    assert anthropic.from_messages([built])[1] == [{"role": "assistant", "content": "a"}]


def test_responses_reasoning_stays_with_its_function_calls():
    items = [
        {"type": "message", "role": "user", "content": "go"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "grep", "arguments": "{}"},
        {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "grep", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "two"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
    ]
    msgs = to_messages(items)
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "tool"]
    assert msgs[1].message_id == "rs_1"
    assert [p.kind for p in msgs[1].parts] == ["thinking", "tool-call", "tool-call"]
    assert msgs[1].parts[0] == ThinkingPart(text="", signature="gAAA")
    assert [m.name for m in msgs[2:]] == ["grep", "grep"]
    assert validate(msgs) == []
    assert from_messages(msgs, format="responses") == items


def test_rewritten_content_wins_over_recorded_hints():
    items = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "long log " * 50, "cache_control": {"type": "ephemeral"}}],
            "x_trace": "t1",
        },
        {"role": "tool", "tool_call_id": "c1", "name": "grep", "content": "very long output"},
    ]
    msgs = to_messages(items, format="openai")
    cleared = [m.with_text("[cleared: see snapshot s1]") for m in msgs]
    out = from_messages(cleared, format="openai")
    # The old text never comes back; keys the model has no field for stay.
    assert out[0] == {
        "role": "user",
        "content": [{"type": "text", "text": "[cleared: see snapshot s1]"}],
        "x_trace": "t1",
    }
    assert out[1] == {"role": "tool", "tool_call_id": "c1", "name": "grep", "content": "[cleared: see snapshot s1]"}
    # Unchanged messages still come back exactly.
    assert from_messages([replace(msgs[0], pinned=True)], format="openai") == items[:1]


def test_rewritten_responses_turn_falls_back_to_the_plain_items():
    items = [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}]},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "I will grep.", "annotations": []}],
        },
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "grep", "arguments": "{}"},
    ]
    (turn,) = to_messages(items, format="responses")
    assert turn.message_id == "rs_1"
    out = from_messages([turn.with_text("grep")], format="responses")
    assert out == [
        {"type": "message", "role": "assistant", "content": "grep"},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "grep", "arguments": "{}"},
    ]
    # A dropped call (tool-pair repair) keeps the reasoning item and the other call as they were.
    items += [
        {
            "type": "function_call",
            "id": "fc_2",
            "call_id": "c2",
            "name": "grep",
            "arguments": "{}",
            "status": "completed",
        }
    ]
    (turn,) = to_messages(items, format="responses")
    fewer = replace(turn, parts=tuple(p for p in turn.parts if getattr(p, "call_id", None) != "c1"))
    assert from_messages([fewer], format="responses") == [items[0], items[1], items[3]]


def test_anthropic_user_text_before_a_tool_result_keeps_its_place():
    items = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "note"}, {"type": "tool_result", "tool_use_id": "t", "content": "r"}],
        },
        {"role": "user", "content": "separate"},
    ]
    msgs = to_messages(items, format="anthropic")
    assert [m.role for m in msgs] == ["assistant", "user", "tool", "user"]
    assert [p.kind for p in validate(msgs)] == ["out-of-order"]
    assert from_messages(msgs, format="anthropic") == items


def test_base64_images_become_data_urls_and_back():
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}}
    (m,) = to_messages([{"role": "user", "content": [block]}], format="anthropic")
    assert m.parts == (ImagePart(url="data:image/jpeg;base64,/9j/4AAQ", media_type="image/jpeg"),)
    assert from_messages([m], format="openai") == [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}}]}
    ]
    assert anthropic.from_messages([replace(m, extra={})])[1] == [{"role": "user", "content": [block]}]


def test_langchain_keeps_a_call_whose_arguments_are_not_an_object_as_an_invalid_tool_call():
    for arguments in ["[1, 2]", '"text"', '{"path": "src/a']:
        call = ToolCall(call_id="c1", name="read_file", arguments=arguments)
        (out,) = from_messages([Message.assistant("", tool_calls=[call])], format="langchain")
        assert out.tool_calls == []
        assert [(c["id"], c["name"], c["args"]) for c in out.invalid_tool_calls] == [("c1", "read_file", arguments)]

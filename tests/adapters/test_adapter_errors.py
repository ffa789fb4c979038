"""Bad input: a typed error naming the item, the field and the fix; the input left as it was."""

from __future__ import annotations

import copy
import sys

import pytest

from contextwarden.adapters import anthropic, from_messages, langchain, to_messages
from contextwarden.exceptions import ContextWardenError, MessageError, UsageError
from contextwarden.messages import Message

CALL = {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
SURROGATE = "bad \ud800 text"


def nested(levels: int) -> dict[str, object]:
    root: dict[str, object] = {}
    node = root
    for _ in range(levels):
        child: dict[str, object] = {}
        node["a"] = child
        node = child
    return root


DEEP = nested(150)  # deeper than accepted, shallow enough for the test's own deepcopy
DEEP_TEXT = '{"a":' * 5000 + "1" + "}" * 5000

CASES = [
    # (format, items, index, field, words the message must contain)
    (
        "openai",
        [{"role": "user", "content": "hi"}, {"role": "robot", "content": "x"}],
        1,
        "role",
        ["'robot'", "one of"],
    ),
    ("openai", [{"role": "function", "name": "f", "content": "x"}], 0, "role", ["legacy", "'tool'"]),
    (
        "openai",
        [{"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}}],
        0,
        "function_call",
        ["tool_calls"],
    ),
    ("openai", [{"role": "user", "content": 42}], 0, "content", ["int", "string"]),
    ("openai", [{"role": "user", "content": {"text": "hi"}}], 0, "content", ["dict"]),
    ("openai", [{"role": "user", "content": [{"type": "text", "text": 7}]}], 0, "content[0].text", ["int"]),
    ("openai", [{"role": "user", "content": ["hi"]}], 0, "content[0]", ["content part"]),
    ("openai", [{"role": "user", "content": SURROGATE}], 0, "content", ["lone surrogate", "errors='replace'"]),
    (
        "openai",
        [{"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "g", "arguments": "{oops"}}]}],
        0,
        "tool_calls[0].function.arguments",
        ["not valid JSON", "json.dumps"],
    ),
    (
        "openai",
        [{"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "g", "arguments": {"a": 1}}}]}],
        0,
        "tool_calls[0].function.arguments",
        ["JSON text"],
    ),
    (
        "openai",
        [{"role": "assistant", "tool_calls": [{**CALL, "type": "custom"}]}],
        0,
        "tool_calls[0].type",
        ["function"],
    ),
    ("openai", [{"role": "tool", "content": "x"}], 0, "tool_call_id", ["non-empty string"]),
    ("openai", [{"role": "user", "tool_calls": [CALL]}], 0, "tool_calls", ["assistant"]),
    ("openai", [{"content": "no role"}], 0, "role", ["not an OpenAI chat message"]),
    ("openai", ["just a string"], 0, "(item)", ["str", "dict"]),
    ("responses", [{"type": "item_reference", "id": "x"}], 0, "type", ["item_reference", "function_call"]),
    ("responses", [{"foo": 1}], 0, "type", ["not a Responses input item"]),
    ("responses", [{"type": "message", "role": "tool", "content": "x"}], 0, "role", ["'tool'"]),
    (
        "responses",
        [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "nope"}],
        0,
        "arguments",
        ["not valid JSON"],
    ),
    ("responses", [{"type": "function_call_output", "output": "x"}], 0, "call_id", ["non-empty"]),
    (
        "responses",
        [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": None}]}],
        0,
        "content[0].text",
        ["NoneType"],
    ),
    ("responses", [{"type": "reasoning", "summary": "text"}], 0, "summary", ["list"]),
    ("anthropic", [{"role": "tool", "content": "x"}], 0, "role", ["tool_result"]),
    (
        "anthropic",
        [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}],
        0,
        "content[0].type",
        ["assistant"],
    ),
    (
        "anthropic",
        [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}],
        0,
        "content[0].type",
        ["user message"],
    ),
    (
        "anthropic",
        [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {1j}}]}],
        0,
        "content[0].input",
        ["JSON-serializable"],
    ),
    (
        "anthropic",
        [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": 5}]}],
        0,
        "content[0].content",
        ["int"],
    ),
    (
        "anthropic",
        [{"role": "user", "content": [{"type": "text", "text": "ok"}, {"type": "text", "text": SURROGATE}]}],
        0,
        "content[1].text",
        ["lone surrogate"],
    ),
    # nesting no recursive code should walk: refused before conversion, by item
    ("openai", [{"role": "user", "content": "hi", "metadata": DEEP}], 0, "(item)", ["deeper than 100"]),
    (
        "openai",
        [{"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f", "arguments": DEEP_TEXT}}]}],
        0,
        "tool_calls[0].function.arguments",
        ["deeper than 100"],
    ),
    (
        "responses",
        [{"type": "function_call", "call_id": "c", "name": "f", "arguments": DEEP_TEXT}],
        0,
        "arguments",
        ["deeper than 100"],
    ),
    (
        "anthropic",
        [{"role": "user", "content": [{"type": "text", "text": "x", "cache": DEEP}]}],
        0,
        "(item)",
        ["deeper than 100"],
    ),
]


@pytest.mark.parametrize(("fmt", "items", "index", "field", "words"), CASES)
def test_bad_input_names_index_field_and_fix(fmt, items, index, field, words):
    before = copy.deepcopy(items)
    with pytest.raises(MessageError) as info:
        to_messages(items, format=fmt)
    error = info.value
    assert (error.index, error.field) == (index, field)
    text = str(error)
    assert text.startswith(f"item {index}:")
    for word in words:
        assert word in text
    assert isinstance(error, UsageError) and isinstance(error, ContextWardenError)
    assert items == before


@pytest.mark.parametrize("fmt", ["openai", "responses", "anthropic"])
def test_dicts_nested_5000_deep_are_refused_without_recursing(fmt):
    item = {"role": "user", "content": "hi", "metadata": nested(5000)}
    if fmt == "responses":
        item["type"] = "message"
    with pytest.raises(MessageError, match="deeper than 100") as info:
        to_messages([{"role": "user", "content": "first"}, item], format=fmt)
    assert info.value.index == 1


def test_anthropic_system_errors_name_the_system_parameter():
    with pytest.raises(MessageError) as info:
        anthropic.to_messages([], system=123)
    assert info.value.index is None and info.value.field == "system" and str(info.value).startswith("system:")


def test_langchain_bad_items():
    from langchain_core.messages import AIMessage, FunctionMessage, HumanMessage

    with pytest.raises(MessageError, match="FunctionMessage"):
        to_messages([HumanMessage("q"), FunctionMessage(name="f", content="x")], format="langchain")
    with pytest.raises(MessageError) as info:
        to_messages([{"role": "user", "content": "hi"}], format="langchain")
    assert info.value.index == 0 and "LangChain message" in str(info.value)
    with pytest.raises(MessageError) as surrogate:
        to_messages([AIMessage(content=SURROGATE)], format="langchain")
    assert surrogate.value.field == "content"
    with pytest.raises(MessageError, match="deeper than 100") as deep:
        to_messages([AIMessage(content="x", tool_calls=[{"name": "f", "args": DEEP, "id": "c1"}])], format="langchain")
    assert deep.value.index == 0


def test_langchain_without_its_extra_names_the_install_command(monkeypatch):
    # Simulate an environment without langchain_core: the import inside the adapter fails.
    monkeypatch.setitem(sys.modules, "langchain_core.messages", None)
    with pytest.raises(ImportError, match=r"pip install contextwarden\[langchain\]"):
        langchain.to_messages([])
    with pytest.raises(ImportError, match=r"pip install contextwarden\[langchain\]"):
        from_messages([Message.user("hi")], format="langchain")


def test_wrong_containers_and_formats():
    with pytest.raises(MessageError, match="list of messages"):
        to_messages({"role": "user", "content": "hi"})  # type: ignore[arg-type]
    with pytest.raises(MessageError, match="list of messages"):
        to_messages("hello")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="not a message format"):
        to_messages([], format="gemini")  # type: ignore[arg-type]
    with pytest.raises(MessageError) as info:
        from_messages([Message.user("a"), {"role": "user", "content": "b"}], format="openai")  # type: ignore[list-item]
    assert info.value.index == 1 and "to_messages" in str(info.value)


def test_message_objects_in_the_input_are_checked_and_kept():
    kept = Message.user("from code")
    out = to_messages([{"role": "system", "content": "s"}, kept], format="openai")
    assert out[1] is kept
    with pytest.raises(MessageError) as info:
        to_messages([Message.user(SURROGATE)], format="openai")
    assert info.value.index == 0


def _deep_list(levels: int) -> list[object]:
    value: list[object] = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("fmt", ["openai", "responses", "anthropic"])
@pytest.mark.parametrize("item", [10**5000, _deep_list(5000)], ids=["int-too-long-to-print", "list-5000-deep"])
def test_an_item_that_cannot_be_printed_gets_a_message_error(fmt, item):
    # the error message describes the bad item; describing it must not fail in turn
    with pytest.raises(MessageError) as caught:
        to_messages([item], format=fmt)
    assert caught.value.index == 0 and len(str(caught.value)) < 600


def test_langchain_objects_forced_past_their_validation_get_a_message_error():
    lc = pytest.importorskip("langchain_core.messages")
    bad = [
        lc.HumanMessage.model_construct(content=False),
        lc.ChatMessage.model_construct(content="hi", role=["user"]),
        # fields LangChain refuses would make the view fail to convert back later
        lc.AIMessage.model_construct(content="hi", id=False, tool_calls=[], invalid_tool_calls=[]),
        lc.ToolMessage.model_construct(content="hi", tool_call_id="c1", status=7),
        lc.SystemMessage.model_construct(content="hi", additional_kwargs=[1]),
    ]
    for i, item in enumerate(bad):
        with pytest.raises(MessageError) as caught:
            to_messages([item], format="langchain")
        assert caught.value.index == 0, i


@pytest.mark.parametrize("fmt", [None, "openai", "responses", "anthropic"])
@pytest.mark.parametrize(
    "item",
    [
        {"type": [], "role": "user", "content": "x"},
        {"role": [], "content": "x"},
        {"role": {"a": 1}, "content": "x"},
        {"role": 10**5000, "content": "x"},
        {"role": "user", "content": [{"type": {}, "text": "x"}]},
    ],
    ids=["list-type", "list-role", "dict-role", "int-role", "dict-block-type"],
)
def test_roles_and_types_of_the_wrong_type_get_a_message_error_or_are_kept(fmt, item):
    # detection and every format read them without a raw TypeError/ValueError
    try:
        to_messages([item], format=fmt)
    except MessageError as exc:
        assert exc.index == 0

"""Properties of the dialects' message transforms: what the client sent comes back byte for byte."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hypothesis import given, strategies as st

from contextwarden.adapters import from_messages, to_messages
from contextwarden.messages import Message, TextPart
from contextwarden.service.dialects import AnthropicMessages, OpenAIChat, OpenAIResponses
from contextwarden.service.dialects.anthropic_messages import MAX_BREAKPOINTS
from contextwarden.service.history import continuation, message_key
from contextwarden.toolpairs import check as check_pairs

words = st.sampled_from(["ok", "read a.py", "run the tests", "  spaced  out ", "done", "é✓"])
signatures = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=", min_size=8, max_size=40
)
cache = st.sampled_from([{}, {"cache_control": {"type": "ephemeral"}}])


@st.composite
def anthropic_histories(draw: Any) -> dict[str, Any]:
    """A Messages API request: system blocks, turns with signed thinking, tool_use/tool_result pairs."""
    system = [{"type": "text", "text": draw(words), **draw(cache)}]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": draw(words), **draw(cache)}]}
    ]
    for i in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):  # Claude Code's reminders between turns
            messages.append({"role": "system", "content": draw(words)})
        content: list[dict[str, Any]] = []
        if draw(st.booleans()):
            content.append({"type": "thinking", "thinking": draw(words), "signature": draw(signatures)})
        if draw(st.booleans()):
            content.append({"type": "redacted_thinking", "data": draw(signatures)})
        content.append({"type": "text", "text": draw(words)})
        calls = draw(st.integers(0, 2))
        for j in range(calls):
            content.append({"type": "tool_use", "id": f"tu_{i}_{j}", "name": "Read", "input": {"path": draw(words)}})
        messages.append({"role": "assistant", "content": content})
        results = [{"type": "tool_result", "tool_use_id": f"tu_{i}_{j}", "content": draw(words)} for j in range(calls)]
        messages.append({"role": "user", "content": [*results, {"type": "text", "text": draw(words), **draw(cache)}]})
    return {
        "model": "m",
        "max_tokens": 10,
        "system": system,
        "messages": messages,
        "tools": [{"name": "Read", "input_schema": {}}],
    }


@given(anthropic_histories())
def test_an_anthropic_request_renders_back_byte_for_byte(body: dict[str, Any]) -> None:
    dialect = AnthropicMessages()
    raw = json.dumps(body)
    conversation = dialect.conversation(body)
    view = conversation.convert(0)
    check_pairs(view)
    rendered = dialect.render(body, view)
    assert json.dumps(rendered) == raw  # system, tools, thinking signatures, cache markers: all unchanged
    assert json.dumps(body) == raw  # the client's body is not modified


@given(anthropic_histories())
def test_after_a_compaction_the_breakpoints_stay_within_anthropics_limit(body: dict[str, Any]) -> None:
    dialect = AnthropicMessages()
    view = dialect.conversation(body).convert(0)
    block = Message.user("[contextwarden] Earlier conversation was compacted.", extra={"contextwarden": "context"})
    rendered = dialect.render(body, [view[0], block, *view[1:]])
    text = json.dumps(rendered)
    assert text.count('"cache_control"') <= max(MAX_BREAKPOINTS, json.dumps(body).count('"cache_control"'))
    assert rendered["tools"] == body["tools"]
    for original in body["messages"]:  # the client's messages keep their bytes
        assert json.dumps(original) in text


reasoning = st.builds(
    lambda sig, i: {"type": "reasoning", "id": f"rs_{i}", "summary": [], "encrypted_content": sig},
    signatures,
    st.integers(0, 99),
)
hosted = st.sampled_from(
    [
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
        {"type": "custom_tool_call", "call_id": "cc_1", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "cc_1", "output": "Done"},
    ]
)
said = st.builds(
    lambda role, text: {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]},
    st.sampled_from(["user", "developer"]),
    words,
)


@given(st.lists(st.one_of(said, reasoning, hosted), min_size=1, max_size=10))
def test_responses_items_of_every_kind_render_back_unchanged(items: list[dict[str, Any]]) -> None:
    dialect = OpenAIResponses()
    body = {
        "model": "m",
        "instructions": "Be Codex.",
        "input": items,
        "tools": [{"type": "web_search"}],
        "store": False,
    }
    view = dialect.conversation(body).convert(0)
    # every item as sent, byte for byte (reasoning's encrypted content included)
    assert json.dumps(dialect.render(body, view)) == json.dumps(body)


turns = st.lists(st.sampled_from(["ok", "go on", "run it", "done"]), min_size=1, max_size=8)


def responses_items(max_size: int) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Responses input items of every kind, with a function call and its output among them."""
    return st.lists(
        st.one_of(
            said,
            reasoning,
            hosted,
            st.just({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}),
            st.just({"type": "function_call", "call_id": "fc_1", "name": "ls", "arguments": "{}"}),
            st.just({"type": "function_call_output", "call_id": "fc_1", "output": "a.py"}),
        ),
        min_size=1,
        max_size=max_size,
    )


@given(turns, turns)
def test_a_history_and_its_retries_and_continuations(first: list[str], more: list[str]) -> None:
    history: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for text in first:
        history += [{"role": "user", "content": text}, {"role": "assistant", "content": f"re: {text}"}]
    keys = [message_key(m) for m in history]
    # the same history with a new question: only the question is new
    assert continuation([*history, {"role": "user", "content": more[0]}], keys).start == len(history)
    # the request that got the last reply, sent again: a retry of one stored reply
    again = continuation(history[:-1], keys)
    assert again.kind == "retry" and again.drop == 1
    # the reply re-sent with other whitespace is the same message
    spaced = [*history[:-1], {"role": "assistant", "content": f"  re:\n{first[-1]} "}, {"role": "user", "content": "x"}]
    assert continuation(spaced, keys).start == len(history)
    # another system prompt is another conversation
    assert continuation([{"role": "system", "content": "Generate a title."}, *history[1:]], keys).kind == "other"


@given(anthropic_histories(), st.integers(1, 12))
def test_an_anthropic_history_converted_request_by_request_is_the_history_converted_at_once(
    body: dict[str, Any], cut: int
) -> None:
    dialect, memo = AnthropicMessages(), {}
    dialect.conversation({**body, "messages": body["messages"][:cut]}, memo)
    whole = dialect.conversation(body, memo)
    assert whole.keyed == dialect.conversation(body).keyed
    assert json.dumps(dialect.render(body, whole.convert(0))) == json.dumps(body)


@given(
    st.lists(
        st.one_of(
            said,
            reasoning,
            hosted,
            st.just({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}),
        ),
        min_size=2,
        max_size=10,
    ),
    st.integers(1, 9),
)
def test_responses_items_converted_request_by_request_are_the_items_converted_at_once(
    items: list[dict[str, Any]], cut: int
) -> None:
    dialect, memo = OpenAIResponses(), {}
    body = {"model": "m", "instructions": "Be Codex.", "input": items}
    dialect.conversation({**body, "input": items[:cut]}, memo)
    whole = dialect.conversation(body, memo)
    assert whole.keyed == dialect.conversation(body).keyed
    assert dialect.render(body, whole.convert(0)) == body


LS = {"name": "ls", "arguments": "{}"}
chat_messages = st.lists(
    st.sampled_from(
        [
            {"role": "user", "content": "list the files"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
            {"content": "done", "role": "assistant"},
        ]
    ),
    min_size=1,
    max_size=8,
)


@given(chat_messages)
def test_a_chat_history_goes_upstream_as_the_client_wrote_it(messages: list[dict[str, Any]]) -> None:
    dialect = OpenAIChat()
    body = {"model": "m", "messages": [{"role": "system", "content": "sys"}, *messages]}
    view = list(dialect.conversation(body).keyed)  # the session's view of an uncompacted history
    rendered = dialect.render(body, from_messages(to_messages(view, format="openai"), format="openai"))
    # keys in the client's order, not the adapter's; a tool call's null content goes as "" (servers refuse null)
    assert json.dumps(rendered) == json.dumps(body).replace('"content": null', '"content": ""')


def _variants(view: list[Message], data: st.DataObject) -> list[list[Message]]:
    """Views a session may serve one after another: the same, one with messages left out and a context
    block in (twice), one with a message's text replaced (a stand-in), that one without the model's turns, and
    the first again."""
    kept = [m for m in view if data.draw(st.booleans())]
    block = Message.user("[contextwarden] Earlier conversation was compacted.", extra={"contextwarden": "context"})
    at = data.draw(st.integers(0, len(view) - 1))
    # a stand-in keeps what its message was read with, or is a message of its own (no hints)
    extra = view[at].extra if data.draw(st.booleans()) else {}
    shortened = dataclasses.replace(view[at], parts=(TextPart(text="[shortened]"),), extra=extra)
    stand_in = [*view[:at], shortened, *view[at + 1 :]]
    without_turns = [m for m in stand_in if m.role != "assistant"]  # a tool result whose call left the view
    compacted = [*kept[:1], block, *kept[1:]]
    return [view, compacted, compacted, stand_in, without_turns, stand_in, view]


@given(anthropic_histories(), st.data())
def test_anthropic_views_rendered_with_the_sessions_memo_are_the_views_rendered_afresh(
    body: dict[str, Any], data: st.DataObject
) -> None:
    dialect, memo = AnthropicMessages(), {}
    for view in _variants(dialect.conversation(body).convert(0), data):
        reused = json.dumps(dialect.render(body, view, memo=memo))
        assert reused == json.dumps(dialect.render(body, view))


@given(
    responses_items(10),
    st.data(),
)
def test_responses_views_rendered_with_the_sessions_memo_are_the_views_rendered_afresh(
    items: list[dict[str, Any]], data: st.DataObject
) -> None:
    dialect, memo = OpenAIResponses(), {}
    body = {"model": "m", "instructions": "Be Codex.", "input": items}
    for view in _variants(dialect.conversation(body).convert(0), data):
        reused = json.dumps(dialect.render(body, view, memo=memo))
        assert reused == json.dumps(dialect.render(body, view))
    assert json.dumps(body["input"]) == json.dumps(items)  # the client's items are never changed


def test_a_stand_in_for_a_custom_tool_output_renders_by_its_call_whether_or_not_the_memo_has_it() -> None:
    """The stand-in of a custom tool's output takes the output item's shape while its call is in the view,
    and the function output's once the call left it: a rendering kept from one view is not reused in the other."""
    dialect, memo = OpenAIResponses(), {}
    call = {"type": "custom_tool_call", "call_id": "cc_1", "name": "apply_patch", "input": "*** Begin Patch"}
    output = {"type": "custom_tool_call_output", "call_id": "cc_1", "output": "Done"}
    body = {"model": "m", "input": [{"type": "message", "role": "user", "content": "go"}, call, output]}
    view = dialect.conversation(body).convert(0)
    stand_in = Message(role="tool", tool_call_id="cc_1", parts=(TextPart(text="[shortened]"),))
    for shown in ([view[0], view[1], stand_in], [view[0], stand_in], [view[0], view[1], stand_in]):
        assert dialect.render(body, shown, memo=memo) == dialect.render(body, shown)
    assert dialect.render(body, [view[0], stand_in], memo=memo)["input"][-1]["type"] == "function_call_output"
    assert dialect.render(body, [*view[:2], stand_in], memo=memo)["input"][-1]["type"] == "custom_tool_call_output"


@given(anthropic_histories(), st.integers(1, 4))
def test_an_anthropic_history_converted_ahead_in_steps_is_the_history_converted_at_once(
    body: dict[str, Any], step: int
) -> None:
    dialect, memo = AnthropicMessages(), {}
    steps = list(dialect.converting(body, memo, step=step))
    assert len(steps) == len(range(step, len(body["messages"]), step))
    whole = dialect.conversation(body, memo)
    assert whole.keyed == dialect.conversation(body).keyed
    assert json.dumps(dialect.render(body, whole.convert(0))) == json.dumps(body)
    assert list(dialect.converting(body, memo, step=step)) == []  # converted: the next request converts what is new


@given(
    responses_items(12),
    st.integers(1, 4),
)
def test_responses_items_converted_ahead_in_steps_are_the_items_converted_at_once(
    items: list[dict[str, Any]], step: int
) -> None:
    dialect, memo = OpenAIResponses(), {}
    body = {"model": "m", "instructions": "Be Codex.", "input": items}
    steps = list(dialect.converting(body, memo, step=step))
    assert len(steps) == len(range(step, len(items), step))
    whole = dialect.conversation(body, memo)
    assert whole.keyed == dialect.conversation(body).keyed
    assert json.dumps(dialect.render(body, whole.convert(0))) == json.dumps(body)

"""Which messages of a re-sent history are new (properties over generated conversations)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, strategies as st

from contextwarden.adapters import from_messages, to_messages
from contextwarden.service.history import continuation, message_key, new_from, same_message

texts = st.sampled_from(["ok", "continue", "run the tests", "done", "I read the file", ""])
users = st.builds(lambda t: {"role": "user", "content": t}, texts)
replies = st.builds(lambda t: {"role": "assistant", "content": t}, texts)
calls = st.builds(
    lambda n, a: {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"call_{n}", "type": "function", "function": {"name": "read", "arguments": a}}],
    },
    st.integers(0, 5),
    st.sampled_from(['{"path": "a.py"}', '{"path":"a.py"}', "{}"]),
)
messages = st.lists(st.one_of(users, replies, calls), max_size=12)


def _keys(history: list[dict[str, Any]]) -> list[Any]:
    return [message_key(m) for m in history]


@given(messages, messages)
def test_the_stored_history_is_never_added_again(transcript: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
    start = new_from(transcript + new, _keys(transcript))
    assert start >= len(transcript)
    if transcript and message_key(transcript[-1]) not in {message_key(m) for m in new}:
        assert start == len(transcript)


@given(messages, st.one_of(users, replies))
def test_an_echo_with_sdk_fields_matches_the_stored_message(
    transcript: list[dict[str, Any]], last: dict[str, Any]
) -> None:
    stored = [*transcript, last]
    echoed = {**last, "refusal": None, "annotations": [], "audio": None}
    question = {"role": "user", "content": "a question never asked before"}
    assert new_from([*transcript, echoed, question], _keys(stored)) == len(stored)


def test_equivalent_forms_have_one_key() -> None:
    assert message_key({"role": "developer", "content": "rules"}) == message_key({"role": "system", "content": "rules"})
    parts = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert message_key(parts) == message_key({"role": "user", "content": "ab"})
    spaced = {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"x": 1}'}}]}
    tight = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"x":1}'}}],
    }
    assert message_key(spaced) == message_key(tight)
    assert message_key({"role": "user", "content": "a"}) != message_key({"role": "assistant", "content": "a"})


def test_a_client_that_rewrote_its_history_adds_only_its_unknown_tail() -> None:
    stored = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "reply one"}]
    client = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "edited reply"},
              {"role": "user", "content": "two"}]  # fmt: skip
    assert new_from(client, _keys(stored)) == 1


extras = st.fixed_dictionaries({}, optional={"refusal": st.none(), "annotations": st.just([]), "name": st.just("bob")})
parts = st.builds(
    lambda a, b: {"role": "user", "content": [{"type": "text", "text": a}, {"type": "text", "text": b}]}, texts, texts
)
results = st.builds(lambda n, t: {"role": "tool", "tool_call_id": f"call_{n}", "content": t}, st.integers(0, 5), texts)
instructions = st.builds(lambda r, t: {"role": r, "content": t}, st.sampled_from(["system", "developer"]), texts)
sources = st.builds(lambda m, e: {**m, **e}, st.one_of(users, replies, calls, parts, results, instructions), extras)


@given(sources)
def test_a_message_read_and_rendered_back_keeps_the_key_of_its_source(source: dict[str, Any]) -> None:
    # what lets the service key the messages it adds from the client's dicts without rendering them
    (rendered,) = from_messages(to_messages([source], format="openai"), format="openai")
    assert message_key(rendered) == message_key(source)


@given(messages, st.lists(st.booleans(), max_size=12), st.one_of(users, replies))
def test_replies_re_sent_as_system_messages_continue_the_transcript(
    transcript: list[dict[str, Any]], folded: list[bool], new: dict[str, Any]
) -> None:
    # a client that folds some of the model's plain replies into system notes re-sends the same conversation
    resent = [
        {"role": "system", "content": m["content"]}
        if m["role"] == "assistant" and not m.get("tool_calls") and i < len(folded) and folded[i]
        else m
        for i, m in enumerate(transcript)
    ]
    found = continuation([*resent, new], _keys(transcript))
    assert found.kind == "extends" and found.start == len(transcript)


def test_a_system_message_is_a_stored_reply_only_when_it_has_that_text() -> None:
    reply = message_key({"role": "assistant", "content": "done"})
    assert same_message(message_key({"role": "system", "content": " done "}), reply)
    assert not same_message(message_key({"role": "system", "content": "done!"}), reply)
    assert not same_message(message_key({"role": "user", "content": "done"}), reply)
    call = message_key({"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]})
    assert not same_message(message_key({"role": "system", "content": ""}), call)


def _conversation(turns: list[str]) -> list[dict[str, Any]]:
    """A system prompt, then each text as a user message answered by the assistant."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "agent"}]
    for text in turns:
        out += [{"role": "user", "content": text}, {"role": "assistant", "content": f"did {text}"}]
    return out


def test_a_rewrite_is_named_by_the_history_up_to_its_first_differing_message() -> None:
    from contextwarden.service.history import rewrite

    stored = _keys(_conversation(["task", "step 1", "step 2", "step 3", "step 4"]))
    compressed = _conversation(["summary one", "step 4"])
    later = [*compressed, {"role": "user", "content": "next"}]
    first, again = rewrite(compressed, stored), rewrite(later, stored)
    assert first is not None and again is not None and first.shorter
    assert first.digest == again.digest  # the client's next requests name the same rewrite
    other = rewrite(_conversation(["summary two", "step 4"]), stored)
    assert other is not None and other.digest != first.digest
    assert rewrite(_conversation(["task", "step 1"]), stored) is None  # a prefix departs nowhere

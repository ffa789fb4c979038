"""Property tests: every adapter gives back exactly what it was given, and never touches it."""

from __future__ import annotations

import copy
import json

from _formats import (
    anthropic_messages,
    anthropic_system,
    langchain_messages,
    openai_messages,
    responses_items,
)
from hypothesis import HealthCheck, given, settings, strategies as st

from contextwarden.adapters import anthropic, from_messages, to_messages
from contextwarden.messages import Message, MessagesAdapter

SETTINGS = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])


def stored(messages: list[Message]) -> list[Message]:
    """The messages after a trip through JSON, as a session store keeps them."""
    return MessagesAdapter.validate_json(MessagesAdapter.dump_json(messages))


def assert_round_trip(items, fmt):
    before = copy.deepcopy(items)
    messages = to_messages(items, format=fmt)
    assert items == before  # input not modified
    out = from_messages(messages, format=fmt)
    assert out == items
    assert from_messages(stored(messages), format=fmt) == items  # the hints survive storage
    return messages


@SETTINGS
@given(openai_messages)
def test_openai_chat_round_trip(items):
    assert_round_trip(items, "openai")


@SETTINGS
@given(responses_items)
def test_responses_round_trip(items):
    assert_round_trip(items, "responses")


@SETTINGS
@given(anthropic_messages)
def test_anthropic_round_trip(items):
    assert_round_trip(items, "anthropic")


@SETTINGS
@given(anthropic_system(), anthropic_messages)
def test_anthropic_round_trip_with_a_system_parameter(system, items):
    before = copy.deepcopy((system, items))
    messages = anthropic.to_messages(items, system=system)
    assert (system, items) == before
    assert anthropic.from_messages(messages) == (system, items)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(langchain_messages)
def test_langchain_round_trip(items):
    before = [m.model_copy(deep=True) for m in items]
    messages = to_messages(items, format="langchain")
    assert items == before
    assert from_messages(messages, format="langchain") == items


@SETTINGS
@given(st.sampled_from(["openai", "responses", "anthropic"]), st.data())
def test_outputs_share_nothing_with_inputs_or_messages(fmt, data):
    strategy = {"openai": openai_messages, "responses": responses_items, "anthropic": anthropic_messages}[fmt]
    items = data.draw(strategy)
    messages = to_messages(items, format=fmt)
    first = from_messages(messages, format=fmt)
    _scribble(first)
    assert from_messages(messages, format=fmt) == items


def _scribble(value):
    """Change every container in place."""
    if isinstance(value, dict):
        for v in value.values():
            _scribble(v)
        value["__scribbled__"] = True
    elif isinstance(value, list):
        for v in value:
            _scribble(v)
        value.append("__scribbled__")


@SETTINGS
@given(st.sampled_from(["openai", "responses", "anthropic"]), st.data())
def test_extra_is_json(fmt, data):
    strategy = {"openai": openai_messages, "responses": responses_items, "anthropic": anthropic_messages}[fmt]
    for m in to_messages(data.draw(strategy), format=fmt):
        json.dumps(dict(m.extra))

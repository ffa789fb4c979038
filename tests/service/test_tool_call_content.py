"""An assistant message that only calls tools reaches the upstream with ``"content": ""``, never null or none.

llama-cpp-python's server answers a null content with HTTP 500 (a validation error) and a missing
one with HTTP 500 too (its chat template reads the field); the upstream here refuses both the same
way, so one such message anywhere in a request fails the turn.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import openai
from hypothesis import given, strategies as st

from contextwarden.service.dialects import OpenAIChat
from contextwarden.settings import Settings
from contextwarden.testing import ScriptedError, ScriptedOpenAIServer

from .conftest import MODEL, SYSTEM, Running, make_settings, user

NULL_REFUSAL = ScriptedError(
    status=500,
    message="7 validation errors: {'type': 'string_type', 'loc': ('body', 'messages', 1, "
    "'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string'}",
)
MISSING_REFUSAL = ScriptedError(status=500, message="'dict object' has no attribute 'content'")


def _refusing_null(body: dict[str, Any]) -> ScriptedError | str:
    """llama-cpp-python's answers: a 500 for an assistant message whose content is null or missing, else a reply."""
    for message in body["messages"]:
        if message.get("role") == "assistant":
            if "content" not in message:
                return MISSING_REFUSAL
            if message["content"] is None:
                return NULL_REFUSAL
    return "read it"


def _tool_round(turn: int, content: str | None) -> list[dict[str, Any]]:
    call = {"id": f"call_{turn}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    # every third round leaves the content out, as some frameworks write a call
    asked = {"role": "assistant", "content": content} if turn % 3 else {"role": "assistant"}
    return [
        {**asked, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{turn}", "content": f"def f{turn}(x): return x\n" * 40},
    ]


def test_tool_rounds_without_text_pass_a_server_that_refuses_null_before_and_after_compaction(
    service_factory: Callable[[Settings], Running], sqlite_url: str
) -> None:
    # odd turns carry null, as the SDK's own echo of a tool-call reply does; even turns carry "", which must
    # stay "" when compaction renders the round again (its output cleared); every third carries none
    with ScriptedOpenAIServer.llama_cpp_python(n_ctx=100_000, default=_refusing_null, model=MODEL) as upstream:
        service = service_factory(make_settings(sqlite_url, upstream.base_url, window=3_000))
        client = openai.OpenAI(
            base_url=f"{service.url}/v1", api_key="unused", default_headers={"X-Session-Id": "null"}, max_retries=0
        )
        history: list[dict[str, Any]] = [SYSTEM]
        with client:
            for turn in range(12):
                history += [user(f"read m{turn}.py"), *_tool_round(turn, None if turn % 2 else "")]
                reply = client.chat.completions.create(model=MODEL, messages=history)  # type: ignore[arg-type]
                assert reply.choices[0].message.content == "read it", f"turn {turn}"
                history.append({"role": "assistant", "content": "read it"})
        sent = [m for body in upstream.requests for m in body["messages"] if m.get("tool_calls")]
        assert sent and all(m["content"] == "" for m in sent)
        assert any("cleared" in json.dumps(body).lower() for body in upstream.requests)  # compaction did run


_texts = st.one_of(st.none(), st.text(max_size=5))
_messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "tool", "system"])},
        optional={"content": _texts, "tool_calls": st.lists(st.just({"id": "c", "type": "function"}), max_size=1)},
    ),
    min_size=1,
    max_size=6,
)


@given(_messages)
def test_rendering_changes_only_the_absent_content_of_tool_calling_assistant_messages(
    messages: list[dict[str, Any]],
) -> None:
    body = {"model": MODEL, "messages": messages}
    request = copy.deepcopy(body)
    sent = OpenAIChat().render(body, [dict(m) for m in messages])["messages"]
    assert len(sent) == len(messages)
    for before, after in zip(messages, sent, strict=True):
        if before["role"] == "assistant" and before.get("tool_calls") and before.get("content") is None:
            assert after == {**before, "content": ""}
        else:
            assert after == before
    assert body == request  # the client's request itself is left as it came

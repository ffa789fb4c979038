"""An assistant message that only calls tools reaches the upstream with ``"content": ""``, never null.

llama-cpp-python's server answers a null content with HTTP 500 (a validation error); the upstream
here refuses it the same way, so a null anywhere in a request fails the turn.
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
    message="1 validation error for ChatCompletionRequestAssistantMessage\ncontent\n  Input should be a valid string",
)


def _refusing_null(body: dict[str, Any]) -> ScriptedError | str:
    """llama-cpp-python's answer: a 500 for an assistant message whose content is null, else a reply."""
    if any(m.get("role") == "assistant" and m.get("content", "") is None for m in body["messages"]):
        return NULL_REFUSAL
    return "read it"


def _tool_round(turn: int, content: str | None) -> list[dict[str, Any]]:
    call = {"id": f"call_{turn}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": content, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{turn}", "content": f"def f{turn}(x): return x\n" * 40},
    ]


def test_tool_rounds_without_text_pass_a_server_that_refuses_null_before_and_after_compaction(
    service_factory: Callable[[Settings], Running], sqlite_url: str
) -> None:
    # odd turns carry null, as the SDK's own echo of a tool-call reply does; even turns carry "", which must
    # stay "" when compaction renders the round again (its output cleared)
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
        {"role": st.sampled_from(["user", "assistant", "tool", "system"]), "content": _texts},
        optional={"tool_calls": st.lists(st.just({"id": "c", "type": "function"}), max_size=1)},
    ),
    min_size=1,
    max_size=6,
)


@given(_messages)
def test_rendering_changes_only_the_null_content_of_tool_calling_assistant_messages(
    messages: list[dict[str, Any]],
) -> None:
    body = {"model": MODEL, "messages": messages}
    request = copy.deepcopy(body)
    sent = OpenAIChat().render(body, [dict(m) for m in messages])["messages"]
    assert len(sent) == len(messages)
    for before, after in zip(messages, sent, strict=True):
        if before["role"] == "assistant" and before.get("tool_calls") and before["content"] is None:
            assert after == {**before, "content": ""}
        else:
            assert after == before
    assert body == request  # the client's request itself is left as it came

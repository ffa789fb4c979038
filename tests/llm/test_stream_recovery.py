"""What real local servers do that well-behaved ones do not: null content, 500s, streams cut before the first event."""

from __future__ import annotations

from typing import Any

import pytest

from contextwarden import Message, Session
from contextwarden.exceptions import StreamInterrupted, UpstreamError
from contextwarden.llm import OpenAIChatModel, ResponseDone, RetryPolicy
from contextwarden.llm.stream_recovery import likely_overflow
from contextwarden.messages import ToolCall
from contextwarden.testing import ScriptedDisconnect, ScriptedError, ScriptedOpenAIServer

FAST = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.01, jitter=0)


def test_a_tool_call_without_text_is_sent_with_empty_content_never_null() -> None:
    with ScriptedOpenAIServer(["done"]) as server, OpenAIChatModel("m", base_url=server.base_url) as model:
        call = ToolCall(call_id="c1", name="ls", arguments="{}")
        model.request([Message.user("go"), Message.assistant("", tool_calls=[call]), Message.tool_result("c1", "a")])
        sent = server.requests[0]["messages"][1]
    assert sent["content"] == "" and sent["tool_calls"][0]["id"] == "c1"


def test_a_500_that_blames_the_request_is_reported_with_its_message_and_not_retried() -> None:
    refusal = ScriptedError(status=500, message="1 validation error for ChatCompletionRequestAssistantMessage")
    with (
        ScriptedOpenAIServer([refusal, "never sent"]) as server,
        OpenAIChatModel("m", base_url=server.base_url, retry=FAST) as model,
    ):
        with pytest.raises(UpstreamError, match="validation error for ChatCompletionRequestAssistantMessage") as info:
            model.request([Message.user("hi")])
        assert len(server.requests) == 1
    assert info.value.status_code == 500 and "refuses something in the request" in str(info.value)


def test_a_plain_500_is_still_retried() -> None:
    with (
        ScriptedOpenAIServer([ScriptedError.server_error(), "ok"]) as server,
        OpenAIChatModel("m", base_url=server.base_url, retry=FAST) as model,
    ):
        assert model.request([Message.user("hi")]).text == "ok"
        assert len(server.requests) == 2


def test_a_streamed_request_dropped_before_any_answer_is_a_stream_interruption() -> None:
    with (
        ScriptedOpenAIServer([ScriptedDisconnect()]) as server,
        OpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model,
    ):
        with pytest.raises(StreamInterrupted):
            list(model.stream([Message.user("hi")]))


@pytest.mark.parametrize(
    ("prompt", "window", "largest", "expected"),
    [(900, 1000, 950, True), (500, 1000, 400, True), (500, 1000, 800, False), (500, None, 800, False)],
)
def test_likely_overflow(prompt: int, window: int | None, largest: int, expected: bool) -> None:
    assert likely_overflow(prompt_tokens=prompt, window=window, largest_answered=largest) is expected


def _big_session(**kwargs: Any) -> Session:
    s = Session(window=8192, counter="heuristic", **kwargs)
    s.add(Message.system("Be terse."))
    for turn in range(12):
        s.add(Message.user(f"note {turn}: " + "the parser builds a tree of nodes. " * 30))
        s.add(Message.assistant("OK."))
    s.add(Message.user("Summarise."))
    return s


def _refuse_without_numbers(body: dict[str, Any]) -> ScriptedError | str:
    """A server whose plain refusal names no window, and whose stream is cut: only /props tells."""
    tokens = len(str(body["messages"])) // 4
    if tokens >= 2048:
        if body.get("stream"):
            return ScriptedDisconnect()
        return ScriptedError(status=400, message="context length exceeded", code="context_length_exceeded")
    return "Summary."


def test_a_cut_stream_learns_the_window_from_the_servers_endpoints_compacts_and_retries() -> None:
    routes = {"GET /props": {"default_generation_settings": {"n_ctx": 2048}}}
    with (
        ScriptedOpenAIServer(default=_refuse_without_numbers, routes=routes) as server,
        OpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model,
    ):
        s = _big_session()
        events = list(s.stream(model))
    assert isinstance(events[-1], ResponseDone) and events[-1].response.text == "Summary."
    assert s.status().served_window == 2048


def test_a_cut_stream_and_a_dropped_plain_retry_become_an_overflow_when_props_name_a_smaller_window() -> None:
    def cut_when_long(body: dict[str, Any]) -> ScriptedDisconnect | str:
        return ScriptedDisconnect() if len(str(body["messages"])) // 4 >= 2048 else "Short now."

    routes = {"GET /props": {"default_generation_settings": {"n_ctx": 2048}}}
    with (
        ScriptedOpenAIServer(default=cut_when_long, routes=routes) as server,
        OpenAIChatModel("m", base_url=server.base_url, max_retries=0) as model,
    ):
        s = _big_session()
        events = list(s.stream(model))
    assert isinstance(events[-1], ResponseDone) and events[-1].response.text == "Short now."
    assert s.status().served_window == 2048

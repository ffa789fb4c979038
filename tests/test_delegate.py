from __future__ import annotations

from collections.abc import Sequence

import pytest

from contextwarden.delegate import adelegate, delegate
from contextwarden.exceptions import ConfigError, ContextOverflowError, UsageError
from contextwarden.llm import AsyncOpenAIChatModel, AsyncTestModel, ModelResponse, OpenAIChatModel, TestModel
from contextwarden.messages import Message, ToolCall
from contextwarden.testing import ScriptedOpenAIServer
from contextwarden.tokens import get_counter
from summarize._histories import coding_session

CL100K = get_counter("tiktoken:cl100k_base")


def test_returns_the_answer_and_usage() -> None:
    model = TestModel(["Found it: the flaky test is tests/test_api.py::test_login (timeout 5s)."])
    result = delegate("Find the flaky test.", "CI run 88123 failed twice.", client=model, window=8000)
    assert result.result == "Found it: the flaky test is tests/test_api.py::test_login (timeout 5s)."
    assert result.finished and result.turns == 1 and not result.condensed
    assert result.usage.requests == 1 and result.usage.input_tokens > 0
    assert result.session_id.startswith("sub_")
    sent = model.requests[0].messages
    assert sent[0].role == "system" and "sub-agent" in sent[0].text
    assert "CI run 88123 failed twice." in sent[1].text
    assert sent[-1].text == "Find the flaky test."


def test_a_long_answer_is_condensed() -> None:
    long = "\n\n".join(f"Finding {i}: module_{i}.py has an unused import of os_{i}." for i in range(400))
    result = delegate("Audit the repo.", client=TestModel([long]), window=8000, max_result_tokens=300, counter=CL100K)
    assert result.condensed and result.result_tokens <= 300
    assert CL100K.count_text(result.result) == result.result_tokens
    assert result.result.startswith("Finding 0:") and "Finding 399:" in result.result


def test_a_cut_answer_is_continued() -> None:
    first = ModelResponse(message=Message.assistant("Part one of the report."), finish_reason="length")
    model = TestModel([first, "Part two."])
    result = delegate("Write the report.", client=model, window=8000)
    assert result.result == "Part one of the report.\nPart two."
    assert result.turns == 2 and result.finished
    assert "cut off" in model.requests[1].messages[-1].text


def test_tool_calls_and_empty_replies_are_nudged_to_an_answer() -> None:
    call = Message.assistant("checking", tool_calls=[ToolCall(call_id="c1", name="grep", arguments="{}")])
    model = TestModel([call, "", "The answer is 42."])
    result = delegate("Compute it.", client=model, window=8000)
    assert result.result == "The answer is 42." and result.turns == 3
    assert "No tools are available" in model.requests[1].messages[-1].text
    assert "empty" in model.requests[2].messages[-1].text
    assert all(not m.tool_calls for m in model.requests[2].messages)


def test_max_turns_ends_without_an_answer() -> None:
    result = delegate("Compute it.", client=TestModel(["", ""]), window=8000, max_turns=2)
    assert not result.finished and result.turns == 2 and result.result == ""


def test_the_sub_session_keeps_its_own_budget() -> None:
    context, _ = coding_session(60)
    parent = list(context)
    model = TestModel(["Summary: the import error in app/settings.py was fixed."])
    window = 4000
    result = delegate("What was fixed?", context, client=model, window=window, counter=CL100K)
    assert result.finished
    sent = model.requests[0].messages
    assert sum(CL100K.count_text(m.text) for m in sent) < window
    assert sent[-1].text == "What was fixed?"
    assert context == parent  # the parent's messages are not touched


def test_a_context_overflow_is_compacted_and_retried_once() -> None:
    overflow = ContextOverflowError("too long", limit=1000, requested=5000)
    model = TestModel([overflow, "Done after compaction."])
    context, _ = coding_session(30)
    result = delegate("Sum up.", context, client=model, window=16000, counter=CL100K)
    assert result.result == "Done after compaction."
    assert len(model.requests) == 2

    def tokens(messages: Sequence[Message]) -> int:
        return sum(CL100K.count_text(m.text) for m in messages)

    assert tokens(model.requests[1].messages) < tokens(model.requests[0].messages)


def test_against_a_real_http_server() -> None:
    with ScriptedOpenAIServer(["Result: 3 failing tests in tests/test_api.py."]) as server:
        with OpenAIChatModel("scripted", base_url=server.base_url, max_retries=0) as model:
            result = delegate("Run the tests.", "Branch fix/login.", client=model, window=8000)
        body = server.requests[0]
    assert result.result == "Result: 3 failing tests in tests/test_api.py."
    assert result.usage.input_tokens > 0
    assert body["messages"][-1] == {"role": "user", "content": "Run the tests."}
    assert body["max_tokens"] == 2000  # reserved output: min(2 × 1500, window / 4)


def test_a_registry_name_gives_the_window() -> None:
    client = TestModel(["Done."])
    result = delegate("Sum up.", "ctx", client=client, model="gpt-4o")
    assert result.finished and result.result == "Done."
    assert client.requests[0].max_tokens == 16_384  # the registry entry: its window, and its max output reserved


def test_invalid_arguments() -> None:
    with pytest.raises(ConfigError, match="window"):
        delegate("x", client=TestModel())
    with pytest.raises(UsageError, match="client="):
        delegate("x", client=TestModel(), model=TestModel())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_result_tokens"):
        delegate("x", client=TestModel(), window=8000, max_result_tokens=3)


@pytest.mark.anyio
async def test_async_twin() -> None:
    model = AsyncTestModel(["Part A.", "Part B."])
    result = await adelegate("Do it.", "ctx", client=model, window=8000)
    assert result.result == "Part A." and result.turns == 1
    with ScriptedOpenAIServer(["Async result: ok."]) as server:
        async with AsyncOpenAIChatModel("scripted", base_url=server.base_url, max_retries=0) as http:
            out = await adelegate("Check.", client=http, window=8000)
    assert out.result == "Async result: ok." and out.finished

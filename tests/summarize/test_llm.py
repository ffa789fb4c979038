from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from contextwarden.exceptions import ConfigError, SummaryRejected
from contextwarden.llm import (
    AsyncFunctionModel,
    AsyncOpenAIChatModel,
    AsyncTestModel,
    FunctionModel,
    OpenAIChatModel,
    RecordedRequest,
    TestModel,
)
from contextwarden.messages import Message
from contextwarden.session import Session
from contextwarden.summarize import AsyncLLMSummarizer, ExtractiveSummarizer, LLMSummarizer, SummaryResult
from contextwarden.summarize._sections import parse_summary
from contextwarden.summarize.base import SummaryRequest
from contextwarden.testing import ScriptedError, ScriptedOpenAIServer, ScriptedReply
from contextwarden.tokens import get_counter

from ._histories import coding_session, faithful, request, support_history

pytestmark = pytest.mark.anyio
Mode = Literal["sync", "async"]
CL100K = get_counter("tiktoken:cl100k_base")


def _last_user(messages: Sequence[Message]) -> str:
    return messages[-1].text


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> Mode:
    value: Mode = request.param
    return value


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as running:
        yield running


@dataclass
class Kit:
    """Builds the sync or the async variant of models and summarizers, and runs them."""

    mode: Mode
    opened: list[Any]

    def http(self, server: ScriptedOpenAIServer) -> Any:
        cls = OpenAIChatModel if self.mode == "sync" else AsyncOpenAIChatModel
        model = cls("scripted", base_url=server.base_url, max_retries=0)
        self.opened.append(model)
        return model

    async def close(self) -> None:
        for model in self.opened:
            if self.mode == "sync":
                model.close()
            else:
                await model.aclose()

    def test_model(self, replies: Sequence[Any], **kwargs: Any) -> Any:
        return (TestModel if self.mode == "sync" else AsyncTestModel)(replies, **kwargs)

    def function(self, fn: Any) -> Any:
        return (FunctionModel if self.mode == "sync" else AsyncFunctionModel)(fn)

    def summarizer(self, model: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("counter", CL100K)
        return (LLMSummarizer if self.mode == "sync" else AsyncLLMSummarizer)(model, **kwargs)

    async def result(self, summarizer: Any, req: SummaryRequest) -> SummaryResult:
        if self.mode == "sync":
            out: SummaryResult = summarizer.summarize_result(req)
        else:
            out = await summarizer.summarize_result(req)
        return out

    async def summarize(self, summarizer: Any, req: SummaryRequest) -> str:
        if self.mode == "sync":
            text: str = summarizer.summarize(req)
        else:
            text = await summarizer.summarize(req)
        return text


@pytest.fixture
async def kit(mode: Mode) -> Any:
    made = Kit(mode, [])
    yield made
    await made.close()


def fallback_text(req: SummaryRequest) -> str:
    return ExtractiveSummarizer(counter=CL100K).summarize(req)


async def test_good_summary_is_used_and_the_prompt_names_span_sections_and_facts(
    kit: Kit, server: ScriptedOpenAIServer
) -> None:
    server.default = lambda body: faithful(body["messages"][-1]["content"])
    summarizer = kit.summarizer(kit.http(server))
    req = request(support_history(), 500, previous="Task: earlier work on ticket T-1001")
    result = await kit.result(summarizer, req)
    assert result.ok and result.source == "llm" and result.calls == 1 and result.chunks == 1
    assert result.text == faithful(server.requests[0]["messages"][-1]["content"])
    body = server.requests[0]
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    for heading in ("Task:", "Completed steps:", "Current state:", "Key data:", "Errors and fixes:", "Open items:"):
        assert heading in system
    assert "New messages (m1..m8)" in user
    assert "Previous summary" in user and "T-1001" in user
    assert "[m5] tool transfer_order result ERROR: Error: TransferRefused" in user
    assert "ORD-48213" in user.split("Identifiers that must appear verbatim:")[1]
    assert '- "It must arrive before 2024-06-14."' in user
    assert body["max_tokens"] >= 500
    assert summarizer.usage.requests == 1 and summarizer.last_failure is None


@pytest.mark.parametrize(
    "reply", ["", "   \n", "Error: rate limit exceeded, retry later", "I'm sorry, I can't help with that."]
)
async def test_garbage_is_rejected_and_the_extractive_summary_used(
    kit: Kit, server: ScriptedOpenAIServer, reply: str
) -> None:
    server.push(reply, reply)
    req = request(support_history(), 400)
    summarizer = kit.summarizer(kit.http(server))
    with pytest.raises(SummaryRejected) as caught:
        await kit.summarize(summarizer, req)
    assert caught.value.reason == "rejected"
    assert caught.value.fallback == fallback_text(req)
    assert caught.value.span == ("m1", "m8")
    assert summarizer.last_failure is not None and summarizer.last_failure.kind == "rejected"
    assert summarizer.failures == 1
    quiet = kit.summarizer(kit.http(server), on_failure="fallback")
    assert await kit.summarize(quiet, req) == fallback_text(req)
    assert quiet.failures == 1


async def test_server_error_falls_back_and_names_the_error(kit: Kit, server: ScriptedOpenAIServer) -> None:
    server.push(ScriptedError.server_error(503))
    req = request(support_history(), 400)
    result = await kit.result(kit.summarizer(kit.http(server)), req)
    assert result.source == "fallback" and result.text == fallback_text(req)
    assert result.failure is not None and result.failure.kind == "error"
    assert "UpstreamError" in result.failure.detail and "503" in result.failure.detail


async def test_a_raising_model_falls_back(kit: Kit) -> None:
    summarizer = kit.summarizer(kit.test_model([RuntimeError("boom in the model")]))
    result = await kit.result(summarizer, request(support_history()))
    assert result.failure is not None and result.failure.kind == "error"
    assert "boom in the model" in result.failure.detail
    assert result.source == "fallback"


async def test_deadline_is_respected_over_http(kit: Kit, server: ScriptedOpenAIServer) -> None:
    server.push(ScriptedReply(text="Task: late", delay=5))
    summarizer = kit.summarizer(kit.http(server), deadline_s=0.3)
    started = time.monotonic()
    with pytest.raises(SummaryRejected) as caught:
        await kit.summarize(summarizer, request(support_history()))
    assert time.monotonic() - started < 2.5
    assert caught.value.reason == "timeout"
    assert "deadline_s=0.3" in str(caught.value)


async def test_deadline_is_respected_with_a_slow_test_model(kit: Kit) -> None:
    summarizer = kit.summarizer(kit.test_model(["Task: late"], delay=5), deadline_s=0.2)
    started = time.monotonic()
    result = await kit.result(summarizer, request(support_history()))
    assert time.monotonic() - started < 2.5
    assert result.failure is not None and result.failure.kind == "timeout"
    assert result.source == "fallback"


async def test_dropped_identifiers_are_restored_and_counted(kit: Kit) -> None:
    req = request(support_history(), 500)
    summarizer = kit.summarizer(kit.test_model(["Task: move the order.\nNext step: book shipping."]))
    with pytest.raises(SummaryRejected) as caught:
        await kit.summarize(summarizer, req)
    assert caught.value.reason == "lost-identifiers"
    text = caught.value.fallback
    assert text is not None and text.startswith("Task: move the order.")
    extractive = ExtractiveSummarizer(counter=CL100K)
    kept = [i for i in extractive.identifiers(req) if i in fallback_text(req)]
    assert kept and all(i in text for i in kept)
    assert "It must arrive before 2024-06-14." in text
    assert CL100K.count_text(text) <= 500
    result = summarizer.last_result
    assert result is not None and result.source == "repaired" and "ORD-48213" in result.restored


async def test_a_small_loss_is_restored_without_a_failure(kit: Kit) -> None:
    def drop_one(messages: Sequence[Message], _: RecordedRequest) -> str:
        text = faithful(_last_user(messages))
        return text.replace(" · WH_MUNICH_02", "").replace("WH_MUNICH_02 · ", "")

    result = await kit.result(kit.summarizer(kit.function(drop_one)), request(support_history(), 500))
    assert result.ok and result.source == "repaired"
    assert result.restored == ("WH_MUNICH_02",)
    assert "Key data (restored): WH_MUNICH_02" in result.text


async def test_an_overlong_summary_is_fitted_identifiers_first(kit: Kit) -> None:
    def verbose(messages: Sequence[Message], _: RecordedRequest) -> str:
        filler = "\n".join(f"- observation {n}: " + "the warehouse was busy that day " * 8 for n in range(60))
        return faithful(_last_user(messages)).replace("Completed steps:", "Completed steps:\n" + filler)

    req = request(support_history(), 300)
    result = await kit.result(kit.summarizer(kit.function(verbose)), req)
    assert result.ok and result.source == "llm"
    assert CL100K.count_text(result.text) <= 300
    assert "ORD-48213" in result.text and "WH_BERLIN_01" in result.text
    assert parse_summary(result.text).next == ["continue"]


async def test_map_reduce_when_the_input_exceeds_the_window(kit: Kit) -> None:
    seen: list[RecordedRequest] = []

    def record(messages: Sequence[Message], req: RecordedRequest) -> str:
        seen.append(req)
        return faithful(_last_user(messages))

    msgs, facts = coding_session(20)
    req = request(msgs, 400, previous="Task: fix CI build 88123\nKey data: build-88123")
    budget = 1500
    result = await kit.result(kit.summarizer(kit.function(record), max_input_tokens=budget, max_calls=64), req)
    assert result.chunks > 1
    assert result.calls == len(seen) > result.chunks  # every chunk, then at least one merge
    for r in seen:
        assert sum(CL100K.count_text(m.text) for m in r.messages) <= budget
    final = seen[-1].messages[-1].text
    assert "Part 1:" in final and "Part 2:" in final
    assert "Previous summary" in final and "build-88123" in final
    assert all("Previous summary" not in r.messages[-1].text for r in seen[: result.chunks])
    assert result.ok and facts["path"] in result.text


async def test_a_span_needing_too_many_calls_falls_back_before_calling(kit: Kit) -> None:
    model = kit.test_model(["never used"], cycle=True)
    msgs, _ = coding_session(40)
    result = await kit.result(kit.summarizer(model, max_input_tokens=600, max_calls=8), request(msgs, 300))
    assert result.failure is not None and result.failure.kind == "error"
    assert "max_calls=8" in result.failure.detail
    assert model.requests == [] and result.source == "fallback"


async def test_map_reduce_splits_a_single_oversized_message(kit: Kit) -> None:
    seen: list[RecordedRequest] = []

    def record(messages: Sequence[Message], req: RecordedRequest) -> str:
        seen.append(req)
        return faithful(_last_user(messages))

    big = "\n".join(f"line {n}: value_{n} stored at /data/shard_{n}.bin" for n in range(600))
    msgs = [Message.user("Summarize the dump.", message_id="u"), Message.assistant(big, message_id="a")]
    result = await kit.result(kit.summarizer(kit.function(record), max_input_tokens=2000), request(msgs, 300))
    assert result.chunks >= 3
    assert any("(piece 2/" in r.messages[-1].text for r in seen)
    for r in seen:
        assert sum(CL100K.count_text(m.text) for m in r.messages) <= 2000


async def test_context_overflow_from_the_model_retries_with_smaller_calls(
    kit: Kit, server: ScriptedOpenAIServer
) -> None:
    server.push(ScriptedError.context_length_exceeded(limit=3000, requested=9000))
    server.default = lambda body: faithful(body["messages"][-1]["content"])
    msgs, _ = coding_session(20)
    result = await kit.result(kit.summarizer(kit.http(server), max_input_tokens=8000), request(msgs, 300))
    assert result.ok
    assert result.chunks > 1
    assert len(server.requests) == result.calls + 1  # the refused call is not counted as answered


async def test_a_degraded_request_is_answered_without_the_model(kit: Kit) -> None:
    @dataclass(frozen=True, kw_only=True)
    class DegradedRequest(SummaryRequest):
        degraded: bool = True

    base = request(support_history(), 400)
    req = DegradedRequest(previous=None, messages=base.messages, max_tokens=400, span=base.span)
    model = kit.test_model(["never used"])
    result = await kit.result(kit.summarizer(model), req)
    assert result.ok and result.source == "extractive" and result.calls == 0
    assert model.requests == []
    assert result.text == fallback_text(base)


def test_invalid_settings_name_the_fix() -> None:
    with pytest.raises(ConfigError, match="max_input_tokens"):
        LLMSummarizer(TestModel(), max_input_tokens=100)
    with pytest.raises(ConfigError, match="deadline_s"):
        LLMSummarizer(TestModel(), deadline_s=0)
    with pytest.raises(ConfigError, match="max_lost_identifiers"):
        LLMSummarizer(TestModel(), max_lost_identifiers=1.5)


def test_a_failing_summarizer_counts_for_the_session_breaker(server: ScriptedOpenAIServer) -> None:
    server.default = ScriptedError.server_error(500)
    msgs, _ = coding_session(40)
    with OpenAIChatModel("scripted", base_url=server.base_url, max_retries=0) as model:
        session = Session(
            window=3000, counter=CL100K, reserved_output=0, summarizer=LLMSummarizer(model, counter=CL100K)
        )
        session.add(msgs)
        view = session.prepare(format="internal")
    assert session.engine.breaker.total_failures == 1
    assert view.status.used <= 3000


def plain_history() -> list[Message]:
    """A span with no identifiers at all: nothing for the identifier check to miss."""
    return [
        Message.user("please make the introduction of the essay friendlier and a little shorter", message_id="p1"),
        Message.assistant("sure, I rewrote the opening so that it greets the reader first", message_id="p2"),
        Message.user("good, now soften the tone of the closing paragraph as well", message_id="p3"),
        Message.assistant("done, the closing paragraph now thanks the reader warmly", message_id="p4"),
    ]


def _message_lines(prompt: str) -> str:
    """The rendered messages between the prompt's delimiters, without the delimiters."""
    return prompt.split("<<<\n", 1)[1].split("\n>>>", 1)[0]


ECHOES = {
    "whole prompt": lambda body: body["messages"][-1]["content"],
    "message lines": lambda body: _message_lines(body["messages"][-1]["content"]),
    "system prompt": lambda body: body["messages"][0]["content"],
    "lines without ids": lambda body: "\n".join(
        line.split(": ", 1)[1] for line in _message_lines(body["messages"][-1]["content"]).splitlines()
    ),
}


@pytest.mark.parametrize("echo", list(ECHOES))
async def test_a_reply_that_echoes_the_prompt_is_rejected(kit: Kit, server: ScriptedOpenAIServer, echo: str) -> None:
    server.default = ECHOES[echo]
    summarizer = kit.summarizer(kit.http(server))
    req = request(plain_history(), 300)
    result = await kit.result(summarizer, req)
    assert result.source == "fallback" and result.failure is not None and result.failure.kind == "rejected"
    assert "prompt" in result.failure.detail
    assert result.text == fallback_text(req)


async def test_a_summary_that_quotes_the_messages_in_part_is_kept(kit: Kit, server: ScriptedOpenAIServer) -> None:
    server.default = (
        "Task: edit the essay\nCompleted steps:\n- rewrote the opening so that it greets the reader first\n"
        "- softened the closing paragraph\nNext step: wait for feedback"
    )
    result = await kit.result(kit.summarizer(kit.http(server)), request(plain_history(), 300))
    assert result.ok and result.source == "llm"


def test_an_echoing_summarizer_counts_for_the_session_breaker(server: ScriptedOpenAIServer) -> None:
    # an echo keeps every identifier of the span, so only the echo check can catch it
    server.default = ECHOES["whole prompt"]
    msgs, _ = coding_session(40)
    with OpenAIChatModel("scripted", base_url=server.base_url, max_retries=0) as model:
        summarizer = LLMSummarizer(model, counter=CL100K, max_input_tokens=100_000)  # one call, no map-reduce
        session = Session(window=3000, counter=CL100K, reserved_output=0, summarizer=summarizer)
        session.add(msgs)
        session.prepare(format="internal")
    assert server.requests and session.engine.breaker.total_failures == 1
    assert summarizer.last_failure is not None and summarizer.last_failure.kind == "rejected"
    assert "<<<" not in (session.engine.summary or "") and "Write the summary." not in (session.engine.summary or "")

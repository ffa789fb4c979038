from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import replace

import pytest

from contextwarden.exceptions import SummaryRejected
from contextwarden.llm import AsyncFunctionModel, FunctionModel, RecordedRequest
from contextwarden.messages import Message
from contextwarden.session import AsyncSession, Session
from contextwarden.summarize import (
    AsyncBackgroundSummarizer,
    AsyncLLMSummarizer,
    BackgroundSummarizer,
    ExtractiveSummarizer,
    LLMSummarizer,
)
from contextwarden.tokens import get_counter

from ._histories import coding_session, faithful, request, support_history

CL100K = get_counter("tiktoken:cl100k_base")
EXTRACTIVE = ExtractiveSummarizer(counter=CL100K)


class Gated:
    """A model that answers like `faithful` once its gate opens, numbering its summaries."""

    def __init__(self, *, fail: bool = False) -> None:
        self.gate = threading.Event()
        self.prompts: list[str] = []
        self.fail = fail

    def __call__(self, messages: Sequence[Message], _: RecordedRequest) -> str:
        self.gate.wait(10)
        self.prompts.append(messages[-1].text)
        if self.fail:
            raise RuntimeError("summarizer model down")
        return faithful(messages[-1].text).replace("Task: handle", f"Task: (llm {len(self.prompts)}) handle")


def _background(model: Gated, **kwargs: object) -> BackgroundSummarizer:
    return BackgroundSummarizer(LLMSummarizer(FunctionModel(model), counter=CL100K, deadline_s=10, **kwargs))  # type: ignore[arg-type]


def test_answers_at_once_and_offers_the_model_summary_for_the_same_span() -> None:
    model = Gated()
    bg = _background(model)
    msgs = support_history()
    req = request(msgs[:4], 500)
    quick = bg.summarize(req)
    assert quick == EXTRACTIVE.summarize(req)  # returned while the model is still blocked
    assert model.prompts == []
    assert bg.take_ready(quick, req.span) is None
    model.gate.set()
    assert bg.wait(5)
    assert bg.take_ready(quick, ("m1", "other")) is None  # another span: not this summary's replacement
    better = bg.take_ready(quick, req.span)
    assert better is not None and better.startswith("Task: (llm 1) handle")
    assert "ORD-48213" in better
    assert bg.take_ready(quick, req.span) is None  # handed out once
    assert bg.merged == 1
    bg.close()


def test_the_next_compaction_folds_into_the_model_summary() -> None:
    model = Gated()
    model.gate.set()
    bg = _background(model)
    msgs = support_history()
    first = request(msgs[:4], 500)
    quick = bg.summarize(first)
    assert bg.wait(5)
    second = request(msgs[4:], 500, previous=quick)
    second = replace(second, span=("m1", "m8"))
    out = bg.summarize(second)
    llm_first = faithful(model.prompts[0]).replace("Task: handle", "Task: (llm 1) handle")
    # the messages evicted meanwhile are summarized on top of the model's summary of the first span
    assert out == EXTRACTIVE.summarize(replace(second, previous=llm_first))
    assert out.startswith("Task: (llm 1) handle")
    assert bg.wait(5)
    assert "(llm 1)" in model.prompts[1]  # and the model folds its own first summary too
    bg.close()


def test_a_job_queued_behind_a_running_one_folds_into_its_result() -> None:
    model = Gated()
    bg = _background(model)
    msgs = support_history()
    quick = bg.summarize(request(msgs[:4], 500))
    bg.summarize(replace(request(msgs[4:], 500, previous=quick), span=("m1", "m8")))  # first job still blocked
    model.gate.set()
    assert bg.wait(5)
    assert len(model.prompts) == 2
    assert "Previous summary" in model.prompts[1] and "(llm 1)" in model.prompts[1]
    bg.close()


def test_a_background_failure_is_reported_on_the_next_call() -> None:
    model = Gated(fail=True)
    model.gate.set()
    bg = _background(model)
    msgs = support_history()
    quick = bg.summarize(request(msgs[:4], 500))
    assert bg.wait(5)
    second = replace(request(msgs[4:], 500, previous=quick), span=("m1", "m8"))
    with pytest.raises(SummaryRejected) as caught:
        bg.summarize(second)
    assert caught.value.reason == "error"
    assert caught.value.fallback == EXTRACTIVE.summarize(second)
    assert bg.last_failure is not None and "summarizer model down" in bg.last_failure.detail
    assert bg.take_ready(quick, ("m1", "m4")) is None
    bg.close()
    failing = Gated(fail=True)
    failing.gate.set()
    quiet = _background(failing, on_failure="fallback")
    quick = quiet.summarize(request(msgs[:4], 500))
    assert quiet.wait(5)
    second = replace(request(msgs[4:], 500, previous=quick), span=("m1", "m8"))
    assert quiet.summarize(second) == EXTRACTIVE.summarize(second)  # no raise: the fallback is returned
    quiet.close()


def test_a_session_never_waits_for_the_model() -> None:
    model = Gated()  # never opened during prepare()
    bg = _background(model)
    msgs, _ = coding_session(40)
    session = Session(window=3000, counter=CL100K, reserved_output=0, summarizer=bg)
    session.add(msgs)
    view = session.prepare(format="internal")
    assert view.status.compactions.get("summarize") == 1
    assert model.prompts == []
    model.gate.set()
    assert bg.wait(5)
    assert session.engine.summary is not None
    assert bg.take_ready(session.engine.summary, session.engine.summary_span) is not None
    bg.close()


@pytest.mark.anyio
async def test_async_twin_answers_at_once_and_merges_later() -> None:
    gate = asyncio.Event()
    prompts: list[str] = []

    async def reply(messages: Sequence[Message], _: RecordedRequest) -> str:
        await gate.wait()
        prompts.append(messages[-1].text)
        return faithful(messages[-1].text).replace("Task: handle", f"Task: (llm {len(prompts)}) handle")

    bg = AsyncBackgroundSummarizer(AsyncLLMSummarizer(AsyncFunctionModel(reply), counter=CL100K, deadline_s=10))
    msgs = support_history()
    first = request(msgs[:4], 500)
    quick = await bg.summarize(first)
    assert quick == EXTRACTIVE.summarize(first) and prompts == []
    second = replace(request(msgs[4:], 500, previous=quick), span=("m1", "m8"))
    await bg.summarize(second)  # queued behind the first
    gate.set()
    assert await bg.wait(5)
    assert len(prompts) == 2 and "(llm 1)" in prompts[1]
    assert bg.take_ready(quick, first.span) is not None

    session = AsyncSession(window=3000, counter=CL100K, reserved_output=0, summarizer=bg)
    session.add(coding_session(40)[0])
    view = await session.prepare(format="internal")
    assert view.status.compactions.get("summarize") == 1
    await bg.aclose()


def test_a_degraded_request_queues_no_model_job() -> None:
    from dataclasses import dataclass

    from contextwarden.summarize.base import SummaryRequest

    @dataclass(frozen=True, kw_only=True)
    class DegradedRequest(SummaryRequest):
        degraded: bool = True

    model = Gated()
    model.gate.set()
    bg = _background(model)
    base = request(support_history(), 400)
    out = bg.summarize(DegradedRequest(previous=None, messages=base.messages, max_tokens=400, span=base.span))
    assert out == EXTRACTIVE.summarize(base)
    assert bg.wait(5) and model.prompts == []
    assert BackgroundSummarizer.supports_degraded and LLMSummarizer.supports_degraded
    assert ExtractiveSummarizer.supports_degraded
    bg.close()

"""The LLM-as-judge protocol over HTTP against the scripted OpenAI-compatible server.

The server's script is a function that plays an honest model: it answers a question with the
identifier of the asked kind when the conversation it was sent contains one (else "unknown"),
and judges two answers equal when they are the same text.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from contextwarden import Message
from contextwarden.exceptions import UsageError
from contextwarden.health import HealthMonitor, ProcessHealth
from contextwarden.health.judge import (
    JUDGE_PROMPT,
    QUESTIONS_PROMPT,
    ajudge_fidelity,
    judge_fidelity,
    parse_questions,
)
from contextwarden.llm import AsyncOpenAIChatModel, OpenAIChatModel
from contextwarden.testing import ScriptedOpenAIServer

BEFORE = [
    Message.system("You are a support agent."),
    Message.user("Refund order ORD-48213 for customer CUS-9917 to card CARD-5521."),
    Message.assistant("Refund of ORD-48213 issued to CARD-5521."),
]
FAITHFUL = [Message.user("Summary: refund of ORD-48213 for CUS-9917 issued to CARD-5521.")]
LOSSY = [Message.user("Summary: refund of ORD-48213 issued to CARD-5521.")]  # drops the customer id

_KINDS = {"order": r"ORD-\d+", "customer": r"CUS-\d+", "card": r"CARD-\d+"}


def _honest_model(body: dict[str, Any]) -> str:
    messages = body["messages"]
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    last = messages[-1]["content"]
    if system.startswith(JUDGE_PROMPT[:40]):
        a = re.search(r"Answer A: (.*)", last)
        b = re.search(r"Answer B: (.*)", last)
        return "AGREE" if a and b and a.group(1) == b.group(1) else "DISAGREE\nB lacks the fact."
    if system.startswith(QUESTIONS_PROMPT[:40]):
        return "1. Which order was refunded?\n2. Which customer asked?\n- Which card got the money?\nThanks!"
    context = messages[0]["content"]
    for word, pattern in _KINDS.items():
        if word in last.rsplit("Question:", 1)[-1]:
            found = re.search(pattern, context)
            return found.group(0) if found else "unknown"
    return "unknown"


def test_questions_from_the_model_and_a_lossy_summary_scored_by_the_judge() -> None:
    with ScriptedOpenAIServer(default=_honest_model) as server:
        with OpenAIChatModel("judge", base_url=server.base_url) as model:
            faithful = judge_fidelity(model, BEFORE, FAITHFUL)
            lossy = judge_fidelity(model, BEFORE, LOSSY)
        sent = list(server.requests)
    assert faithful.fidelity == 1.0 and faithful.questions_from_model
    assert [v.question for v in faithful.verdicts] == [
        "Which order was refunded?",
        "Which customer asked?",
        "Which card got the money?",
    ]
    assert lossy.fidelity == pytest.approx(2 / 3)
    lost = [v for v in lossy.verdicts if not v.agree]
    assert [(v.before, v.after) for v in lost] == [("CUS-9917", "unknown")]
    assert faithful.calls == 1 + 3 * 3 and lossy.unparsed == 0
    assert all(b["temperature"] == 0.0 for b in sent)
    assert lossy.to_dict()["agree"] == 2


def test_given_questions_skip_the_question_request_and_the_score_feeds_the_monitor() -> None:
    monitor = HealthMonitor(process=ProcessHealth())
    with ScriptedOpenAIServer(default=_honest_model) as server:
        with OpenAIChatModel("judge", base_url=server.base_url) as model:
            report = judge_fidelity(model, BEFORE, LOSSY, questions=["Which customer asked?"])
        assert len(server.requests) == 3
    assert report.fidelity == 0.0 and not report.questions_from_model
    monitor.record_fidelity(report.fidelity, source="LLM judge")
    assert [a.name for a in monitor.alerts] == ["low-fidelity"]


def test_a_judge_reply_out_of_format_counts_as_disagreeing() -> None:
    script = ["CUS-9917", "CUS-9917", "They look the same to me."]
    with ScriptedOpenAIServer(script) as server:
        with OpenAIChatModel("judge", base_url=server.base_url) as model:
            report = judge_fidelity(model, BEFORE, FAITHFUL, questions=["Which customer asked?"])
    assert report.fidelity == 0.0 and report.unparsed == 1


@pytest.mark.anyio
async def test_async_twin_gives_the_same_report() -> None:
    with ScriptedOpenAIServer(default=_honest_model) as server:
        async with AsyncOpenAIChatModel("judge", base_url=server.base_url) as model:
            report = await ajudge_fidelity(model, BEFORE, LOSSY)
        with OpenAIChatModel("judge", base_url=server.base_url) as sync_model:
            sync = judge_fidelity(sync_model, BEFORE, LOSSY)
    assert report.to_dict() == sync.to_dict()


def test_parse_questions_and_bad_options() -> None:
    assert parse_questions("1) What is X?\n* What is Y?\nnot a question\nWhat is X?", 5) == ["What is X?", "What is Y?"]
    with OpenAIChatModel("m", base_url="http://127.0.0.1:9") as model, pytest.raises(UsageError, match="n_questions"):
        judge_fidelity(model, BEFORE, LOSSY, n_questions=0)


def test_a_model_that_answers_nothing_never_scores_fidelity() -> None:
    with ScriptedOpenAIServer(default=lambda body: "Done: PUT is idempotent.") as server:
        with OpenAIChatModel("judge", base_url=server.base_url) as model:
            asked = judge_fidelity(model, BEFORE, FAITHFUL)
            given = judge_fidelity(model, BEFORE, FAITHFUL, questions=["Which customer asked?", "Which card?"])
    assert asked.fidelity == 0.0 and asked.verdicts == () and asked.unusable_replies == {"questions": 1}
    assert given.fidelity == 0.0 and given.unusable == 2 * 2 + 2
    assert given.unusable_replies == {"answer": 4, "verdict": 2}
    assert given.to_dict()["unusable"] == 6 and not any(v.usable for v in given.verdicts)


def test_an_agreeing_judge_does_not_rescue_canned_answers() -> None:
    with ScriptedOpenAIServer(default=lambda body: "AGREE") as server:
        with OpenAIChatModel("judge", base_url=server.base_url) as model:
            report = judge_fidelity(model, BEFORE, LOSSY, questions=["Which customer asked?"])
    assert report.fidelity == 0.0 and report.unusable_replies == {"answer": 2}

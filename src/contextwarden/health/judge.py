"""Fidelity by an LLM judge: ask the same questions of the context before and after a compaction,
and let a judge decide whether each pair of answers agrees. Fidelity = agreeing / total.

The protocol is written once, sans I/O, as a generator (`judge_flow`) that yields a `JudgeCall`
(messages to send) and receives the reply text; `judge_fidelity` drives it with a `Model` and
`ajudge_fidelity` with an `AsyncModel`, so it runs against any OpenAI-compatible server through
the client layer (`contextwarden.llm`), including the scripted test server.

Steps: the questions (given, or written by the model from the "before" context: one request),
then per question an answer from the context before, an answer from the context after, and a
verdict. The judge replies ``AGREE`` or ``DISAGREE`` on its first line; any other reply counts
as disagreeing and is reported as unparsed (a judge that cannot follow the format is no evidence
of fidelity).

Every reply is checked before it counts, and an unusable one scores as a failure: a question
request that yields no question (the report then has no verdict and a fidelity of 0, never 1),
an empty answer, an answer that repeats a reply the model gave to another step of the protocol
(a model that says "Done: PUT is idempotent." to everything), and a verdict out of format. The
report counts the unusable replies by step.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..exceptions import UsageError
from ..llm import AsyncModel, Model
from ..messages import Message
from ..summarize import readable_text

__all__ = [
    "JudgeCall",
    "JudgeReport",
    "JudgeVerdict",
    "ajudge_fidelity",
    "judge_fidelity",
    "judge_flow",
    "parse_questions",
]

QUESTIONS_PROMPT = (
    "You write test questions about a conversation between a user and an AI agent. Write {n} short "
    "questions whose answers are specific facts stated in it (identifiers, numbers, paths, the user's "
    "requirements, decisions taken, work still open). One question per line, no numbering, no answers."
)
ANSWER_PROMPT = (
    "Answer the question from the conversation above only, in one short line. If the conversation does "
    "not say, answer exactly: unknown.\n\nQuestion: {question}"
)
JUDGE_PROMPT = (
    "You compare two answers to the same question about one conversation. Answer A was given with the "
    "full conversation, answer B after it was compacted. Reply AGREE on the first line when B states the "
    "same facts as A (wording may differ), DISAGREE when B is missing, vaguer, 'unknown' or different."
)

_VERDICT_RE = re.compile(r"^\W*(AGREE|DISAGREE)\b", re.IGNORECASE)
_NUMBERING_RE = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s*")


@dataclass(frozen=True, kw_only=True)
class JudgeCall:
    """One request of the protocol: the messages to send and what the reply is for."""

    purpose: Literal["questions", "answer-before", "answer-after", "verdict"]
    messages: tuple[Message, ...]
    max_tokens: int


@dataclass(frozen=True, kw_only=True)
class JudgeVerdict:
    """One question: both answers and the judge's verdict."""

    question: str
    before: str
    after: str
    agree: bool
    parsed: bool
    """False when the judge's reply did not start with AGREE or DISAGREE (counted as disagreeing)."""
    usable: bool = True
    """False when an answer or the verdict was unusable (the question then counts as a failure)."""


@dataclass(frozen=True, kw_only=True)
class JudgeReport:
    """The verdicts and the fidelity they give."""

    verdicts: tuple[JudgeVerdict, ...]
    calls: int
    """Model requests made."""
    questions_from_model: bool
    unusable_replies: dict[str, int] = field(default_factory=dict)
    """Replies that could not count, by step (``questions``, ``answer``, ``verdict``)."""

    @property
    def fidelity(self) -> float:
        """Agreeing / total; 0.0 with no verdict (a judge that asked nothing is no evidence of fidelity)."""
        if not self.verdicts:
            return 0.0
        return sum(v.agree for v in self.verdicts) / len(self.verdicts)

    @property
    def unparsed(self) -> int:
        return sum(not v.parsed for v in self.verdicts)

    @property
    def unusable(self) -> int:
        """Replies that could not count (each scored as a failure)."""
        return sum(self.unusable_replies.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "fidelity": round(self.fidelity, 4),
            "questions": len(self.verdicts),
            "agree": sum(v.agree for v in self.verdicts),
            "unparsed": self.unparsed,
            "unusable": self.unusable,
            "unusable_by_step": dict(self.unusable_replies),
            "calls": self.calls,
            "verdicts": [
                {"question": v.question, "before": v.before, "after": v.after, "agree": v.agree, "usable": v.usable}
                for v in self.verdicts
            ],
        }


def _context(messages: Sequence[Message], limit: int) -> Message:
    """The conversation as one user message (any model reads it; tool pairs need no checking)."""
    text = readable_text(messages)
    if len(text) > limit:  # the newest part: that is what the next turn works from
        text = "[...]\n" + text[-limit:]
    return Message.user("Conversation:\n\n" + text)


def parse_questions(text: str, limit: int) -> list[str]:
    """Questions from the model's reply: one per line, numbering and bullets removed."""
    out: list[str] = []
    for line in text.splitlines():
        q = _NUMBERING_RE.sub("", line).strip()
        if q.endswith("?") and q not in out:
            out.append(q)
    return out[:limit]


def judge_flow(
    before: Sequence[Message],
    after: Sequence[Message],
    *,
    questions: Sequence[str] = (),
    n_questions: int = 8,
    answer_tokens: int = 120,
    max_context_chars: int = 400_000,
) -> Generator[JudgeCall, str, JudgeReport]:
    """The protocol as a generator: yields each `JudgeCall`, receives the reply text, returns the report."""
    if n_questions < 1 or answer_tokens < 1:
        raise UsageError(
            f"judge_flow(n_questions={n_questions}, answer_tokens={answer_tokens}): both must be at least 1."
        )
    calls = 0
    asked = [q.strip() for q in questions if q.strip()]
    from_model = not asked
    ctx_before = _context(before, max_context_chars)
    ctx_after = _context(after, max_context_chars)
    unusable: dict[str, int] = {}
    other_steps: set[str] = set()
    """Replies to the question request and to verdicts: an answer equal to one of them answered nothing."""
    if from_model:
        prompt = Message.system(QUESTIONS_PROMPT.format(n=n_questions))
        reply = yield JudgeCall(purpose="questions", messages=(prompt, ctx_before), max_tokens=60 * n_questions)
        calls += 1
        asked = parse_questions(reply, n_questions)
        other_steps.add(_norm(reply))
        if not asked:
            unusable["questions"] = 1
    answered: list[tuple[str, str, str, str]] = []
    for question in asked:
        ask = Message.user(ANSWER_PROMPT.format(question=question))
        a = yield JudgeCall(purpose="answer-before", messages=(ctx_before, ask), max_tokens=answer_tokens)
        b = yield JudgeCall(purpose="answer-after", messages=(ctx_after, ask), max_tokens=answer_tokens)
        pair = Message.user(f"Question: {question}\nAnswer A: {a.strip()}\nAnswer B: {b.strip()}")
        verdict = yield JudgeCall(purpose="verdict", messages=(Message.system(JUDGE_PROMPT), pair), max_tokens=8)
        calls += 3
        other_steps.add(_norm(verdict))
        answered.append((question, a.strip(), b.strip(), verdict))
    verdicts: list[JudgeVerdict] = []
    for question, a, b, verdict in answered:
        bad_answers = sum(not x or _norm(x) in other_steps for x in (a, b))
        match = _VERDICT_RE.match(verdict.strip())
        if bad_answers:
            unusable["answer"] = unusable.get("answer", 0) + bad_answers
        if match is None:
            unusable["verdict"] = unusable.get("verdict", 0) + 1
        usable = not bad_answers and match is not None
        agree = usable and match is not None and match.group(1).upper() == "AGREE"
        verdicts.append(
            JudgeVerdict(question=question, before=a, after=b, agree=agree, parsed=match is not None, usable=usable)
        )
    return JudgeReport(
        verdicts=tuple(verdicts), calls=calls, questions_from_model=from_model, unusable_replies=unusable
    )


def _norm(reply: str) -> str:
    return " ".join(reply.split()).casefold()


def judge_fidelity(
    model: Model,
    before: Sequence[Message],
    after: Sequence[Message],
    *,
    questions: Sequence[str] = (),
    n_questions: int = 8,
    answer_tokens: int = 120,
) -> JudgeReport:
    """Run the judge protocol with ``model`` (sync); see `judge_flow`."""
    flow = judge_flow(before, after, questions=questions, n_questions=n_questions, answer_tokens=answer_tokens)
    try:
        call = next(flow)
        while True:
            reply = model.request(call.messages, max_tokens=call.max_tokens, temperature=0.0)
            call = flow.send(reply.text)
    except StopIteration as done:
        report: JudgeReport = done.value
        return report


async def ajudge_fidelity(
    model: AsyncModel,
    before: Sequence[Message],
    after: Sequence[Message],
    *,
    questions: Sequence[str] = (),
    n_questions: int = 8,
    answer_tokens: int = 120,
) -> JudgeReport:
    """Run the judge protocol with ``model`` (async); see `judge_flow`."""
    flow = judge_flow(before, after, questions=questions, n_questions=n_questions, answer_tokens=answer_tokens)
    try:
        call = next(flow)
        while True:
            reply = await model.request(call.messages, max_tokens=call.max_tokens, temperature=0.0)
            call = flow.send(reply.text)
    except StopIteration as done:
        report: JudgeReport = done.value
        return report

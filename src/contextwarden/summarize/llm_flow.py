"""The LLM summary as a sans-IO flow: planning, prompting, map-reduce over chunks, and checking the reply.

`BaseLLM` holds everything `LLMSummarizer` and `AsyncLLMSummarizer` (in `summarize.llm`, which
describes the checks) share: the flow yields batches of `SummaryCall` and receives the replies;
each twin only carries the calls out, within the summary's deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..exceptions import ConfigError, SummaryRejected
from ..ledger_entries import describe_call
from ..llm.base import ModelResponse
from ..messages import Message
from ..tokens import TokenCounter
from ..usage import RequestUsage, SessionUsage
from ._sections import HEADINGS, Sections, compose, parse_summary
from .base import SummaryRequest, check_summary
from .extractive import BaseExtractive

__all__ = [
    "SYSTEM_PROMPT",
    "BaseLLM",
    "DeadlinePassed",
    "FailureKind",
    "SummaryCall",
    "SummaryFailure",
    "SummaryPlan",
    "SummaryResult",
    "SummarySource",
]

FailureKind = Literal["timeout", "error", "rejected", "lost-identifiers"]
"""Why an LLM summary was not used as it came."""
SummarySource = Literal["llm", "repaired", "fallback", "extractive"]
"""Where the text of a `SummaryResult` came from (``extractive``: no model was asked)."""


@dataclass(frozen=True, kw_only=True)
class SummaryFailure:
    """Why the last summary did not come from the model as it was."""

    kind: FailureKind
    detail: str
    """What happened, with the numbers (deadline, identifiers lost, the model's error)."""
    span: tuple[str, str]
    """The span of message ids the summary was for."""


@dataclass(frozen=True, kw_only=True)
class SummaryResult:
    """One summarization: the text to use and how it was made."""

    text: str
    """The summary to use (the model's, the model's with identifiers restored, or the fallback)."""
    source: SummarySource
    failure: SummaryFailure | None
    """Set when the model failed or its summary was rejected (the circuit breaker counts it)."""
    span: tuple[str, str]
    calls: int = 0
    """Model requests made (map, reduce and retries included)."""
    chunks: int = 1
    """Chunks the messages were cut into (more than 1: the map-reduce path was taken)."""
    restored: tuple[str, ...] = ()
    """Identifiers and constraints the model dropped that were put back."""
    usage: RequestUsage = field(default_factory=RequestUsage)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when no failure is to be counted."""
        return self.failure is None


SYSTEM_PROMPT = """You maintain the running summary of an AI agent's work. The summary replaces the \
messages it covers: the agent will rely on it alone, so it must keep every fact still needed.
Write exactly these sections, each heading on its own line followed by short "- " items:
{headings}
Rules:
- Copy identifiers exactly as written: ids, codes, file paths, numbers, amounts, dates, URLs, function \
names, error messages. Never round, abbreviate or translate them.
- Under "User constraints", quote the user's requirements, limits, deadlines and preferences verbatim.
- Fold the previous summary in: keep what still holds, update what changed, drop what was superseded.
- Under "Errors and fixes", pair each error with the fix that worked, if any.
- State only what the messages say; no preamble, no closing remarks.
- Stay under {max_tokens} tokens."""


class DeadlinePassed(Exception):
    """The summary's deadline passed before the model answered."""


class _Unfit(Exception):
    """The text to summarize cannot be fitted into the summarizer model's window within its limits."""


@dataclass(frozen=True)
class SummaryCall:
    """One model request the flow asks for (the twins make it, in a batch with the others)."""

    messages: tuple[Message, ...]
    max_tokens: int


@dataclass
class SummaryPlan:
    """One summary in the making: the request, its extractive fallback, the rendered input, the calls so far."""

    request: SummaryRequest
    fallback: str
    sections: Sections
    expected: list[str]
    """Identifiers the extractive summary kept: the model's summary must keep them too."""
    constraints: list[str]
    lines: list[str]
    """The messages rendered for the prompt, one entry each (long ones split later)."""
    started: float
    calls: int = 0
    chunks: int = 1
    usage: RequestUsage = field(default_factory=RequestUsage)
    prompts: list[str] = field(default_factory=list)
    """The user prompts sent so far (to recognise a reply that echoes one)."""


_SCAFFOLD = (
    "to fold in:",
    "write the summary.",
    "summarize this part.",
    "merge them into one summary with the sections above",
    "previous summary (covers messages from",
    "identifiers that must appear verbatim:",
    "user constraints to quote verbatim:",
    "summaries of consecutive parts of",
    "you maintain the running summary of an ai agent",
    "write exactly these sections",
)
"""Phrases of the summarizer's own prompts (lower case): a summary never needs them."""
_COPIED_LINE_CHARS = 40
_MAX_COPIED_SHARE = 0.6


def _echo(plan: SummaryPlan, candidate: str) -> str | None:
    """How ``candidate`` echoes the prompt instead of summarizing, or None."""
    lines = [line.strip() for line in candidate.splitlines() if line.strip()]
    if any(line in ("<<<", ">>>") for line in lines):
        return "it repeats the prompt's <<< >>> delimiters"
    lowered = candidate.lower()
    for phrase in _SCAFFOLD:
        if phrase in lowered:
            return f"it repeats the prompt's instruction {phrase!r}"
    for m in plan.request.messages:
        if f"[{m.message_id}] {m.role}" in candidate:
            return f"it repeats the prompt's message lines ('[{m.message_id}] {m.role}: ...')"
    prompt = "\n".join(plan.prompts)
    total = sum(len(line) for line in lines)
    copied = sum(
        len(line)
        for line in lines
        if len(line) >= _COPIED_LINE_CHARS
        and line.lstrip("-* ").strip('"') in prompt
        and not any(c in line for c in plan.constraints)  # constraints are quoted verbatim on purpose
    )
    if total and copied / total >= _MAX_COPIED_SHARE:
        return f"{copied / total:.0%} of it is lines copied verbatim from the prompt"
    return None


def _render(m: Message) -> str:
    head = f"[{m.message_id}] "
    if m.role == "tool":
        status = " ERROR" if m.is_error else ""
        return f"{head}tool {m.name or ''} result{status}: {m.text}"
    parts: list[str] = []
    if m.text.strip():
        parts.append(f"{head}{m.role}: {m.text}")
    for c in m.tool_calls:
        parts.append(f"{head}{m.role} calls {describe_call(c.name, c.arguments, limit=2000)}")
    return "\n".join(parts) if parts else f"{head}{m.role}: (empty)"


class BaseLLM:
    """Prompting, chunking and validation shared by the sync and async twins."""

    supports_degraded = True
    checks_identifiers = True
    """This summarizer keeps identifiers by its own rules; the summarize layer's identifier check is skipped."""
    """A request marked ``degraded`` (the session's breaker is open) gets the extractive summary."""

    def __init__(
        self,
        *,
        fallback: BaseExtractive,
        max_input_tokens: int,
        deadline_s: float,
        max_lost_identifiers: float,
        counter: TokenCounter | None,
        on_failure: Literal["raise", "fallback"],
        temperature: float | None,
        max_concurrency: int,
        max_calls: int,
        clock: Callable[[], float],
    ) -> None:
        if max_input_tokens < 256:
            raise ConfigError(
                f"max_input_tokens={max_input_tokens} is too small for a summary prompt; give the summarizer "
                "model's input window (e.g. 8000 for an 8k model), at least 256.",
                key="max_input_tokens",
            )
        if deadline_s <= 0:
            raise ConfigError(f"deadline_s={deadline_s} must be > 0 seconds (e.g. 20).", key="deadline_s")
        if not 0.0 <= max_lost_identifiers <= 1.0:
            raise ConfigError(
                f"max_lost_identifiers={max_lost_identifiers} must be a share in [0, 1] (e.g. 0.2).",
                key="max_lost_identifiers",
            )
        if on_failure not in ("raise", "fallback"):
            raise ConfigError(f"on_failure={on_failure!r}; use 'raise' or 'fallback'.", key="on_failure")
        self.counter: TokenCounter = counter if counter is not None else fallback.counter
        """Counts the summary against ``max_tokens`` and the prompt against ``max_input_tokens``."""
        self.fallback = fallback
        """The deterministic summarizer used when the model fails (and for the identifier check)."""
        self.max_input_tokens = max_input_tokens
        self.deadline_s = deadline_s
        self.max_lost_identifiers = max_lost_identifiers
        self.on_failure: Literal["raise", "fallback"] = on_failure
        self.temperature = temperature
        self.max_concurrency = max(1, max_concurrency)
        self.max_calls = max(1, max_calls)
        self.clock = clock
        self.last_result: SummaryResult | None = None
        """The most recent result (also when it was a success)."""
        self.last_failure: SummaryFailure | None = None
        """The most recent failure; stays set after later successes (compare with ``last_result``)."""
        self.failures = 0
        """Failures so far."""
        self.usage = SessionUsage()
        """Tokens the summarizer model used, summed over every request."""
        self._lock = threading.Lock()

    def take_ready(self, summary: str | None, span: tuple[str, str] | None = None) -> str | None:
        """None: every summary is final when returned (see `SummarizerCapabilities.take_ready`)."""
        return None

    # --- planning ---------------------------------------------------------------------------
    def _plan(self, request: SummaryRequest) -> SummaryPlan:
        sections = self.fallback._build(request)
        text = compose(
            sections, max_tokens=request.max_tokens, counter=self.counter, facts_share=self.fallback.facts_share
        )
        expected = [i for i in sections.ids if i in text]
        constraints = [c for c in sections.constraints if c in text]
        lines = [_render(m) for m in request.messages]
        return SummaryPlan(
            request=request,
            fallback=text,
            sections=sections,
            expected=expected,
            constraints=constraints,
            lines=lines,
            started=self.clock(),
        )

    def _system(self, max_tokens: int) -> Message:
        headings = "\n".join(f"{h}:" for k, h in HEADINGS.items() if k != "other")
        return Message.system(SYSTEM_PROMPT.format(headings=headings, max_tokens=max_tokens))

    def _keep_block(self, constraints: Sequence[str], ids: Sequence[str], room: int) -> str:
        """What the summary must keep verbatim (constraints first, then identifiers), within ``room`` tokens."""
        lines: list[str] = []
        used = 0
        for c in constraints:
            cost = self.counter.count_text(c) + 3
            if used + cost > room:
                break
            lines.append(f'- "{c}"')
            used += cost
        chosen: list[str] = []
        for i in ids:
            cost = self.counter.count_text(i) + 2
            if used + cost > room:
                break
            chosen.append(i)
            used += cost
        out = ""
        if lines:
            out += "User constraints to quote verbatim:\n" + "\n".join(lines) + "\n"
        if chosen:
            out += "Identifiers that must appear verbatim: " + " · ".join(chosen) + "\n"
        return out

    def _flow(self, plan: SummaryPlan, budget: int) -> Generator[list[SummaryCall], list[str], str]:
        """The model calls of one summary (sans-IO): yields batches of calls, receives their texts."""
        req = plan.request
        a, b = req.span
        out_tokens = req.max_tokens
        reply_limit = int(out_tokens * 1.25) + 32  # slack: the model's tokenizer is not ours
        system = self._system(out_tokens)
        fixed = self.counter.count_text(system.text) + 64
        previous = f"Previous summary (covers messages from {a}):\n<<<\n{req.previous}\n>>>\n\n" if req.previous else ""
        prev_cost = self.counter.count_text(previous)
        keep_room = max(0, min(400, budget // 8))
        keep = self._keep_block(plan.constraints, plan.expected, keep_room)
        body = "\n".join(plan.lines)
        if fixed + prev_cost + self.counter.count_text(keep) + self.counter.count_text(body) <= budget:
            prompt = f"{previous}New messages ({a}..{b}) to fold in:\n<<<\n{body}\n>>>\n\n{keep}\nWrite the summary."
            (text,) = yield [SummaryCall((system, Message.user(prompt)), reply_limit)]
            return text
        # map: chunks of messages that fit one call each
        map_tokens = max(64, min(out_tokens, budget // 4))
        map_limit = int(map_tokens * 1.25) + 32
        map_system = self._system(map_tokens)
        room = budget - fixed - keep_room - 16
        if room < 64:
            raise _Unfit(f"a prompt needs {fixed + keep_room} tokens before any message")
        chunks = self._chunks(plan.lines, room)
        plan.chunks = len(chunks)
        fan_in = max(2, (room - prev_cost) // (map_limit + 8))
        needed = len(chunks) + -(-(len(chunks) - 1) // (fan_in - 1))
        if needed > self.max_calls:
            raise _Unfit(
                f"map-reduce over {len(chunks)} chunks needs about {needed} calls, over max_calls={self.max_calls}"
            )
        calls = []
        for n, chunk in enumerate(chunks, 1):
            part_keep = self._keep_block(
                [c for c in plan.constraints if c in chunk], [i for i in plan.expected if i in chunk], keep_room
            )
            prompt = (
                f"Messages, part {n} of {len(chunks)} of the span {a}..{b} (the parts are summarized separately, "
                f"then merged):\n<<<\n{chunk}\n>>>\n\n{part_keep}\nSummarize this part."
            )
            calls.append(SummaryCall((map_system, Message.user(prompt)), map_limit))
        partials: list[str] = list((yield calls))
        # reduce: merge the partials (in groups while they do not fit one call) and the previous summary
        base_room = budget - fixed - keep_room - 16
        while True:
            total = sum(self.counter.count_text(p) + 8 for p in partials)
            if total + prev_cost <= base_room:
                parts = "\n\n".join(f"Part {n}:\n{p}" for n, p in enumerate(partials, 1))
                prompt = (
                    f"{previous}Summaries of consecutive parts of the new messages {a}..{b}, in order:\n<<<\n{parts}"
                    f"\n>>>\n\n{keep}\nMerge them into one summary with the sections above."
                )
                (text,) = yield [SummaryCall((system, Message.user(prompt)), reply_limit)]
                return text
            groups = self._groups(partials, base_room - prev_cost if len(partials) > 1 else base_room)
            if len(groups) >= len(partials):
                raise _Unfit(
                    f"the partial summaries ({total} tokens) and the previous summary ({prev_cost}) "
                    "cannot be merged within one call"
                )
            calls = []
            for group in groups:
                parts = "\n\n".join(f"Part {n}:\n{p}" for n, p in enumerate(group, 1))
                prompt = (
                    f"Summaries of consecutive parts of messages {a}..{b}, in order:\n<<<\n{parts}\n>>>\n\n"
                    "Merge them into one summary with the sections above."
                )
                calls.append(SummaryCall((map_system, Message.user(prompt)), map_limit))
            partials = list((yield calls))

    def _chunks(self, lines: list[str], room: int) -> list[str]:
        chunks: list[str] = []
        current: list[str] = []
        used = 0
        for line in lines:
            cost = self.counter.count_text(line) + 1
            if cost > room:
                pieces = self._split(line, room)
                if current:
                    chunks.append("\n".join(current))
                    current, used = [], 0
                chunks.extend(pieces[:-1])
                current, used = [pieces[-1]], self.counter.count_text(pieces[-1]) + 1
                continue
            if used + cost > room and current:
                chunks.append("\n".join(current))
                current, used = [], 0
            current.append(line)
            used += cost
        if current:
            chunks.append("\n".join(current))
        return chunks

    def _split(self, line: str, room: int) -> list[str]:
        """A message longer than a chunk, cut into pieces that fit (at line or word breaks)."""
        pieces: list[str] = []
        rest = line
        while rest:
            size = min(len(rest), max(16, room * 3))
            while size > 16 and self.counter.count_text(rest[:size]) > room - 8:
                size = int(size * 0.8)
            if size < len(rest):
                cut = max(rest.rfind("\n", 0, size), rest.rfind(" ", 0, size))
                size = cut if cut > size // 2 else size
            pieces.append(rest[:size])
            rest = rest[size:].lstrip()
        total = len(pieces)
        return [f"(piece {n}/{total}) {p}" if total > 1 else p for n, p in enumerate(pieces, 1)]

    def _groups(self, partials: list[str], room: int) -> list[list[str]]:
        groups: list[list[str]] = [[]]
        used = 0
        for p in partials:
            cost = self.counter.count_text(p) + 8
            if used + cost > room and groups[-1]:
                groups.append([])
                used = 0
            groups[-1].append(p)
            used += cost
        return groups

    # --- outcome ----------------------------------------------------------------------------
    def _record_usage(self, plan: SummaryPlan, response: ModelResponse) -> str:
        plan.calls += 1
        plan.usage = plan.usage + response.usage
        with self._lock:
            self.usage.incr(response.usage)
        return response.text

    def _collect(self, plan: SummaryPlan, results: Sequence[ModelResponse | BaseException | None]) -> list[str]:
        """The texts of a batch; the answered calls are counted even when another one failed."""
        texts = [self._record_usage(plan, r) for r in results if isinstance(r, ModelResponse)]
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return texts

    def _validate(self, plan: SummaryPlan, candidate: str) -> SummaryResult:
        req = plan.request
        problem = check_summary(candidate)
        if problem is None:
            problem = _echo(plan, candidate)
        if problem is not None:
            return self._fail(plan, "rejected", f"the model's summary was rejected: {problem}")
        candidate = candidate.strip()
        lost_ids = [i for i in plan.expected if i not in candidate]
        lost_constraints = [c for c in plan.constraints if c not in candidate]
        restored = (*lost_constraints, *lost_ids)
        text = candidate
        if lost_constraints:
            text += "\nUser constraints (restored):\n" + "\n".join(f'- "{c}"' for c in lost_constraints)
        if lost_ids:
            text += "\nKey data (restored): " + " · ".join(lost_ids)
        if self.counter.count_text(text) > req.max_tokens:
            # too long (as written or once restored): refit by sections, identifiers and constraints first
            sections = parse_summary(candidate)
            sections.constraints = [*sections.constraints, *lost_constraints]
            text = compose(sections, max_tokens=req.max_tokens, counter=self.counter, extra_ids=lost_ids, clip_scale=3)
        share = len(lost_ids) / len(plan.expected) if plan.expected else 0.0
        if share > self.max_lost_identifiers:
            detail = (
                f"the model's summary dropped {len(lost_ids)} of {len(plan.expected)} identifiers "
                f"({share:.0%} > max_lost_identifiers={self.max_lost_identifiers:.0%}), e.g. {lost_ids[:5]}; "
                "they were restored from the extractive key data"
            )
            failure = SummaryFailure(kind="lost-identifiers", detail=detail, span=req.span)
            return self._result(plan, text, "repaired", failure, restored)
        return self._result(plan, text, "repaired" if restored else "llm", None, restored)

    def _fail(self, plan: SummaryPlan, kind: FailureKind, detail: str) -> SummaryResult:
        failure = SummaryFailure(kind=kind, detail=detail, span=plan.request.span)
        return self._result(plan, plan.fallback, "fallback", failure, ())

    def _result(
        self,
        plan: SummaryPlan,
        text: str,
        source: SummarySource,
        failure: SummaryFailure | None,
        restored: Sequence[str],
    ) -> SummaryResult:
        result = SummaryResult(
            text=text,
            source=source,
            failure=failure,
            span=plan.request.span,
            calls=plan.calls,
            chunks=plan.chunks,
            restored=tuple(restored),
            usage=plan.usage,
            elapsed_s=round(self.clock() - plan.started, 4),
        )
        with self._lock:
            self.last_result = result
            if failure is not None:
                self.last_failure = failure
                self.failures += 1
        return result

    def _degraded(self, request: SummaryRequest) -> SummaryResult | None:
        """A request marked ``degraded`` (the session's breaker is open) is answered without the model."""
        if not request.degraded:
            return None
        plan = self._plan(request)
        return self._result(plan, plan.fallback, "extractive", None, ())

    def _admit(self, plan: SummaryPlan, calls: list[SummaryCall]) -> float:
        """Seconds left for this batch; raises when the deadline passed or the call budget would."""
        if plan.calls + len(calls) > self.max_calls:
            raise _Unfit(f"the summary would need more than max_calls={self.max_calls} model calls")
        plan.prompts.extend(call.messages[-1].text for call in calls)
        return self._remaining(plan)

    def _remaining(self, plan: SummaryPlan) -> float:
        left = self.deadline_s - (self.clock() - plan.started)
        if left <= 0:
            raise DeadlinePassed()
        return left

    def _error_result(self, plan: SummaryPlan, exc: BaseException) -> SummaryResult:
        if isinstance(exc, DeadlinePassed):
            return self._fail(
                plan,
                "timeout",
                f"no summary within deadline_s={self.deadline_s:g}s ({plan.calls} calls answered); "
                "raise deadline_s or use BackgroundSummarizer to keep the model off the hot path",
            )
        if isinstance(exc, _Unfit):
            return self._fail(
                plan, "error", f"{exc} (max_input_tokens={self.max_input_tokens}); give the model's real window"
            )
        return self._fail(plan, "error", f"the summarizer model failed: {type(exc).__name__}: {exc}")

    def _deliver(self, result: SummaryResult) -> str:
        if result.failure is None or self.on_failure == "fallback":
            return result.text
        a, b = result.span
        raise SummaryRejected(
            f"summary of messages {a}..{b}: {result.failure.detail}; use the fallback summary it carries "
            f"({result.source}). Set on_failure='fallback' to get it returned instead.",
            reason=result.failure.kind,
            fallback=result.text,
            span=result.span,
        )

"""LLM summaries for the summary layer, checked before use, with the extractive summary as fallback.

`LLMSummarizer` (sync) and `AsyncLLMSummarizer` ask a model for the same structured sections the
extractive summarizer writes, folding the previous summary in and naming the span of message ids
the summary covers. Every reply is checked before it is used:

* empty, not text, or an error text (`check_summary`) → rejected;
* an echo of the prompt (its delimiters or instructions, the rendered ``[id] role:`` message
  lines, or mostly lines copied verbatim from it) → rejected; a model too small or confused to
  summarize often answers this way, and an echo keeps every identifier, so the identifier check
  alone would let it through;
* it drops more than ``max_lost_identifiers`` of the identifiers the extractive summary kept →
  the dropped ones (and dropped user constraints) are put back into its key data, and it counts
  as a failure; fewer drops are put back silently;
* longer than ``max_tokens`` → fitted section by section (identifiers first).

Input is bounded: when the messages do not fit ``max_input_tokens`` (the summarizer model's own
window), they are cut into chunks that do, each chunk is summarized (map), and the partial
summaries are merged, in groups if needed, into one (reduce). A model that still reports a
context overflow gets one more try with half the input per call.

On a model error, a timeout (``deadline_s`` bounds the whole summary, map-reduce included) or a
rejection, the extractive summary is used instead, ``last_failure`` records why, and (by default)
`SummaryRejected` is raised carrying that fallback text so that the session counts a failure
for its circuit breaker and still uses the fallback. ``on_failure="fallback"`` returns the
fallback text instead; `summarize_result` returns a `SummaryResult` without raising.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Literal

from ..exceptions import ContextOverflowError
from ..llm.base import AsyncModel, Model, ModelResponse
from ..tokens import TokenCounter, get_counter
from .base import SummaryRequest
from .extractive import AsyncExtractiveSummarizer, BaseExtractive, ExtractiveSummarizer
from .llm_flow import (
    BaseLLM,
    DeadlinePassed,
    FailureKind,
    SummaryCall,
    SummaryFailure,
    SummaryPlan,
    SummaryResult,
    SummarySource,
)

__all__ = [
    "AsyncLLMSummarizer",
    "FailureKind",
    "LLMSummarizer",
    "SummaryFailure",
    "SummaryResult",
    "SummarySource",
]


class LLMSummarizer(BaseLLM):
    """Structured running summaries written by a model, checked, with an extractive fallback.

    Args:
        model: The summarizer model (any `Model`: `OpenAIChatModel` against OpenAI, vLLM, Ollama,
            llama.cpp or LiteLLM; `AnthropicModel`; `TestModel` in tests).
        fallback: Used when the model fails, and for the identifier check (default: an
            `ExtractiveSummarizer` with ``counter``).
        max_input_tokens: Prompt tokens one call may take (the summarizer model's window minus
            its reply); longer input goes through map-reduce.
        deadline_s: Seconds the whole summary may take (map-reduce included); past it the
            fallback is used and the late replies are ignored.
        max_lost_identifiers: Share of the extractive summary's identifiers the model may drop
            before its summary counts as a failure (they are put back either way).
        counter: Token counter for budgets (default: the fallback's).
        on_failure: ``"raise"`` (default): raise `SummaryRejected` carrying the fallback text, so
            the session counts a failure and uses that text; ``"fallback"``: return it.
        temperature: Sampling temperature (None: the provider's default).
        max_concurrency: Map calls in flight at once.
        max_calls: Most model calls one summary may take (map, reduce and retries); a span that
            would need more goes to the fallback at once, before any call is made.
        clock: Seconds, monotonic (tests pass a fake one).
    """

    def __init__(
        self,
        model: Model,
        *,
        fallback: ExtractiveSummarizer | None = None,
        max_input_tokens: int = 8000,
        deadline_s: float = 30.0,
        max_lost_identifiers: float = 0.2,
        counter: TokenCounter | None = None,
        on_failure: Literal["raise", "fallback"] = "raise",
        temperature: float | None = None,
        max_concurrency: int = 4,
        max_calls: int = 32,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        base = fallback if fallback is not None else ExtractiveSummarizer(counter=counter or get_counter("heuristic"))
        super().__init__(
            fallback=base,
            max_input_tokens=max_input_tokens,
            deadline_s=deadline_s,
            max_lost_identifiers=max_lost_identifiers,
            counter=counter,
            on_failure=on_failure,
            temperature=temperature,
            max_concurrency=max_concurrency,
            max_calls=max_calls,
            clock=clock,
        )
        self.model = model

    def summarize(self, request: SummaryRequest) -> str:
        """The new running summary; see the class docstring for what happens on failure.

        Raises:
            SummaryRejected: The model failed, timed out or was rejected (``on_failure="raise"``);
                ``.fallback`` holds the summary to use.
        """
        return self._deliver(self.summarize_result(request))

    def summarize_result(self, request: SummaryRequest) -> SummaryResult:
        """Summarize and report how (never raises for a model failure)."""
        degraded = self._degraded(request)
        if degraded is not None:
            return degraded
        plan = self._plan(request)
        budget = self.max_input_tokens
        try:
            for attempt in range(2):
                try:
                    candidate = self._drive(plan, budget)
                except ContextOverflowError as exc:
                    if attempt:
                        raise
                    budget = min(budget // 2, int((exc.limit or budget) * 0.6))
                    continue
                return self._validate(plan, candidate)
        except Exception as exc:
            return self._error_result(plan, exc)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _drive(self, plan: SummaryPlan, budget: int) -> str:
        flow = self._flow(plan, budget)
        try:
            calls = next(flow)
            while True:
                calls = flow.send(self._batch(plan, calls, self._admit(plan, calls)))
        except StopIteration as stop:
            text: str = stop.value
            return text

    def _batch(self, plan: SummaryPlan, calls: list[SummaryCall], timeout: float) -> list[str]:
        """Run the calls in daemon threads; past ``timeout`` they are abandoned (never joined)."""
        results: list[ModelResponse | BaseException | None] = [None] * len(calls)
        done = threading.Event()
        pending = [len(calls)]
        lock = threading.Lock()
        gate = threading.Semaphore(self.max_concurrency)
        abandoned = threading.Event()

        def work(i: int) -> None:
            with gate:
                if abandoned.is_set():
                    return
                try:
                    call = calls[i]
                    results[i] = self.model.request(
                        call.messages, max_tokens=call.max_tokens, temperature=self.temperature
                    )
                except BaseException as exc:  # kept and re-raised on the caller's thread
                    results[i] = exc
            with lock:
                pending[0] -= 1
                if pending[0] == 0:
                    done.set()

        for i in range(len(calls)):
            threading.Thread(target=work, args=(i,), name="contextwarden-summarizer", daemon=True).start()
        if not done.wait(timeout):
            abandoned.set()
            raise DeadlinePassed()
        return self._collect(plan, results)


class AsyncLLMSummarizer(BaseLLM):
    """The async twin of `LLMSummarizer`: same arguments, with an `AsyncModel`.

    Map calls run concurrently (at most ``max_concurrency``); past the deadline they are cancelled.
    """

    def __init__(
        self,
        model: AsyncModel,
        *,
        fallback: AsyncExtractiveSummarizer | ExtractiveSummarizer | None = None,
        max_input_tokens: int = 8000,
        deadline_s: float = 30.0,
        max_lost_identifiers: float = 0.2,
        counter: TokenCounter | None = None,
        on_failure: Literal["raise", "fallback"] = "raise",
        temperature: float | None = None,
        max_concurrency: int = 4,
        max_calls: int = 32,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        base: BaseExtractive = (
            fallback if fallback is not None else AsyncExtractiveSummarizer(counter=counter or get_counter("heuristic"))
        )
        super().__init__(
            fallback=base,
            max_input_tokens=max_input_tokens,
            deadline_s=deadline_s,
            max_lost_identifiers=max_lost_identifiers,
            counter=counter,
            on_failure=on_failure,
            temperature=temperature,
            max_concurrency=max_concurrency,
            max_calls=max_calls,
            clock=clock,
        )
        self.model = model

    async def summarize(self, request: SummaryRequest) -> str:
        """The new running summary (see `LLMSummarizer.summarize`)."""
        return self._deliver(await self.summarize_result(request))

    async def summarize_result(self, request: SummaryRequest) -> SummaryResult:
        """Summarize and report how (never raises for a model failure)."""
        degraded = self._degraded(request)
        if degraded is not None:
            return degraded
        plan = self._plan(request)
        budget = self.max_input_tokens
        try:
            for attempt in range(2):
                try:
                    candidate = await self._drive(plan, budget)
                except ContextOverflowError as exc:
                    if attempt:
                        raise
                    budget = min(budget // 2, int((exc.limit or budget) * 0.6))
                    continue
                return self._validate(plan, candidate)
        except Exception as exc:
            return self._error_result(plan, exc)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _drive(self, plan: SummaryPlan, budget: int) -> str:
        flow = self._flow(plan, budget)
        try:
            calls = next(flow)
            while True:
                calls = flow.send(await self._batch(plan, calls, self._admit(plan, calls)))
        except StopIteration as stop:
            text: str = stop.value
            return text

    async def _batch(self, plan: SummaryPlan, calls: list[SummaryCall], timeout: float) -> list[str]:
        gate = asyncio.Semaphore(self.max_concurrency)

        async def one(call: SummaryCall) -> ModelResponse:
            async with gate:
                return await self.model.request(call.messages, max_tokens=call.max_tokens, temperature=self.temperature)

        try:
            gathered = asyncio.gather(*(one(c) for c in calls), return_exceptions=True)
            responses = await asyncio.wait_for(gathered, timeout)
        except TimeoutError:
            raise DeadlinePassed() from None
        return self._collect(plan, responses)

"""Summaries off the hot path: answer at once, let the model write the better summary meanwhile.

`BackgroundSummarizer` (sync, a worker thread) and `AsyncBackgroundSummarizer` (asyncio tasks)
wrap an LLM summarizer. When the session asks for a summary, they return the extractive one
immediately (the agent never waits for a model) and queue the same request for the model. Once
the model's summary is ready it is offered for merge, and it replaces exactly the summary that
was returned for the same request, so it covers the same span of message ids:

* on the next compaction that folds more messages in, the request's ``previous`` is the text
  this wrapper returned; it is swapped for the model's summary before the new messages are
  folded in (the messages evicted meanwhile are summarized on top of it, those still in the
  view are untouched);
* an engine may also call `take_ready(summary, span)` at any compaction to swap it in without
  waiting for the next summary.

Jobs run one at a time, in order; a job whose predecessor is still running waits for it and
folds into the model's summary rather than the extractive one. A failed model summary is
reported on the next call (`SummaryRejected` carrying the fallback, unless the wrapped
summarizer has ``on_failure="fallback"``), so the session's circuit breaker still counts it.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..exceptions import SummaryRejected
from .base import SummaryRequest
from .llm import AsyncLLMSummarizer, LLMSummarizer
from .llm_flow import BaseLLM, SummaryFailure, SummaryResult

__all__ = ["AsyncBackgroundSummarizer", "BackgroundSummarizer"]

_KEEP_JOBS = 8
"""Finished jobs remembered for merging (a session only ever asks about its latest one or two)."""


@dataclass(eq=False)
class _Job:
    request: SummaryRequest
    returned: str
    """The text handed back to the session for this request (what the model's summary replaces)."""
    parent: _Job | None
    done: threading.Event = field(default_factory=threading.Event)
    result: SummaryResult | None = None
    merged: bool = False

    @property
    def usable(self) -> str | None:
        """The model's summary, when the job finished with one (restored identifiers included)."""
        r = self.result
        if self.done.is_set() and r is not None and r.source in ("llm", "repaired"):
            return r.text
        return None


class _BaseBackground:
    supports_degraded = True
    checks_identifiers = True
    """This summarizer keeps identifiers by its own rules; the summarize layer's identifier check is skipped."""
    """A ``degraded`` request (the session's breaker is open) queues no model job."""

    def __init__(self, summarizer: BaseLLM) -> None:
        self._inner = summarizer
        self._jobs: OrderedDict[str, _Job] = OrderedDict()
        self._failures: list[SummaryFailure] = []
        self._lock = threading.Lock()
        self.merged = 0
        """Model summaries swapped in so far."""

    @property
    def last_failure(self) -> SummaryFailure | None:
        """The wrapped summarizer's most recent failure."""
        return self._inner.last_failure

    def _prepare(self, request: SummaryRequest) -> tuple[SummaryRequest, _Job]:
        """Swap in a ready model summary for ``previous``, compute the quick answer, make the job."""
        parent: _Job | None = None
        if request.previous is not None:
            with self._lock:
                job = self._jobs.get(request.previous.strip())
            if job is not None:
                better = job.usable
                if better is not None:
                    request = replace(request, previous=better)
                    self._mark_merged(job)
                elif not job.done.is_set():
                    parent = job  # still running: the new job folds into its summary once it is ready
        quick = self._inner.fallback.render(request).strip()
        job = _Job(request=request, returned=quick, parent=parent)
        with self._lock:
            self._jobs[quick] = job
            while len(self._jobs) > _KEEP_JOBS:
                self._jobs.popitem(last=False)
        return request, job

    def _mark_merged(self, job: _Job) -> None:
        with self._lock:
            if not job.merged:
                job.merged = True
                self.merged += 1

    def _job_request(self, job: _Job) -> SummaryRequest:
        parent = job.parent
        if parent is not None and parent.usable is not None:
            return replace(job.request, previous=parent.usable)
        return job.request

    def _finish(self, job: _Job, result: SummaryResult) -> None:
        job.result = result
        if result.failure is not None:
            with self._lock:
                self._failures.append(result.failure)
        job.done.set()

    def _report(self, job: _Job) -> str:
        with self._lock:
            failures, self._failures = self._failures, []
        if not failures or self._inner.on_failure == "fallback":
            return job.returned
        last = failures[-1]
        a, b = last.span
        raise SummaryRejected(
            f"background summary of messages {a}..{b} failed ({len(failures)} since the last call): {last.detail}; "
            "the extractive summary it carries was used instead.",
            reason=last.kind,
            fallback=job.returned,
            span=job.request.span,
        )

    def take_ready(self, summary: str | None, span: tuple[str, str] | None = None) -> str | None:
        """The model's summary that replaces ``summary`` (returned earlier for the same span), if ready.

        The engine hook: call it at a compaction with the current summary and its span; on a
        non-None answer, use it as the summary (same span). Each one is handed out once.
        """
        if summary is None:
            return None
        with self._lock:
            job = self._jobs.get(summary.strip())
        if job is None or job.merged or (span is not None and job.request.span != span):
            return None
        better = job.usable
        if better is not None:
            self._mark_merged(job)
        return better


class BackgroundSummarizer(_BaseBackground):
    """Extractive summary now, the `LLMSummarizer`'s summary computed in a worker thread and merged later.

    Args:
        summarizer: The LLM summarizer the worker runs (its deadline bounds each background job).
    """

    def __init__(self, summarizer: LLMSummarizer) -> None:
        super().__init__(summarizer)
        self.summarizer = summarizer
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._closed = False

    def summarize(self, request: SummaryRequest) -> str:
        """The extractive summary (at once); the model's summary of the same request is queued.

        Raises:
            SummaryRejected: A background summary failed since the previous call; ``.fallback``
                is this call's summary, to be used.
        """
        _, job = self._prepare(request)
        if self._closed or request.degraded:
            job.done.set()
        else:
            self._start()
            self._queue.put(job)
        return self._report(job)

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="contextwarden-background-summary", daemon=True)
            self._thread.start()

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if job.parent is not None:
                job.parent.done.wait()
            result = self.summarizer.summarize_result(self._job_request(job))
            self._finish(job, result)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every queued summary is done; False when ``timeout`` (seconds) passed first."""
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            if not job.done.wait(timeout):
                return False
        return True

    def close(self) -> None:
        """Stop the worker after the job in progress (queued jobs are dropped)."""
        self._closed = True
        if self._thread is not None:
            while not self._queue.empty():
                try:
                    dropped = self._queue.get_nowait()
                except queue.Empty:
                    break
                if dropped is not None:
                    dropped.done.set()
            self._queue.put(None)
            self._thread = None


class AsyncBackgroundSummarizer(_BaseBackground):
    """The async twin of `BackgroundSummarizer`: the `AsyncLLMSummarizer` runs in asyncio tasks."""

    def __init__(self, summarizer: AsyncLLMSummarizer) -> None:
        super().__init__(summarizer)
        self.summarizer = summarizer
        self._tasks: dict[_Job, asyncio.Task[None]] = {}
        self._closed = False

    async def summarize(self, request: SummaryRequest) -> str:
        """The extractive summary (at once); the model's summary is computed in a task (see the sync twin)."""
        _, job = self._prepare(request)
        if self._closed or request.degraded:
            job.done.set()
        else:
            previous = self._tasks.get(job.parent) if job.parent is not None else None
            task = asyncio.get_running_loop().create_task(self._run(job, previous))
            self._tasks[job] = task
            task.add_done_callback(self._forget(job))
        return self._report(job)

    def _forget(self, job: _Job) -> Callable[[asyncio.Task[None]], None]:
        def done(_task: asyncio.Task[None]) -> None:
            self._tasks.pop(job, None)

        return done

    async def _run(self, job: _Job, previous: asyncio.Task[None] | None) -> None:
        try:
            if previous is not None:
                await asyncio.wait([previous])
            self._finish(job, await self.summarizer.summarize_result(self._job_request(job)))
        finally:
            job.done.set()

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until every running summary is done; False when ``timeout`` (seconds) passed first."""
        tasks = list(self._tasks.values())
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        return not pending

    async def aclose(self) -> None:
        """Cancel the summaries still running."""
        self._closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

"""The agent-facing API: add messages, prepare the view, hook into the agent loop.

`Session` is the sync session; `AsyncSession` (`contextwarden.async_session`) is its async twin.
What they share lives in `contextwarden._session`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ._binding import StoreLink
from ._replies import reply_events
from .delegation import DelegationResult, run
from .exceptions import (
    ConfigError,
    ContextOverflowError,
    SessionNotFound,
    StoreUnavailable,
    StreamInterrupted,
    SummaryRejected,
    UpstreamError,
    UsageError,
    VersionConflict,
)
from .llm.base import ResponseDone
from .messages import Message
from .summarize.base import Summarizer, SummaryReply, SummaryRequest
from .tokens.accountant import OPENAI_FRAMING

if TYPE_CHECKING:
    import os

    from .adapters import Format
    from .budget import Thresholds
    from .compaction.config import CompactionConfig
    from .llm.base import Model, ModelResponse, StreamEvent
    from .llm.served_window import ServedWindow
    from .memory.longterm import LongTermMemory
    from .memory.tiers import HybridMemory
    from .recall import SessionMemory
    from .snapshots import SnapshotStore
    from .stores.protocols import SessionStore
    from .tokens import TokenCounter
    from .tokens.accountant import Framing

from ._session import (
    SAVE_ATTEMPTS,
    BaseSession,
    DelegableTask,
    OutputFormat,
    PreparedView,
    Served,
    served_base_url,
)
from .async_session import AsyncSession

__all__ = ["AsyncSession", "DelegableTask", "OutputFormat", "PreparedView", "Session"]

logger = logging.getLogger("contextwarden.session")


class Session(BaseSession):
    """A context-managed agent session (sync).

    Args:
        session_id: Stable id (generated when omitted).
        model: Looked up in the model registry for window, max output and tokenizer.
        window: Context window in tokens (overrides the registry).
        reserved_output: Tokens kept free for the reply (default: min(max output, window/4); without a
            registry entry min(1024, window/4)).
        tools: OpenAI tool schemas sent with every call (their tokens leave the budget).
        counter: A TokenCounter or spec (``"tiktoken:cl100k_base"``, ``"heuristic"``...).
        config: Compaction thresholds and policies.
        summarizer: Drives the summarize layer; without one, clearing, eviction and the ledger do the work.
        snapshots: Where full originals go (default: the store when given, else files under
            ``data_dir/snapshots`` when given, else memory).
        store: A session store (`contextwarden.stores.open_store`): the transcript is written
            through, the view state saved with compare-and-set after each compaction, and an
            existing session with this id is resumed. While the store cannot be reached, a due
            compaction runs in memory and is saved once it is back (``status().degraded``, an
            ``alert`` event); a store that lost the session raises `SessionLost` on `add`, and
            `restore_to_store` writes the session back.
        tenant: The session's owner in the store; a session of this id that belongs to another
            tenant is never opened (`SessionNotFound`, as for a missing one).
        data_dir: Directory for snapshot files when there is no store.
        thresholds: Pressure states (warning 0.70, error 0.90, critical 0.95, overflow 1.0 by default).
        format: Format of `prepare()` output and of `add()` input by default.
        served_window: The window the model server serves: tokens, a
            `contextwarden.llm.served_window.ServedWindow`, or ``"probe"`` to ask the server at
            ``base_url`` now (llama.cpp, vLLM, Ollama, llama-cpp-python). A window smaller than the
            configured one replaces it; with neither ``model`` nor ``window`` it is the window.
        base_url: The model server's OpenAI-compatible URL, for ``served_window="probe"``.

    Before usage reports calibrate the counts, a session whose model the registry does not know
    and whose counter it guessed counts with a 25% margin; one whose probe found the server's
    token-count endpoint measures its margin there (see `contextwarden.served`).
    """

    store: SessionStore | None

    def __init__(
        self,
        session_id: str | None = None,
        *,
        model: str | None = None,
        window: int | None = None,
        reserved_output: int | None = None,
        tools: Sequence[Mapping[str, Any]] = (),
        counter: TokenCounter | str | None = None,
        framing: Framing = OPENAI_FRAMING,
        config: CompactionConfig | Mapping[str, Any] | None = None,
        snapshots: SnapshotStore | None = None,
        format: Format = "openai",
        include_read_tool: bool = False,
        store: SessionStore | None = None,
        tenant: str = "default",
        data_dir: str | os.PathLike[str] | None = None,
        thresholds: Thresholds | None = None,
        max_tokens: int | Literal["reserved"] | None = "reserved",
        memory: SessionMemory | LongTermMemory | HybridMemory | bool | None = None,
        served_window: int | ServedWindow | Literal["probe"] | None = None,
        base_url: str | None = None,
        summarizer: Summarizer | None = None,
    ) -> None:
        if store is not None and inspect.iscoroutinefunction(store.append_messages):
            raise ConfigError("Session needs a sync store; use AsyncSession with an async store.", key="store")
        super().__init__(
            session_id,
            model=model,
            window=window,
            reserved_output=reserved_output,
            tools=tools,
            counter=counter,
            framing=framing,
            config=config,
            snapshots=snapshots,
            format=format,
            include_read_tool=include_read_tool,
            store=store,
            tenant=tenant,
            data_dir=data_dir,
            thresholds=thresholds,
            max_tokens=max_tokens,
            memory=memory,
            served_window=served_window,
            base_url=base_url,
        )
        self.summarizer = summarizer
        self._wire_summarizer(self.summarizer)
        self._state_version = 0
        if self.store is not None:
            self._resume()

    def _link_store(self, *, snapshots_in_store: bool) -> StoreLink | None:
        if self.store is None:
            return None
        return StoreLink(self.store, self.session_id, self.tenant, self.events, snapshots_in_store=snapshots_in_store)

    def _resume(self) -> None:
        """Load (or create) the stored session: replay its transcript, restore its view state.

        Raises:
            SessionNotFound: the id belongs to another tenant's session.
        """
        assert self._link is not None
        stored, state, self._state_version = self._link.open(model=self.model, window=self.budget.window)
        if stored:
            self.engine.add(stored)
        if state is not None:
            self.engine.import_state(state)
        self.events.sinks.append(self._link.audit)
        record, self._status_version = self._link.load_status()
        self._load_timeline(record)

    def _persisted(self, view: PreparedView) -> PreparedView:
        """The view; after a compaction or an alert the figures are saved now, else with the next `add`."""
        if self._status_now and self._link is not None and self._link.problem is None:
            self.save_status()
        return view

    def save_status(self) -> None:
        """Save the current figures and the timeline to the store (slot ``status``), for the CLI and dashboard.

        The session saves them itself with every write of messages (`add`) and after a compaction;
        call this at the end of a run so readers see its last turn. A store failure leaves them for
        the next save.
        """
        if self._link is None:
            return
        self._status_version = self._link.save_status(self.status_record(), version=self._status_version)
        self._status_due = self._status_now = False

    def _persist_messages(self, fresh: Sequence[Message]) -> None:
        if self._link is not None and fresh:
            status = self._status_write() if self._link.problem is None else None
            self._link.append(fresh, transcript_messages=len(self.engine.transcript), status=status)
            self._status_written(status)

    def prepare(self, *, format: OutputFormat | None = None) -> PreparedView:
        """The view for the next model call, compacting first when it passed the high-water mark.

        With a store, a compaction runs under the session's lock and its view state is saved with
        compare-and-set; a writer that lost the race reloads the winner's state. While the store
        fails, a due compaction runs in memory (the view still fits) and is saved by a later
        prepare once the store works again.
        """
        link = self._link
        if link is not None and link.problem is not None:
            self._resync()
        if link is None or not self.engine.needs_compaction():
            appended = self.engine.prepare_appended()
            return self._persisted(self._finish(appended or self._drive(self._flow(False)), format))
        if link.problem is not None:  # the store fails: compact in memory; a later prepare saves the view
            link.unsaved = True
            return self._persisted(self._finish(self._drive(self._flow(False)), format))
        return self._persisted(self._finish(self._compact_saved(reactive=False), format))

    def _compact_saved(self, *, reactive: bool) -> Served:
        """Compact under the session's lock and save the view state (CAS); in memory while the store fails."""
        assert self._link is not None
        result: Served | None = None
        try:
            with self._link.lock():
                for attempt in range(SAVE_ATTEMPTS):
                    if self._link.version() != self._state_version:  # another process compacted: start from its state
                        self._reload()
                    result = self._drive(self._flow(reactive))
                    try:
                        self._state_version = self._link.save(
                            self.engine.export_state(), expected_version=self._state_version
                        )
                        break
                    except VersionConflict:  # our lease ran out while we compacted and another writer saved
                        if attempt == SAVE_ATTEMPTS - 1:
                            raise
                if self._link.waiting:  # a snapshot the store refused for a moment
                    self._link.flush()
        except (StoreUnavailable, SessionNotFound) as exc:
            self._link.fail(exc)
            if result is None:  # the store failed before the compaction ran: run it in memory
                result = self._drive(self._flow(reactive))
            self._link.unsaved = True
        assert result is not None
        return result

    def _resync(self) -> None:
        """After a store failure: save the view compacted in memory, or learn the store works again."""
        link = self._link
        assert link is not None
        if link.problem == "store-lost":
            return  # only restore_to_store() writes it back: the store's transcript would have a gap
        try:
            if not link.unsaved:
                link.probe()
                link.flush()
            else:
                with link.lock():
                    if link.version() != self._state_version:
                        self._reload()  # another process compacted meanwhile: its view wins
                    else:
                        self._state_version = link.save(
                            self.engine.export_state(), expected_version=self._state_version
                        )
                    link.flush()
            link.recovered()
        except (StoreUnavailable, SessionNotFound):
            pass  # still failing (the link noted how): the view stays in memory

    def _reload(self) -> None:
        """Rebuild the engine from the store (transcript and view state).

        The store is read first, so a store failing meanwhile leaves the session as it was.
        """
        assert self._link is not None
        messages, state, version = self._link.load()
        self._reset_engine()
        self._wire_summarizer(self.summarizer)
        self.engine.add(messages)
        self._state_version = version
        if state is not None:
            self.engine.import_state(state)

    def restore_to_store(self) -> None:
        """Write this session back into a store that lost it (restarted empty, expired or deleted it).

        The store gets the session again under its id and tenant, the whole transcript this
        process holds (messages it has are skipped) and the current view state, so `add` works
        again and a restarted process resumes the same view. When another process restored the
        session first, its view state wins and this session reloads it (its messages are added).
        Snapshots are written again as compaction needs them; `read_context` rebuilds older ones
        from the transcript. Safe to call when nothing was lost.

        Raises:
            SessionNotFound: the id now belongs to another tenant's session.
            StoreUnavailable: the store cannot be reached (try again later).
        """
        link = self._link
        if link is None:
            raise UsageError(f"Session {self.session_id!r} has no store to restore to; pass `store=` when creating it.")
        link.restore(self.engine.transcript, model=self.model, window=self.budget.window)
        with link.lock():
            version = link.version()
            if version == 0:
                self._state_version = link.save(self.engine.export_state(), expected_version=0)
            elif version != self._state_version:
                self._reload()
            link.flush()
        link.recovered()

    def on_context_overflow(
        self, *, format: OutputFormat | None = None, error: ContextOverflowError | None = None
    ) -> PreparedView:
        """The provider said the prompt is too long: compact deeper now and return the view to retry with.

        Pass the provider's ``error``: a window it names that is smaller than the budget's is
        adopted first (as `complete()` does), so the compaction cuts to fit the served window.
        """
        if error is not None:
            self._adopt_served_window(error)
        link = self._link
        if link is None:
            return self._persisted(self._finish(self._drive(self._flow(True)), format))
        if link.problem is not None:
            self._resync()
        if link.problem is not None:
            link.unsaved = True
            return self._persisted(self._finish(self._drive(self._flow(True)), format))
        # saved like any compaction: a restart resumes this view
        return self._persisted(self._finish(self._compact_saved(reactive=True), format))

    def _drive(self, flow: Generator[SummaryRequest, SummaryReply, Served]) -> Served:
        try:
            request = next(flow)
            while True:
                reply: SummaryReply
                try:
                    assert self.summarizer is not None
                    reply = self.summarizer.summarize(request)
                except SummaryRejected as exc:  # a failure to count, with a summary to use
                    logger.warning("summarizer for session %s: %s", self.session_id, exc)
                    reply = exc
                except Exception:
                    logger.exception("summarizer failed for session %s", self.session_id)
                    reply = None
                request = flow.send(reply)
        except StopIteration as stop:
            result: Served = stop.value
            return result

    def complete(
        self,
        client: Model,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelResponse:
        """One agent step: prepare the view, call ``client``, record usage, append the reply.

        On a provider context-length error the view is compacted deeper (the reactive layer) and the call is
        retried ``config.reactive_retries`` times (once by default) before the error is raised.
        Sub-tasks marked delegable run first when the view is at the ``delegation`` utilization.

        A context-length error that names a window smaller than the budget's makes the session
        adopt it (an ``alert`` event, ``status().served_window``). A view the emergency
        compaction could not shrink is not sent again: `OverflowUnresolved` is raised instead.
        Without ``max_tokens``, the session's own ``max_tokens`` setting is sent (by default the
        reserved output). A tool call whose arguments are not valid JSON is kept and answered
        with an error result (see `ModelResponse.invalid_tool_calls`).

        Returns:
            The reply as appended to the transcript.
        """
        if self.delegation_due():
            self.delegate_pending(client)
        view = self.prepare(format="internal").view
        limit = self._reply_limit(max_tokens)
        for attempt in range(self.config.reactive_retries + 1):
            sent = self.engine.used()
            try:
                response = client.request(view, tools=self._all_tools(tools), max_tokens=limit, temperature=temperature)
                break
            except ContextOverflowError as exc:
                if attempt >= self.config.reactive_retries:
                    raise
                self._adopt_served_window(exc)
                view = self.on_context_overflow(format="internal").view
                sent_limit, limit = limit, self._reply_limit(max_tokens)
                self._check_progress(exc, sent, sent_limit, limit)
        self._calibrate_unreported(response, view, tools, client)
        return self._accept(response)

    def stream(
        self,
        client: Model,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Iterator[StreamEvent]:
        """`complete()` as a stream: yields the model's events; the reply is appended when it is done.

        A context-length error before the first event triggers the reactive layer and a retry, as in `complete()`.
        A stream that ends before its first event while the view is larger than any view answered
        so far (or near the budget) may be a server's way of refusing a prompt too long for it
        (llama-cpp-python's server answers so): the request is sent once more without streaming,
        to get the real error (then the reactive layer and a retry) or the reply (then replayed as events).
        The last event's `ResponseDone.response` is the reply as appended.
        """
        if self.delegation_due():
            self.delegate_pending(client)
        view = self.prepare(format="internal").view
        limit = self._reply_limit(max_tokens)
        for attempt in range(self.config.reactive_retries + 1):
            sent = self.engine.used()
            started = False
            overflow: ContextOverflowError
            try:
                for event in client.stream(
                    view, tools=self._all_tools(tools), max_tokens=limit, temperature=temperature
                ):
                    started = True
                    if isinstance(event, ResponseDone):
                        self._calibrate_unreported(event.response, view, tools, client)
                        event = ResponseDone(response=self._accept(event.response))
                    yield event
                return
            except ContextOverflowError as exc:
                if started:
                    raise
                overflow = exc
            except StreamInterrupted:
                if started or not self._may_be_overflow():
                    raise
                try:
                    response = client.request(
                        view, tools=self._all_tools(tools), max_tokens=limit, temperature=temperature
                    )
                except ContextOverflowError as exc:
                    overflow = self._served_limit(exc, client)
                except UpstreamError as exc:
                    overflow = self._overflow_or_raise(exc, client)
                else:
                    self._calibrate_unreported(response, view, tools, client)
                    yield from reply_events(self._accept(response))
                    return
            if attempt >= self.config.reactive_retries:
                raise overflow
            self._adopt_served_window(overflow)
            view = self.on_context_overflow(format="internal").view
            sent_limit, limit = limit, self._reply_limit(max_tokens)
            self._check_progress(overflow, sent, sent_limit, limit)

    def _calibrate_unreported(
        self, response: ModelResponse, view: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None, client: Model
    ) -> None:
        """A reply without usage: calibrate from the server's own count of the request, while samples are due.

        See `contextwarden.served_counts`. A server that cannot count is not asked again; the
        turn goes on either way.
        """
        steps = self._server_count(
            response.usage,
            view,
            self._all_tools(tools),
            base_url=served_base_url(client),
            model_name=client.model_name,
        )
        if steps is None:
            return
        from .llm._served_io import run_sync
        from .llm.served_window import DEFAULT_PROBE_TIMEOUT

        try:
            run_sync(steps, None, None, DEFAULT_PROBE_TIMEOUT)
        except (UpstreamError, UsageError) as exc:
            self._server_count_failed(exc)

    def _served_limit(self, error: ContextOverflowError, model: object) -> ContextOverflowError:
        """``error``, with the server's window from its own endpoints when the error named none."""
        base_url = served_base_url(model)
        if error.limit is not None or base_url is None:
            return error
        from .llm.stream_recovery import with_served_limit

        return with_served_limit(error, base_url, model=self.model)

    def _overflow_or_raise(self, error: UpstreamError, model: object) -> ContextOverflowError:
        """A plain request after a cut stream failed too: an overflow when the server's window says so.

        Raises:
            UpstreamError: ``error``, when the server names no window the view passes.
        """
        base_url = served_base_url(model)
        if error.status_code is not None or base_url is None:
            raise error
        from .llm.served_window import probe
        from .llm.stream_recovery import overflow_after_cut

        try:
            served = probe(base_url, model=self.model)
        except UpstreamError:
            raise error from None
        return overflow_after_cut(error, served, window=self.budget.window)

    def delegate_pending(self, client: Model) -> list[DelegationResult]:
        """Run every sub-task marked delegable now, each in its own session calling ``client``; add their results."""
        results = []
        for marked in list(self._delegable):
            sub = Session(**self._sub_session_kwargs(marked))
            result = run(
                sub,
                marked.task,
                marked.context,
                client=client,
                max_result_tokens=marked.max_result_tokens,
                max_turns=marked.max_turns,
            )
            self._record_delegation(marked, result)
            results.append(result)
        return results

    def call_with_retry(self, call: Callable[[list[Any]], Any], *, format: OutputFormat | None = None) -> Any:
        """Prepare, call ``call(view)``; on ContextOverflowError compact (reactive layer) and retry as configured.

        A smaller window named by the error is adopted, and a view compaction could not shrink
        raises `OverflowUnresolved` instead of being sent again (as in `complete()`).
        """
        view = self.prepare(format=format)
        for attempt in range(self.config.reactive_retries + 1):
            sent = self.engine.used()
            try:
                return call(view.messages)
            except ContextOverflowError as exc:
                if attempt >= self.config.reactive_retries:
                    raise
                self._adopt_served_window(exc)
                view = self.on_context_overflow(format=format)
                self._check_progress(exc, sent, None, None)
        raise UsageError("unreachable: reactive retry loop ended without a result")  # pragma: no cover

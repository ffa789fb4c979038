"""`AsyncSession`: the async twin of `contextwarden.session.Session` (same methods; `prepare`,
`on_context_overflow`, `complete` and the store's I/O are coroutines)."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ._binding import AsyncStoreLink
from ._replies import reply_events
from .delegation import DelegationResult, arun
from .exceptions import (
    ConfigError,
    ContextOverflowError,
    SessionNotFound,
    SnapshotError,
    StoreUnavailable,
    StreamInterrupted,
    SummaryRejected,
    UpstreamError,
    UsageError,
    VersionConflict,
)
from .llm.base import ResponseDone
from .messages import Message
from .summarize.base import AsyncSummarizer, SummaryReply, SummaryRequest
from .tokens.accountant import OPENAI_FRAMING

if TYPE_CHECKING:
    import os

    from .adapters import Format
    from .budget import Thresholds
    from .compaction.config import CompactionConfig
    from .llm.base import AsyncModel, ModelResponse, StreamEvent
    from .llm.served_window import ServedWindow
    from .memory.longterm import LongTermMemory
    from .memory.tiers import HybridMemory
    from .recall import SessionMemory
    from .snapshots import SnapshotStore
    from .stores.protocols import AsyncSessionStore
    from .tokens import TokenCounter
    from .tokens.accountant import Framing

from ._session import (
    SAVE_ATTEMPTS,
    BaseSession,
    OutputFormat,
    PreparedView,
    Served,
    served_base_url,
)

__all__ = ["AsyncSession"]

logger = logging.getLogger("contextwarden.session")


class AsyncSession(BaseSession):
    """Async twin of `Session`: same methods, `prepare` and `on_context_overflow` are coroutines."""

    store: AsyncSessionStore | None

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
        store: AsyncSessionStore | None = None,
        tenant: str = "default",
        data_dir: str | os.PathLike[str] | None = None,
        thresholds: Thresholds | None = None,
        max_tokens: int | Literal["reserved"] | None = "reserved",
        memory: SessionMemory | LongTermMemory | HybridMemory | bool | None = None,
        served_window: int | ServedWindow | Literal["probe"] | None = None,
        base_url: str | None = None,
        summarizer: AsyncSummarizer | None = None,
    ) -> None:
        if store is not None and not inspect.iscoroutinefunction(store.append_messages):
            raise ConfigError(
                "AsyncSession needs an async store (open_async_store); use Session for sync.", key="store"
            )
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
        self._unsaved: list[Message] = []
        self._loaded = store is None
        self._stored_snapshots: set[str] = set()
        self._alink = None if store is None else AsyncStoreLink(store, self.session_id, self.tenant, self.events)

    _recalled_async = True

    def _store_problem(self) -> str | None:
        return None if self._alink is None else self._alink.problem

    async def _arecalled(self, result: Served) -> Served:
        """`_recalled` in a worker thread: a memory backend's I/O (SQLite, Postgres) never blocks the loop."""
        if self.memory is None:
            return result
        return await asyncio.to_thread(self._recalled, result)

    async def arecall(self, query: str) -> str:
        """`recall` off the event loop."""
        return await asyncio.to_thread(self.recall, query)

    @classmethod
    async def open(
        cls,
        session_id: str,
        *,
        store: AsyncSessionStore,
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
        tenant: str = "default",
        data_dir: str | os.PathLike[str] | None = None,
        thresholds: Thresholds | None = None,
        max_tokens: int | Literal["reserved"] | None = "reserved",
        memory: SessionMemory | LongTermMemory | HybridMemory | bool | None = None,
        served_window: int | ServedWindow | Literal["probe"] | None = None,
        base_url: str | None = None,
        summarizer: AsyncSummarizer | None = None,
    ) -> AsyncSession:
        """A session bound to an async store: created there if new, resumed (transcript and view state) if not.

        Raises:
            SessionNotFound: the id belongs to another tenant's session.
        """
        session = cls(
            session_id,
            store=store,
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
            tenant=tenant,
            data_dir=data_dir,
            thresholds=thresholds,
            max_tokens=max_tokens,
            memory=memory,
            served_window=served_window,
            base_url=base_url,
            summarizer=summarizer,
        )
        await session.load()
        return session

    async def load(self) -> None:
        """Load the stored transcript and view state (done by `open`; idempotent)."""
        if self._loaded or self._alink is None:
            return
        stored, state, self._state_version = await self._alink.open(model=self.model, window=self.budget.window)
        if stored:
            self.engine.add(stored)
        if state is not None:
            self.engine.import_state(state)
        record, self._status_version = await self._alink.load_status()
        self._load_timeline(record)
        self._loaded = True

    async def _served(self, result: Served, format: OutputFormat | None) -> PreparedView:
        """The prepared view (memories recalled); the figures are saved now after a compaction or an alert,
        else with the next write (`flush`, the next `prepare`)."""
        view = self._finish(await self._arecalled(result), format)
        if self._status_now and self._alink is not None and self._alink.problem is None:
            await self.save_status()
        return view

    async def save_status(self) -> None:
        """Save the current figures and the timeline to the store (slot ``status``), for the CLI and dashboard.

        The session saves them itself with every write of its messages (`flush`, `prepare`) and after
        a compaction; call this at the end of a run whose last reply was not flushed. A store failure
        leaves them for the next save.
        """
        if self._alink is None or not self._loaded:
            return
        self._status_version = await self._alink.save_status(self.status_record(), version=self._status_version)
        self._status_due = self._status_now = False

    def _persist_messages(self, fresh: Sequence[Message]) -> None:
        if self.store is not None:
            self._unsaved.extend(fresh)  # written by the next prepare() or flush()

    async def flush(self) -> None:
        """Write messages added since the last prepare to the store (idempotent by message id), and the
        figures when they changed (`save_status`): what the store shows is the latest turn.

        Raises:
            SessionLost: the store no longer has the session (`restore_to_store` writes it back).
            StoreUnavailable: the store cannot be reached; the messages stay for the next try.
        """
        if self._alink is not None and self._unsaved:
            if not self._loaded:
                raise UsageError("AsyncSession with a store must be loaded first: use `await AsyncSession.open(...)`.")
            batch, self._unsaved = self._unsaved, []
            status = self._status_write() if self._alink.problem is None else None
            try:
                await self._alink.append(batch, transcript_messages=len(self.engine.transcript), status=status)
            except BaseException:
                self._unsaved[:0] = batch  # keep them for the next try
                raise
            self._status_written(status)

    async def prepare(self, *, format: OutputFormat | None = None, defer_write: bool = False) -> PreparedView:
        """The view for the next model call, compacting first when it passed the high-water mark.

        With a store, pending messages are written first; a compaction runs under the session's
        lock and saves the view state with compare-and-set. While the store fails, messages wait
        in memory, a due compaction runs in memory, and a later prepare saves both.

        ``defer_write``: when no compaction is due, the pending messages stay in memory and the next
        `flush` writes them together with what is added meanwhile (the model's reply): one store
        round trip for a request and its reply instead of two.
        """
        link = self._alink
        if link is not None and (not defer_write or link.problem is not None or self.engine.needs_compaction()):
            await self._resync()
        if link is None or not self.engine.needs_compaction():
            appended = self.engine.prepare_appended()
            return await self._served(appended or await self._drive(self._flow(False)), format)
        if link.problem is not None:  # the store fails: compact in memory; a later prepare saves it all
            link.unsaved = True
            return await self._served(await self._drive(self._flow(False)), format)
        return await self._served(await self._compact_saved(reactive=False), format)

    async def on_context_overflow(
        self, *, format: OutputFormat | None = None, error: ContextOverflowError | None = None
    ) -> PreparedView:
        """The provider said the prompt is too long: compact deeper now and return the view to retry with.

        Pass the provider's ``error`` to adopt a smaller window it names (see `Session.on_context_overflow`).
        """
        if error is not None:
            self._adopt_served_window(error)
        link = self._alink
        if link is None:
            return await self._served(await self._drive(self._flow(True)), format)
        await self._resync()
        if link.problem is not None:
            link.unsaved = True
            return await self._served(await self._drive(self._flow(True)), format)
        return await self._served(await self._compact_saved(reactive=True), format)

    async def _resync(self) -> None:
        """Write what waits for the store (messages, a view compacted in memory), or note that it still fails."""
        link = self._alink
        assert link is not None
        if link.problem == "store-lost":
            return  # only restore_to_store() writes it back: the store's transcript would have a gap
        try:
            await self.flush()
            if link.problem is None:
                return
            if link.unsaved:
                async with link.lock():
                    if await link.version() != self._state_version:
                        await self._reload()  # another process compacted meanwhile: its view wins
                    else:
                        await self._flush_snapshots()
                        self._state_version = await link.save(
                            self.engine.export_state(), expected_version=self._state_version
                        )
            else:
                await link.probe()
            link.recovered()
        except (StoreUnavailable, SessionNotFound) as exc:
            link.fail(exc)

    async def _compact_saved(self, *, reactive: bool) -> Served:
        """Compact under the session's lock; save the snapshots it wrote, then the view state (CAS).

        In memory when the store fails meanwhile; a later prepare saves it.
        """
        link = self._alink
        assert link is not None
        result: Served | None = None
        try:
            async with link.lock():
                for attempt in range(SAVE_ATTEMPTS):
                    if await link.version() != self._state_version:  # another process compacted: start from its state
                        await self._reload()
                    result = await self._drive(self._flow(reactive))
                    await self._flush_snapshots()
                    try:
                        self._state_version = await link.save(
                            self.engine.export_state(), expected_version=self._state_version
                        )
                        break
                    except VersionConflict:  # our lease ran out while we compacted and another writer saved
                        if attempt == SAVE_ATTEMPTS - 1:
                            raise
        except (StoreUnavailable, SessionNotFound) as exc:
            link.fail(exc)
            if result is None:
                result = await self._drive(self._flow(reactive))
            link.unsaved = True
        assert result is not None
        return result

    async def _reload(self) -> None:
        """Rebuild the engine from the store (transcript and view state).

        The store is read first, so a store failing meanwhile leaves the session as it was.
        """
        assert self._alink is not None
        messages, state, version = await self._alink.load()
        self._reset_engine()
        self._wire_summarizer(self.summarizer)
        self.engine.add(messages)
        self._state_version = version
        if state is not None:
            self.engine.import_state(state)

    async def _flush_snapshots(self) -> None:
        """Copy snapshots compaction wrote (in memory or files) to the async store, so replicas can read them."""
        assert self._alink is not None
        written = [sid for sid in self.snapshots.list_snapshots(self.session_id) if sid not in self._stored_snapshots]
        for sid in written:
            await self._alink.put_snapshot(sid, self.snapshots.get_snapshot(self.session_id, sid))
            self._stored_snapshots.add(sid)

    async def restore_to_store(self) -> None:
        """Async twin of `Session.restore_to_store`: write this session back into a store that lost it.

        The messages not written yet go too; the snapshots are copied again.
        """
        link = self._alink
        if link is None:
            raise UsageError(f"Session {self.session_id!r} has no store to restore to; pass `store=` when creating it.")
        await link.restore(self.engine.transcript, model=self.model, window=self.budget.window)
        self._unsaved.clear()
        self._stored_snapshots.clear()
        async with link.lock():
            version = await link.version()
            if version == 0:
                await self._flush_snapshots()
                self._state_version = await link.save(self.engine.export_state(), expected_version=0)
            elif version != self._state_version:
                await self._reload()
        link.recovered()

    async def aread_context(self, ref: str, *, page: int = 1) -> str:
        """`read_context` that also reads snapshots from the async store (written by another process)."""
        sid = ref.strip()
        if self._alink is not None and sid.startswith("snap_"):
            try:
                self.snapshots.get_snapshot(self.session_id, sid)
            except SnapshotError:
                try:
                    data = await self._alink.get_snapshot(sid)
                except (SnapshotError, StoreUnavailable, SessionNotFound):
                    pass  # not in the store (or it fails): read_context rebuilds it from the transcript or says so
                else:
                    self.snapshots.put_snapshot(self.session_id, sid, data)
                    self._stored_snapshots.add(sid)
        return self.read_context(ref, page=page)

    async def _drive(self, flow: Generator[SummaryRequest, SummaryReply, Served]) -> Served:
        try:
            request = next(flow)
            while True:
                reply: SummaryReply
                try:
                    assert self.summarizer is not None
                    reply = await self.summarizer.summarize(request)
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

    async def complete(
        self,
        client: AsyncModel,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelResponse:
        """Async twin of `Session.complete`."""
        if self.delegation_due():
            await self.delegate_pending(client)
        view = (await self.prepare(format="internal")).view
        limit = self._reply_limit(max_tokens)
        for attempt in range(self.config.reactive_retries + 1):
            sent = self.engine.used()
            try:
                response = await client.request(
                    view, tools=self._all_tools(tools), max_tokens=limit, temperature=temperature
                )
                break
            except ContextOverflowError as exc:
                if attempt >= self.config.reactive_retries:
                    raise
                self._adopt_served_window(exc)
                view = (await self.on_context_overflow(format="internal")).view
                sent_limit, limit = limit, self._reply_limit(max_tokens)
                self._check_progress(exc, sent, sent_limit, limit)
        await self._calibrate_unreported(response, view, tools, client)
        return self._accept(response)

    async def stream(
        self,
        client: AsyncModel,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Async twin of `Session.stream`."""
        if self.delegation_due():
            await self.delegate_pending(client)
        view = (await self.prepare(format="internal")).view
        limit = self._reply_limit(max_tokens)
        for attempt in range(self.config.reactive_retries + 1):
            sent = self.engine.used()
            started = False
            overflow: ContextOverflowError
            try:
                async for event in client.stream(
                    view, tools=self._all_tools(tools), max_tokens=limit, temperature=temperature
                ):
                    started = True
                    if isinstance(event, ResponseDone):
                        await self._calibrate_unreported(event.response, view, tools, client)
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
                    response = await client.request(
                        view, tools=self._all_tools(tools), max_tokens=limit, temperature=temperature
                    )
                except ContextOverflowError as exc:
                    overflow = await self._served_limit(exc, client)
                except UpstreamError as exc:
                    overflow = await self._overflow_or_raise(exc, client)
                else:
                    await self._calibrate_unreported(response, view, tools, client)
                    for replayed in reply_events(self._accept(response)):
                        yield replayed
                    return
            if attempt >= self.config.reactive_retries:
                raise overflow
            self._adopt_served_window(overflow)
            view = (await self.on_context_overflow(format="internal")).view
            sent_limit, limit = limit, self._reply_limit(max_tokens)
            self._check_progress(overflow, sent, sent_limit, limit)

    async def _calibrate_unreported(
        self,
        response: ModelResponse,
        view: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None,
        client: AsyncModel,
    ) -> None:
        """Async twin of `Session._calibrate_unreported`."""
        steps = self._server_count(
            response.usage,
            view,
            self._all_tools(tools),
            base_url=served_base_url(client),
            model_name=client.model_name,
        )
        if steps is None:
            return
        from .llm._served_io import run_async
        from .llm.served_window import DEFAULT_PROBE_TIMEOUT

        try:
            await run_async(steps, None, None, DEFAULT_PROBE_TIMEOUT)
        except (UpstreamError, UsageError) as exc:
            self._server_count_failed(exc)

    async def _served_limit(self, error: ContextOverflowError, model: object) -> ContextOverflowError:
        """Async twin of `Session._served_limit`."""
        base_url = served_base_url(model)
        if error.limit is not None or base_url is None:
            return error
        from .llm.stream_recovery import awith_served_limit

        return await awith_served_limit(error, base_url, model=self.model)

    async def _overflow_or_raise(self, error: UpstreamError, model: object) -> ContextOverflowError:
        """Async twin of `Session._overflow_or_raise`."""
        base_url = served_base_url(model)
        if error.status_code is not None or base_url is None:
            raise error
        from .llm.served_window import aprobe
        from .llm.stream_recovery import overflow_after_cut

        try:
            served = await aprobe(base_url, model=self.model)
        except UpstreamError:
            raise error from None
        return overflow_after_cut(error, served, window=self.budget.window)

    async def delegate_pending(self, client: AsyncModel) -> list[DelegationResult]:
        """Async twin of `Session.delegate_pending`."""
        results = []
        for marked in list(self._delegable):
            sub = AsyncSession(**self._sub_session_kwargs(marked))
            result = await arun(
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

    async def call_with_retry(self, call: Callable[[list[Any]], Any], *, format: OutputFormat | None = None) -> Any:
        """Prepare, await ``call(view)``; on ContextOverflowError compact (reactive layer) and retry as configured."""
        view = await self.prepare(format=format)
        for attempt in range(self.config.reactive_retries + 1):
            sent = self.engine.used()
            try:
                return await call(view.messages)
            except ContextOverflowError as exc:
                if attempt >= self.config.reactive_retries:
                    raise
                self._adopt_served_window(exc)
                view = await self.on_context_overflow(format=format)
                self._check_progress(exc, sent, None, None)
        raise UsageError("unreachable: reactive retry loop ended without a result")  # pragma: no cover

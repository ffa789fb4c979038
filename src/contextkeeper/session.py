"""The agent-facing API: add messages, prepare the view, hook into the agent loop.

`Session` (sync) and `AsyncSession` (async) share `_BaseSession`, which holds everything but
the I/O of the summarize layer: the engine's compaction is a generator that yields a
`SummaryRequest`, and each twin answers it with its own summarizer.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .adapters import Format, from_messages, to_messages
from .budget import Budget, PressureMonitor, Thresholds
from .compaction.config import CompactionConfig
from .compaction.engine import ContextEngine, ViewStatus
from .compaction.summarizer import AsyncSummarizer, Summarizer, SummaryReply, SummaryRequest
from .delegation import DelegationResult, arun, run, session_options
from .events import Alert, DelegationFinished, Event, EventBus
from .exceptions import ConfigError, ContextOverflowError, SnapshotError, SummaryRejected, UsageError
from .ledger import Ledger, StepStatus
from .messages import Message, ToolCall
from .models import lookup_model
from .notes import NOTES_TOOL, Notes
from .snapshots import READ_CONTEXT_TOOL, FileSnapshotStore, MemorySnapshotStore, SnapshotStore, read_context
from .tokens import TokenCounter, counter_for_model, get_counter
from .tokens.accountant import OPENAI_FRAMING, Framing, TokenAccountant
from .usage import RequestUsage, SessionUsage

if TYPE_CHECKING:
    from .llm.base import AsyncModel, Model, ModelResponse, StreamEvent

__all__ = ["AsyncSession", "DelegableTask", "OutputFormat", "PreparedView", "Session"]

OutputFormat = Format | Literal["internal"]
"""A provider format, or ``"internal"`` for contextkeeper `Message` objects (no conversion)."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class PreparedView:
    """The view for the next model call."""

    messages: list[Any]
    """The view in the caller's format (what to send)."""
    view: list[Message]
    """The same view as contextkeeper messages."""
    status: ViewStatus


def _is_async_store(store: Any) -> bool:
    import inspect

    return inspect.iscoroutinefunction(getattr(store, "append_messages", None))


_EPHEMERAL_EVENTS = frozenset({"context.status"})
"""Events not written to the persisted audit log (one per turn; the metrics carry them)."""


class _Rebuilding:
    """Snapshot reads that fall back to the transcript when the store does not have the snapshot."""

    def __init__(self, snapshots: SnapshotStore, engine: ContextEngine) -> None:
        self._snapshots, self._engine = snapshots, engine

    def put_snapshot(self, session_id: str, snapshot_id: str, data: bytes) -> None:
        self._snapshots.put_snapshot(session_id, snapshot_id, data)

    def get_snapshot(self, session_id: str, snapshot_id: str) -> bytes:
        try:
            return self._snapshots.get_snapshot(session_id, snapshot_id)
        except SnapshotError:
            rebuilt = self._engine.rebuild_snapshot(snapshot_id)
            if rebuilt is None:
                raise
            return rebuilt

    def list_snapshots(self, session_id: str) -> list[str]:
        return self._snapshots.list_snapshots(session_id)


@dataclass(frozen=True, kw_only=True)
class DelegableTask:
    """A sub-task the caller marked delegable (`Session.mark_delegable`)."""

    task_id: str
    task: str
    context: str | tuple[Message, ...] | None
    max_result_tokens: int
    max_turns: int


class _BaseSession:
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
        store: Any = None,
        tenant: str = "default",
        data_dir: str | os.PathLike[str] | None = None,
        thresholds: Thresholds | None = None,
    ) -> None:
        self.session_id = session_id or "ses_" + uuid.uuid4().hex
        if window is None and model is None:
            raise ConfigError("Session needs `model=` (looked up in the registry) or `window=` (tokens).", key="window")
        info = lookup_model(model, window=window) if model is not None else None
        ctx_window = window if window is not None else info.context_window  # type: ignore[union-attr]
        if reserved_output is None:
            reserved_output = min(info.max_output, ctx_window // 4) if info is not None else 0
        if isinstance(config, Mapping):
            config = CompactionConfig.from_dict(config)
        self.config = config or CompactionConfig()
        if counter is None:
            counter = counter_for_model(model) if model is not None else get_counter("heuristic")
        elif isinstance(counter, str):
            counter = get_counter(counter)
        self.accountant = TokenAccountant(counter, framing=framing)
        self.tools = [*tools, READ_CONTEXT_TOOL] if include_read_tool else list(tools)
        self.budget = Budget(
            window=ctx_window,
            reserved_output=reserved_output,
            tool_schemas=self.accountant.count_tools(self.tools) if self.tools else 0,
            thresholds=thresholds if thresholds is not None else Thresholds(),
        )
        self.format: Format = format
        self.events = EventBus()
        self.store = store
        """A session store (`contextkeeper.stores.open_store`) the transcript and view state persist in."""
        self.tenant = tenant
        if snapshots is None:
            if store is not None and not _is_async_store(store):
                snapshots = store  # Redis/Postgres deployments then need no shared disk
            elif data_dir is not None:
                snapshots = FileSnapshotStore(Path(data_dir) / "snapshots")
            else:
                snapshots = MemorySnapshotStore()
        self.snapshots: SnapshotStore = snapshots
        self._converted: tuple[int, str, list[Any]] | None = None
        self._converted_upto = 0
        self._reset_engine()
        self.monitor = PressureMonitor(budget=self.budget)
        self.model = model
        self.usage = SessionUsage()
        """Tokens the provider reported over this session's `complete()` calls."""
        self._delegable: list[DelegableTask] = []

    def _reset_engine(self) -> None:
        """A fresh, empty engine; conversions cached for the old one go with it (its view
        generations start from 0 again, so they could be mistaken for the new engine's)."""
        self.engine = ContextEngine(
            session_id=self.session_id,
            accountant=self.accountant,
            budget=self.budget,
            config=self.config,
            snapshots=self.snapshots,
            events=self.events,
        )
        self._converted = None

    # --- delegation (the cascade's last strategy) -------------------------------------------
    def mark_delegable(
        self,
        task: str,
        context: str | Sequence[Message] | None = None,
        *,
        max_result_tokens: int = 1500,
        max_turns: int = 6,
    ) -> DelegableTask:
        """Mark a sub-task the agent may hand to a sub-agent instead of doing it in this context.

        When the view reaches the cascade's ``delegation`` utilization (0.95 by default), the next
        `complete()`/`stream()` first runs every marked sub-task in an isolated session with its own
        budget (`contextkeeper.delegation.run`) and adds only its result here: a ``delegate``
        tool call and its result, so the step shows in the ledger like any other. Below that
        utilization the marks wait (`pending_delegations`); `delegate_pending()` runs them now.
        """
        if not isinstance(task, str) or not task.strip():
            raise ConfigError(f"mark_delegable needs the sub-task as a non-empty text, got {task!r:.60}.", key="task")
        if max_result_tokens < 16 or max_turns < 1:
            raise ConfigError(
                f"mark_delegable: max_result_tokens={max_result_tokens} (at least 16) and max_turns={max_turns} "
                "(at least 1).",
                key="max_result_tokens",
            )
        marked = DelegableTask(
            task_id="dlg_" + uuid.uuid4().hex[:16],
            task=task,
            context=context if context is None or isinstance(context, str) else tuple(context),
            max_result_tokens=max_result_tokens,
            max_turns=max_turns,
        )
        self._delegable.append(marked)
        return marked

    @property
    def pending_delegations(self) -> tuple[DelegableTask, ...]:
        """Sub-tasks marked delegable that have not run yet, oldest first."""
        return tuple(self._delegable)

    def delegation_due(self) -> bool:
        """True when marked sub-tasks wait, the view is at the ``delegation`` utilization and no call is open."""
        if not self._delegable or self.engine.has_open_calls():
            return False
        return self.engine.status().ratio >= self.config.threshold("delegation")

    def _record_delegation(self, marked: DelegableTask, result: DelegationResult) -> None:
        """Add the sub-task's result as a ``delegate`` call and its output; report it."""
        ratio = self.engine.status().ratio
        call = ToolCall(
            call_id="call_" + marked.task_id,
            name="delegate",
            arguments=json.dumps({"task": marked.task}, ensure_ascii=False),
        )
        note = "" if result.finished else "\n[the sub-agent ran out of turns; this is what it wrote]"
        self.add(
            [
                Message.assistant("", tool_calls=[call]),
                Message.tool_result(call.call_id, result.result + note, name="delegate", is_error=not result.finished),
            ]
        )
        self._delegable.remove(marked)
        self.usage = self.usage + result.usage  # the sub-task was paid for by this session
        self.events.emit(
            DelegationFinished(
                session_id=self.session_id,
                task_id=marked.task_id,
                task=marked.task,
                utilization=ratio,
                result_tokens=result.result_tokens,
                turns=result.turns,
                finished=result.finished,
                condensed=result.condensed,
                sub_session_id=result.session_id,
            )
        )

    def _sub_session_kwargs(self, marked: DelegableTask) -> dict[str, Any]:
        """Keyword arguments of the sub-session a marked sub-task runs in (a window as large as this one's)."""
        options = session_options(
            self.budget.window, None, None, marked.max_result_tokens, self.accountant.counter, None
        )
        return {"session_id": "sub_" + marked.task_id, **options}

    # --- transcript -----------------------------------------------------------------------
    def add(self, items: Sequence[Any] | Any, *, format: Format | None = None) -> int:
        """Append messages in any supported format; returns how many were new.

        Raises:
            MessageError: a malformed message (index, field and fix named); the session is unchanged.
            ToolPairError: a result for an unknown call, or a second result for a call.
        """
        messages: list[Message]
        if items.__class__ is list and all(m.__class__ is Message for m in items):
            messages = items  # the common call, without the generic checks below (engine.check copies)
        else:
            if isinstance(items, Message | Mapping) or not isinstance(items, Sequence):
                items = [items]
            if all(isinstance(m, Message) for m in items):
                messages = list(items)
            else:
                messages = to_messages(items, format=format or self.format)
        fresh = self.engine.check(messages)
        self._persist_messages(fresh)
        self.engine.commit(fresh)
        return len(fresh)

    def _persist_messages(self, fresh: Sequence[Message]) -> None:
        """Write-through hook: the sync session stores messages before they enter the transcript."""

    @property
    def transcript(self) -> list[Message]:
        """Every message ever added, unaltered by compaction."""
        return list(self.engine.transcript)

    @property
    def ledger(self) -> Ledger:
        """The task-progress ledger."""
        return self.engine.ledger

    def status(self) -> ViewStatus:
        """Accounting of the current view."""
        return self.engine.status()

    def subscribe(self, callback: Callable[[Event], object]) -> Callable[[], None]:
        """Call ``callback(event)`` for every event; returns the unsubscribe function."""
        return self.events.subscribe(callback)

    @property
    def notes(self) -> Notes:
        """Structured notes the agent (or you) keep; rendered into the context block after compaction."""
        return self.engine.notes

    def pin(self, message_id: str) -> None:
        """Never evict or shorten this message (and its round)."""
        self.engine.pinned_copy(message_id)

    def read_context(self, ref: str, *, page: int = 1) -> str:
        """Handle the `read_context` tool: a page of a snapshot, a ledger step (``#12``) or a span.

        Raises:
            SnapshotError: the reference is malformed, unknown or outside this session.
        """
        ref = ref.strip()
        if ref.startswith("#"):
            ref = self._step_ref(ref)
        return read_context(
            ref,
            session_id=self.session_id,
            snapshots=_Rebuilding(self.snapshots, self.engine),
            transcript=lambda: self.engine.transcript,
            page=page,
        ).render()

    def _step_ref(self, ref: str) -> str:
        """``#<step>`` → the step's transcript span (steps are numbered by round)."""
        try:
            step = int(ref[1:])
            r = self.engine.rounds[step]
        except (ValueError, IndexError):
            raise SnapshotError(
                f"unknown step reference {ref!r}; steps are '#<number>' as listed in the progress ledger "
                f"(0..{len(self.engine.rounds) - 1})."
            ) from None
        first = self.engine.transcript[r.indices[0]].message_id
        last = self.engine.transcript[r.indices[-1]].message_id
        return f"{first}..{last}"

    def handle_tool_call(self, name: str, arguments: str | Mapping[str, Any]) -> str | None:
        """Answer contextkeeper's own tools (``read_context``, ``notes``); None for other tools."""
        if name == NOTES_TOOL["function"]["name"]:
            return self.engine.notes.handle_tool_call(arguments, turn=self.engine.turn)
        if name != READ_CONTEXT_TOOL["function"]["name"]:
            return None
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
            if not isinstance(args, dict):
                raise TypeError("arguments must be a JSON object")
            ref, page = str(args.get("ref", "")), int(args.get("page", 1))
        except (ValueError, TypeError) as exc:
            raise SnapshotError(
                f"read_context arguments {str(arguments)[:120]!r} are invalid ({exc}); "
                'expected {"ref": "#12" | "snap_…" | "msg_a..msg_b", "page": 1}.'
            ) from None
        return self.read_context(ref, page=page)

    # --- hooks for agent loops --------------------------------------------------------------
    def on_turn_start(self) -> ViewStatus:
        """Call before each model call; returns the current accounting (for loops that budget their turn)."""
        return self.engine.status()

    def on_turn_end(
        self,
        usage: RequestUsage | Mapping[str, Any] | None = None,
        *,
        step: str | None = None,
        status: StepStatus = "done",
    ) -> None:
        """Call after each model call with the provider's usage; calibrates counting, records a step.

        ``usage`` is a `RequestUsage` or a provider usage dict (``prompt_tokens``/``input_tokens``).
        """
        reported: object = None
        if isinstance(usage, RequestUsage):
            self.usage.incr(usage)
            reported = usage.input_tokens
        elif usage:
            reported = usage.get("prompt_tokens", usage.get("input_tokens"))
        if isinstance(reported, int) and reported > 0:
            # the provider counts the tool schemas too: compare like with like
            estimated = self.engine.status().used + self.budget.tool_schemas
            self.accountant.calibration.record(estimated, reported)
        if step:
            self.engine.ledger.note(step, status=status)
        self._record_pressure()

    def on_tool_result(self, name: str, result: Any, *, call_id: str, is_error: bool = False) -> int:
        """Add a tool's result (any JSON-able value) for the pending call ``call_id``."""
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
        return self.add([Message.tool_result(call_id, text, name=name, is_error=is_error)])

    def _accept(self, response: ModelResponse) -> None:
        """Record a reply from `complete()`/`stream()`: usage, calibration, the reply itself."""
        self.on_turn_end(response.usage)
        self.add([response.message])

    def _all_tools(self, tools: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]] | None:
        merged = [*self.tools, *(tools or ())]
        return merged or None

    def _record_pressure(self) -> None:
        try:
            report = self.monitor.record_turn(self.engine.status().used)
        except Exception:  # a monitoring bug must never stop the agent
            self.engine.hook_errors += 1
            logger.exception("pressure monitor failed for session %s", self.session_id)
            return
        if getattr(report, "spike", False):
            self.events.emit(Alert(session_id=self.session_id, alert="spike", detail=f"turn cost spike: {report}"))

    def _finish(self, result: tuple[list[Message], ViewStatus], format: OutputFormat | None) -> PreparedView:
        view, status = result
        fmt = format or self.format
        if fmt == "internal":  # the engine's copy already: the caller may change it freely
            return PreparedView(messages=view, view=view, status=status)
        return PreparedView(messages=self._convert(view, fmt), view=view, status=status)

    def _convert(self, view: list[Message], fmt: Format) -> list[Any]:
        """The view in ``fmt``; between compactions only the appended messages are converted."""
        generation = self.engine.view_generation
        cached = self._converted
        # Anthropic output merges neighbouring messages, so only per-message formats extend in place.
        if cached is not None and cached[0] == generation and cached[1] == fmt and fmt != "anthropic":
            done = self._converted_upto
            out = cached[2]
            out.extend(from_messages(view[done:], format=fmt))
        else:
            out = from_messages(view, format=fmt)
        self._converted = (generation, fmt, out)
        self._converted_upto = len(view)
        return list(out)

    def _wire_summarizer(self, summarizer: Summarizer | AsyncSummarizer | None) -> None:
        """Let the session's summarizer drive the engine's summarize layer (its capabilities included)."""
        self.engine.use_summarizer(summarizer)

    def _flow(self, reactive: bool) -> Generator[SummaryRequest, SummaryReply, tuple[list[Message], ViewStatus]]:
        if reactive:
            return self.engine.reactive_flow()
        return self.engine.prepare_flow()


class Session(_BaseSession):
    """A context-managed agent session (sync).

    Args:
        session_id: Stable id (generated when omitted).
        model: Looked up in the model registry for window, max output and tokenizer.
        window: Context window in tokens (overrides the registry).
        reserved_output: Tokens kept free for the reply (default: min(max output, window/4)).
        tools: OpenAI tool schemas sent with every call (their tokens leave the budget).
        counter: A TokenCounter or spec (``"tiktoken:cl100k_base"``, ``"heuristic"``...).
        config: Compaction thresholds and policies.
        summarizer: Drives the summarize layer; without one, clearing, eviction and the ledger do the work.
        snapshots: Where full originals go (default: the store when given, else files under
            ``data_dir/snapshots`` when given, else memory).
        store: A session store (`contextkeeper.stores.open_store`): the transcript is written
            through, the view state saved with compare-and-set after each compaction, and an
            existing session with this id is resumed.
        data_dir: Directory for snapshot files when there is no store.
        thresholds: Pressure states (warning 0.70, error 0.90, critical 0.95, overflow 1.0 by default).
        format: Format of `prepare()` output and of `add()` input by default.
    """

    def __init__(self, session_id: str | None = None, *, summarizer: Summarizer | None = None, **kwargs: Any) -> None:
        super().__init__(session_id, **kwargs)
        self.summarizer = summarizer
        self._wire_summarizer(self.summarizer)
        self._state_version = 0
        if self.store is not None:
            if _is_async_store(self.store):
                raise ConfigError("Session needs a sync store; use AsyncSession with an async store.", key="store")
            self._resume()

    def _resume(self) -> None:
        """Load (or create) the stored session: replay its transcript, restore its view state."""
        store = self.store
        store.create_session(self.session_id, tenant=self.tenant, model=self.model, window=self.budget.window)
        stored = store.load_messages(self.session_id)
        if stored:
            self.engine.add(stored)
        state, self._state_version = store.load_state(self.session_id)
        if state is not None:
            self.engine.import_state(state)
        self.events.sinks.append(self._audit)

    def _audit(self, record: Mapping[str, Any]) -> None:
        if record.get("kind") not in _EPHEMERAL_EVENTS:
            self.store.append_audit(self.session_id, record)

    def _persist_messages(self, fresh: Sequence[Message]) -> None:
        if self.store is not None and fresh:
            self.store.append_messages(self.session_id, fresh)

    def prepare(self, *, format: OutputFormat | None = None) -> PreparedView:
        """The view for the next model call, compacting first when it passed the high-water mark.

        With a store, a compaction runs under the session's lock and its view state is saved with
        compare-and-set; a writer that lost the race reloads the winner's state.
        """
        if self.store is None or not self.engine.needs_compaction():
            appended = self.engine.prepare_appended()
            return self._finish(appended or self._drive(self._flow(False)), format)
        with self.store.lock(self.session_id):
            return self._finish(self._persisted(self._flow(False)), format)

    def _persisted(
        self,
        flow: Generator[SummaryRequest, SummaryReply, tuple[list[Message], ViewStatus]],
        *,
        reactive: bool = False,
    ) -> tuple[list[Message], ViewStatus]:
        _, stored_version = self.store.load_state(self.session_id)
        if stored_version != self._state_version:  # another process compacted meanwhile: start from its state
            flow.close()
            self._reload()
            flow = self._flow(reactive)
        result = self._drive(flow)
        self._state_version = self.store.save_state(
            self.session_id, self.engine.export_state(), expected_version=self._state_version
        )
        return result

    def _reload(self) -> None:
        """Rebuild the engine from the store (transcript and view state)."""
        self._reset_engine()
        self._wire_summarizer(self.summarizer)
        self.engine.add(self.store.load_messages(self.session_id))
        state, self._state_version = self.store.load_state(self.session_id)
        if state is not None:
            self.engine.import_state(state)

    def on_context_overflow(self, *, format: OutputFormat | None = None) -> PreparedView:
        """The provider said the prompt is too long: compact deeper now and return the view to retry with."""
        if self.store is None:
            return self._finish(self._drive(self._flow(True)), format)
        with self.store.lock(self.session_id):  # saved like any compaction: a restart resumes this view
            return self._finish(self._persisted(self._flow(True), reactive=True), format)

    def _drive(
        self, flow: Generator[SummaryRequest, SummaryReply, tuple[list[Message], ViewStatus]]
    ) -> tuple[list[Message], ViewStatus]:
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
            result: tuple[list[Message], ViewStatus] = stop.value
            return result

    def complete(
        self,
        model: Model,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelResponse:
        """One agent step: prepare the view, call ``model``, record usage, append the reply.

        On a provider context-length error the view is compacted deeper (the reactive layer) and the call is
        retried ``config.reactive_retries`` times (once by default) before the error is raised.
        Sub-tasks marked delegable run first when the view is at the ``delegation`` utilization.
        """
        if self.delegation_due():
            self.delegate_pending(model)
        view = self.prepare(format="internal").view
        for attempt in range(self.config.reactive_retries + 1):
            try:
                response = model.request(
                    view, tools=self._all_tools(tools), max_tokens=max_tokens, temperature=temperature
                )
                break
            except ContextOverflowError:
                if attempt >= self.config.reactive_retries:
                    raise
                view = self.on_context_overflow(format="internal").view
        self._accept(response)
        return response

    def stream(
        self,
        model: Model,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Iterator[StreamEvent]:
        """`complete()` as a stream: yields the model's events; the reply is appended when it is done.

        A context-length error before the first event triggers the reactive layer and a retry, as in `complete()`.
        """
        if self.delegation_due():
            self.delegate_pending(model)
        view = self.prepare(format="internal").view
        for attempt in range(self.config.reactive_retries + 1):
            started = False
            try:
                for event in model.stream(
                    view, tools=self._all_tools(tools), max_tokens=max_tokens, temperature=temperature
                ):
                    started = True
                    if event.kind == "done":
                        self._accept(event.response)
                    yield event
                return
            except ContextOverflowError:
                if started or attempt >= self.config.reactive_retries:
                    raise
                view = self.on_context_overflow(format="internal").view

    def delegate_pending(self, model: Model) -> list[DelegationResult]:
        """Run every sub-task marked delegable now, each in its own session with ``model``; add their results."""
        results = []
        for marked in list(self._delegable):
            sub = Session(**self._sub_session_kwargs(marked))
            result = run(
                sub,
                marked.task,
                marked.context,
                model=model,
                max_result_tokens=marked.max_result_tokens,
                max_turns=marked.max_turns,
            )
            self._record_delegation(marked, result)
            results.append(result)
        return results

    def call_with_retry(self, call: Callable[[list[Any]], Any], *, format: OutputFormat | None = None) -> Any:
        """Prepare, call ``call(view)``; on ContextOverflowError compact (reactive layer) and retry as configured."""
        view = self.prepare(format=format)
        for attempt in range(self.config.reactive_retries + 1):
            try:
                return call(view.messages)
            except ContextOverflowError:
                if attempt >= self.config.reactive_retries:
                    raise
                view = self.on_context_overflow(format=format)
        raise UsageError("unreachable: reactive retry loop ended without a result")  # pragma: no cover


class AsyncSession(_BaseSession):
    """Async twin of `Session`: same methods, `prepare` and `on_context_overflow` are coroutines."""

    def __init__(
        self, session_id: str | None = None, *, summarizer: AsyncSummarizer | None = None, **kwargs: Any
    ) -> None:
        store = kwargs.get("store")
        if store is not None and not _is_async_store(store):
            raise ConfigError(
                "AsyncSession needs an async store (open_async_store); use Session for sync.", key="store"
            )
        super().__init__(session_id, **kwargs)
        self.summarizer = summarizer
        self._wire_summarizer(self.summarizer)
        self._state_version = 0
        self._unsaved: list[Message] = []
        self._loaded = store is None
        self._stored_snapshots: set[str] = set()

    @classmethod
    async def open(cls, session_id: str, *, store: Any, **kwargs: Any) -> AsyncSession:
        """A session bound to an async store: created there if new, resumed (transcript and view state) if not."""
        session = cls(session_id, store=store, **kwargs)
        await session.load()
        return session

    async def load(self) -> None:
        """Load the stored transcript and view state (done by `open`; idempotent)."""
        if self._loaded:
            return
        store = self.store
        await store.create_session(self.session_id, tenant=self.tenant, model=self.model, window=self.budget.window)
        stored = await store.load_messages(self.session_id)
        if stored:
            self.engine.add(stored)
        state, self._state_version = await store.load_state(self.session_id)
        if state is not None:
            self.engine.import_state(state)
        self._loaded = True

    def _persist_messages(self, fresh: Sequence[Message]) -> None:
        if self.store is not None:
            self._unsaved.extend(fresh)  # written by the next prepare() or flush()

    async def flush(self) -> None:
        """Write messages added since the last prepare to the store (idempotent by message id)."""
        if self.store is not None and self._unsaved:
            if not self._loaded:
                raise UsageError("AsyncSession with a store must be loaded first: use `await AsyncSession.open(...)`.")
            batch, self._unsaved = self._unsaved, []
            try:
                await self.store.append_messages(self.session_id, batch)
            except BaseException:
                self._unsaved[:0] = batch  # keep them for the next try
                raise

    async def prepare(self, *, format: OutputFormat | None = None) -> PreparedView:
        """The view for the next model call, compacting first when it passed the high-water mark.

        With a store, pending messages are written first; a compaction runs under the session's
        lock and saves the view state with compare-and-set.
        """
        await self.flush()
        if self.store is None or not self.engine.needs_compaction():
            appended = self.engine.prepare_appended()
            return self._finish(appended or await self._drive(self._flow(False)), format)
        return self._finish(await self._compact_saved(reactive=False), format)

    async def on_context_overflow(self, *, format: OutputFormat | None = None) -> PreparedView:
        """The provider said the prompt is too long: compact deeper now and return the view to retry with."""
        if self.store is None:
            return self._finish(await self._drive(self._flow(True)), format)
        await self.flush()
        return self._finish(await self._compact_saved(reactive=True), format)

    async def _compact_saved(self, *, reactive: bool) -> tuple[list[Message], ViewStatus]:
        """Compact under the session's lock; save the snapshots it wrote, then the view state (CAS)."""
        async with self.store.lock(self.session_id):
            _, stored_version = await self.store.load_state(self.session_id)
            if stored_version != self._state_version:  # another process compacted meanwhile: start from its state
                await self._reload()
            result = await self._drive(self._flow(reactive))
            await self._flush_snapshots()
            self._state_version = await self.store.save_state(
                self.session_id, self.engine.export_state(), expected_version=self._state_version
            )
        return result

    async def _reload(self) -> None:
        """Rebuild the engine from the store (transcript and view state)."""
        self._reset_engine()
        self._wire_summarizer(self.summarizer)
        self.engine.add(await self.store.load_messages(self.session_id))
        state, self._state_version = await self.store.load_state(self.session_id)
        if state is not None:
            self.engine.import_state(state)

    async def _flush_snapshots(self) -> None:
        """Copy snapshots compaction wrote (in memory or files) to the async store, so replicas can read them."""
        written = [sid for sid in self.snapshots.list_snapshots(self.session_id) if sid not in self._stored_snapshots]
        for sid in written:
            await self.store.put_snapshot(self.session_id, sid, self.snapshots.get_snapshot(self.session_id, sid))
            self._stored_snapshots.add(sid)

    async def aread_context(self, ref: str, *, page: int = 1) -> str:
        """`read_context` that also reads snapshots from the async store (written by another process)."""
        sid = ref.strip()
        if self.store is not None and sid.startswith("snap_"):
            try:
                self.snapshots.get_snapshot(self.session_id, sid)
            except SnapshotError:
                try:
                    data = await self.store.get_snapshot(self.session_id, sid)
                except SnapshotError:
                    pass  # not stored either: read_context rebuilds it from the transcript or says so
                else:
                    self.snapshots.put_snapshot(self.session_id, sid, data)
                    self._stored_snapshots.add(sid)
        return self.read_context(ref, page=page)

    async def _drive(
        self, flow: Generator[SummaryRequest, SummaryReply, tuple[list[Message], ViewStatus]]
    ) -> tuple[list[Message], ViewStatus]:
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
            result: tuple[list[Message], ViewStatus] = stop.value
            return result

    async def complete(
        self,
        model: AsyncModel,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelResponse:
        """Async twin of `Session.complete`."""
        if self.delegation_due():
            await self.delegate_pending(model)
        view = (await self.prepare(format="internal")).view
        for attempt in range(self.config.reactive_retries + 1):
            try:
                response = await model.request(
                    view, tools=self._all_tools(tools), max_tokens=max_tokens, temperature=temperature
                )
                break
            except ContextOverflowError:
                if attempt >= self.config.reactive_retries:
                    raise
                view = (await self.on_context_overflow(format="internal")).view
        self._accept(response)
        return response

    async def stream(
        self,
        model: AsyncModel,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Async twin of `Session.stream`."""
        if self.delegation_due():
            await self.delegate_pending(model)
        view = (await self.prepare(format="internal")).view
        for attempt in range(self.config.reactive_retries + 1):
            started = False
            try:
                async for event in model.stream(
                    view, tools=self._all_tools(tools), max_tokens=max_tokens, temperature=temperature
                ):
                    started = True
                    if event.kind == "done":
                        self._accept(event.response)
                    yield event
                return
            except ContextOverflowError:
                if started or attempt >= self.config.reactive_retries:
                    raise
                view = (await self.on_context_overflow(format="internal")).view

    async def delegate_pending(self, model: AsyncModel) -> list[DelegationResult]:
        """Async twin of `Session.delegate_pending`."""
        results = []
        for marked in list(self._delegable):
            sub = AsyncSession(**self._sub_session_kwargs(marked))
            result = await arun(
                sub,
                marked.task,
                marked.context,
                model=model,
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
            try:
                return await call(view.messages)
            except ContextOverflowError:
                if attempt >= self.config.reactive_retries:
                    raise
                view = await self.on_context_overflow(format=format)
        raise UsageError("unreachable: reactive retry loop ended without a result")  # pragma: no cover

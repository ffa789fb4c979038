"""The agent-facing API: add messages, prepare the view, hook into the agent loop.

`Session` (sync) and `AsyncSession` (async) share `_BaseSession`, which holds everything but
the I/O of the summarize layer: the engine's compaction is a generator that yields a
`SummaryRequest`, and each twin answers it with its own summarizer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeGuard

from ._binding import AsyncStoreLink, StoreLink
from ._brief import brief
from ._json import tool_arguments, whole_number
from ._replies import overflow_unresolved, repair_reply, replay_events
from .adapters import Format, from_messages, to_messages
from .budget import Budget, PressureMonitor, Thresholds
from .compaction.config import CompactionConfig
from .compaction.engine import ContextEngine
from .compaction.summarizer import AsyncSummarizer, Summarizer, SummaryReply, SummaryRequest
from .compaction.viewstatus import StatusReading, ViewStatus
from .delegation import DelegationResult, arun, run, session_options
from .events import Alert, DelegationFinished, Event, EventBus
from .exceptions import (
    ConfigError,
    ContextOverflowError,
    OverflowUnresolved,
    SessionNotFound,
    SnapshotError,
    StoreUnavailable,
    StreamInterrupted,
    SummaryRejected,
    UsageError,
    VersionConflict,
)
from .ledger import Ledger, StepStatus
from .llm.base import ResponseDone
from .messages import Message, ToolCall
from .models import lookup_model
from .notes import NOTES_TOOL, Notes
from .snapshots import READ_CONTEXT_TOOL, FileSnapshotStore, MemorySnapshotStore, SnapshotStore, read_context
from .tokens import TokenCounter, counter_for_model, get_counter
from .tokens.accountant import OPENAI_FRAMING, Framing, TokenAccountant
from .usage import RequestUsage, SessionUsage

if TYPE_CHECKING:
    from .llm.base import AsyncModel, Model, ModelResponse, StreamEvent
    from .memory.longterm import LongTermMemory
    from .memory.tiers import HybridMemory
    from .recall import SessionMemory

__all__ = ["AsyncSession", "DelegableTask", "OutputFormat", "PreparedView", "Session"]

OutputFormat = Format | Literal["internal"]
"""A provider format, or ``"internal"`` for contextkeeper `Message` objects (no conversion)."""

logger = logging.getLogger(__name__)

Served = tuple[list[Message], ViewStatus | StatusReading]
"""A served view and its status (a `StatusReading` until something needs the `ViewStatus`)."""


class PreparedView:
    """The view for the next model call: ``messages`` to send, the same ``view`` as contextkeeper
    messages, and its ``status`` (computed when first read)."""

    __slots__ = ("_status", "messages", "view")

    def __init__(self, *, messages: list[Any], view: list[Message], status: ViewStatus | StatusReading) -> None:
        self.messages = messages
        """The view in the caller's format (what to send)."""
        self.view = view
        """The same view as contextkeeper messages."""
        self._status = status

    @property
    def status(self) -> ViewStatus:
        """Accounting of the view as it was served (see `ViewStatus`)."""
        status = self._status = _resolved(self._status)
        return status

    def __repr__(self) -> str:
        return f"PreparedView(messages={len(self.messages)}, status={self.status!r})"


def _resolved(status: ViewStatus | StatusReading) -> ViewStatus:
    return status.status() if isinstance(status, StatusReading) else status


def _is_async_store(store: Any) -> bool:
    import inspect

    return inspect.iscoroutinefunction(getattr(store, "append_messages", None))


_MAX_REF_CHARS = 512
"""Longest `read_context` reference (a span of two message ids fits many times over)."""


def _weak_budget(method: Callable[[], Budget]) -> Callable[[], Budget]:
    """The session's budget method, held weakly: the engine must not keep its session alive.

    A strong reference makes a cycle (session → engine → bound method → session) that only the
    full garbage collector frees; a service caching many sessions then pauses for it.
    """
    ref = weakref.WeakMethod(method)

    def budget() -> Budget:
        bound = ref()
        if bound is None:
            raise RuntimeError("the session of this engine was closed and freed")
        return bound()

    return budget


def _positive_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


_SAVE_ATTEMPTS = 3
"""Compactions of one prepare that may lose a compare-and-set (a holder whose lock lease ran out)."""


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
    _recalled_async = False
    """True for the async twin: it recalls off the event loop before `_finish` (see `AsyncSession._arecalled`)."""

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
        max_tokens: int | Literal["reserved"] | None = "reserved",
        memory: SessionMemory | LongTermMemory | HybridMemory | bool | None = None,
    ) -> None:
        self.session_id = session_id or "ses_" + uuid.uuid4().hex
        self.memory: SessionMemory | None = None
        """Long-term memory wired into the view (`contextkeeper.recall`); None when off (the default)."""
        if memory is not None and memory is not False:
            from .recall import coerce_memory

            self.memory = coerce_memory(memory)
            assert self.memory is not None
            self.memory.bind(self.session_id, tenant)
        if not (max_tokens is None or max_tokens == "reserved" or _positive_int(max_tokens)):
            raise ConfigError(
                f"max_tokens={max_tokens!r}: use 'reserved' (send the reserved output), a positive int, or None "
                "(send no limit).",
                key="max_tokens",
            )
        self.max_tokens: int | Literal["reserved"] | None = max_tokens
        """The reply limit `complete()`/`stream()` send when the call gives none (see `Session`)."""
        if window is None and model is None:
            raise ConfigError("Session needs `model=` (looked up in the registry) or `window=` (tokens).", key="window")
        info = lookup_model(model, window=window) if model is not None else None
        ctx_window = window if window is not None else info.context_window  # type: ignore[union-attr]
        if reserved_output is None:
            reserved_output = min(info.max_output, ctx_window // 4) if info is not None else 0
        self.config = CompactionConfig.coerce(config)
        if counter is None:
            counter = counter_for_model(model) if model is not None else get_counter("heuristic")
        elif isinstance(counter, str):
            counter = get_counter(counter)
        self.accountant = TokenAccountant(counter, framing=framing)
        self.tools = [*tools, READ_CONTEXT_TOOL] if include_read_tool else list(tools)
        if include_read_tool and self.memory is not None:
            from .recall import RECALL_TOOL

            self.tools.append(RECALL_TOOL)
        self.configured_budget = Budget(
            window=ctx_window,
            reserved_output=reserved_output,
            tool_schemas=self.accountant.count_tools(self.tools) if self.tools else 0,
            thresholds=thresholds if thresholds is not None else Thresholds(),
        )
        """The budget as configured; `budget` adds calibration and the window the server serves."""
        self._budget_key: tuple[float, int | None] = (1.0, None)
        self._pipeline_cache: tuple[Budget, int, Budget] | None = None
        self._engine_built = False
        """False while `_reset_engine` builds an engine (its constructor already asks for the budget)."""
        self._budget = self.configured_budget
        self._largest_answered = 0
        """Counted tokens of the largest view a model answered (an empty stream past it may be an overflow)."""
        self.format: Format = format
        self.events = EventBus()
        self.store = store
        """A session store (`contextkeeper.stores.open_store`) the transcript and view state persist in."""
        self.tenant = tenant
        """The tenant the session belongs to in its store; another tenant's session of this id is never opened."""
        self._link: StoreLink | None = None
        if store is not None and not _is_async_store(store):
            self._link = StoreLink(store, self.session_id, tenant, self.events, snapshots_in_store=snapshots is None)
        if snapshots is None:
            if self._link is not None and self._link.snapshots is not None:
                snapshots = self._link.snapshots  # Redis/Postgres deployments then need no shared disk
            elif data_dir is not None:
                snapshots = FileSnapshotStore(Path(data_dir) / "snapshots")
            else:
                snapshots = MemorySnapshotStore()
        self.snapshots: SnapshotStore = snapshots
        self._converted: tuple[int, str, list[Any]] | None = None
        self._converted_upto = 0
        self._reset_engine()
        self.monitor = PressureMonitor(budget=self._current_budget())
        self.model = model
        self.usage = SessionUsage()
        """Tokens the provider reported over this session's `complete()` calls."""
        self._delegable: list[DelegableTask] = []

    def _reset_engine(self) -> None:
        """A fresh, empty engine; conversions cached for the old one go with it (its view
        generations start from 0 again, so they could be mistaken for the new engine's)."""
        self._engine_built = False
        self.engine = ContextEngine(
            session_id=self.session_id,
            accountant=self.accountant,
            budget=_weak_budget(self._current_budget if self.memory is None else self._pipeline_budget),
            config=self.config,
            snapshots=self.snapshots,
            events=self.events,
        )
        self._converted = None
        self._engine_built = True

    def _pipeline_budget(self) -> Budget:
        """The budget the compaction pipeline works to: the session's, less the room recalled memories take."""
        budget = self._current_budget()
        assert self.memory is not None
        # while an engine is being built there is no view yet: memory holds only its own room
        reserve = self.memory.reserve(self.engine if self._engine_built else None, budget.effective)
        cached = self._pipeline_cache
        if cached is not None and cached[0] is budget and cached[1] == reserve:
            return cached[2]
        try:
            narrowed = replace(budget, tool_schemas=budget.tool_schemas + reserve)
        except ConfigError:  # a budget too small to share: memory gets no room of its own
            narrowed = budget
        self._pipeline_cache = (budget, reserve, narrowed)
        return narrowed

    # --- budget: calibration and the served window -------------------------------------------
    @property
    def budget(self) -> Budget:
        """The budget the view is held to: the configured one, with the calibration factor applied
        (once ``min_samples`` usage reports agree on it) and the server's window when a
        context-length error reported a smaller one. Its counts are the counter's (`Budget.scale`)."""
        return self._current_budget()

    def _current_budget(self) -> Budget:
        calibration = self.accountant.calibration
        key = (calibration.applied, calibration.served_window)
        if key != self._budget_key:
            try:
                self._budget = self.configured_budget.adapted(scale=key[0], served_window=key[1])
            except ConfigError:
                # a factor or window that leaves no room (tools changed since it was learned): the
                # window alone, then neither, rather than a budget that cannot hold a message
                try:
                    self._budget = self.configured_budget.adapted(served_window=key[1])
                except ConfigError:
                    self._budget = self.configured_budget
            self._budget_key = key
        return self._budget

    def _reply_limit(self, max_tokens: int | None) -> int | None:
        """The ``max_tokens`` to send: the call's own, else the session's setting."""
        if max_tokens is not None:
            return max_tokens
        if self.max_tokens == "reserved":
            return self.budget.reserved_output or None
        return self.max_tokens

    def _adopt_served_window(self, error: ContextOverflowError) -> None:
        """A context-length error named a window smaller than the budget's: adopt it and say so.

        Raises:
            OverflowUnresolved: the served window cannot hold the tool schemas and a reply.
        """
        limit = error.limit
        current = self.budget
        if limit is None or limit >= current.window:
            return
        try:
            adopted = self.configured_budget.adapted(scale=current.scale, served_window=limit)
        except ConfigError as exc:
            raise OverflowUnresolved(
                f"session {self.session_id!r}: {error.url or 'the model server'} serves a context window of {limit} "
                f"tokens, too small for this session's tool schemas ({current.tool_schemas} tokens) and a reply "
                f"({exc}); send fewer tools, or raise the server's window (llama.cpp `--ctx-size`, Ollama "
                "`num_ctx`, vLLM `--max-model-len`).",
                url=error.url,
                status_code=error.status_code,
                limit=limit,
                requested=error.requested,
                view_tokens=self.engine.status().used,
            ) from None
        self.accountant.calibration.adopt_window(limit)
        detail = (
            f"{error.url or 'the model server'} serves a context window of {limit} tokens, not the configured "
            f"{self.configured_budget.window}: the budget now uses {limit} (reserved output "
            f"{adopted.reserved_output}, effective {adopted.calibrated_effective})"
        )
        logger.warning("session %s: %s", self.session_id, detail)
        self.events.emit(Alert(session_id=self.session_id, alert="served-window", detail=detail))

    def _check_progress(
        self, error: ContextOverflowError, sent_tokens: int, sent_limit: int | None, limit: int | None
    ) -> None:
        """Refuse to resend a request emergency compaction did not make smaller.

        Raises:
            OverflowUnresolved: the view has as many counted tokens as the one the server refused,
                and the reply limit did not shrink either.
        """
        status = self.engine.status()
        smaller_reply = limit is not None and (sent_limit is None or limit < sent_limit)
        if status.used_raw >= sent_tokens and not smaller_reply:
            raise overflow_unresolved(self.session_id, error, status.used)

    def _may_be_overflow(self) -> bool:
        """An empty or cut stream before the first event may be a prompt too long for the server.

        Some servers (llama-cpp-python's) answer a streamed request that does not fit their
        window with HTTP 200 and no events. Likely when the view is larger than any view a model
        answered in this session, or near the budget.
        """
        status = self.engine.status()
        return status.used_raw > self._largest_answered or status.ratio >= 0.9

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
        """Accounting of the current view (``degraded`` says when the store does not have it yet)."""
        status = self.engine.status()
        if self.memory is not None:
            from .recall import with_memory_status

            status = with_memory_status(status, self.memory, budget=self.budget)
        return self._with_store(status)

    def _store_problem(self) -> str | None:
        return None if self._link is None else self._link.problem

    def _with_store(self, status: ViewStatus) -> ViewStatus:
        problem = self._store_problem()
        return status if problem is None else replace(status, degraded=problem)

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
            SnapshotError: the reference is malformed, unknown or outside this session, or the
                page is not a positive integer.
        """
        if not isinstance(ref, str):
            raise SnapshotError(f"read_context needs the reference as a string, got {type(ref).__name__}.")
        if not isinstance(page, int) or isinstance(page, bool) or page < 1:
            raise SnapshotError(f"page must be a positive integer, got {brief(page)}.")
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
        number = ref[1:].strip()
        if number.isascii() and number.isdigit() and len(number) <= 12 and int(number) < len(self.engine.rounds):
            r = self.engine.rounds[int(number)]
            first = self.engine.transcript[r.indices[0]].message_id
            last = self.engine.transcript[r.indices[-1]].message_id
            return f"{first}..{last}"
        raise SnapshotError(
            f"unknown step reference {brief(ref)}; steps are '#<number>' as listed in the progress ledger "
            f"(0..{len(self.engine.rounds) - 1})."
        )

    def handle_tool_call(self, name: str, arguments: str | Mapping[str, Any]) -> str | None:
        """Answer contextkeeper's own tools (``read_context``, ``notes``); None for other tools.

        The answer is always a text for the model: arguments it got wrong (not JSON, too large or
        too deep, a page that is not a whole number from 1, an unknown reference) give
        ``error: ...`` with what to send instead.
        """
        if name == NOTES_TOOL["function"]["name"]:
            return self.engine.notes.handle_tool_call(arguments, turn=self.engine.turn)
        if name == "recall" and self.memory is not None:
            return self._answer_recall(arguments)
        if name != READ_CONTEXT_TOOL["function"]["name"]:
            return None
        example = '{"ref": "#12" | "snap_…" | "msg_a..msg_b", "page": 1}'
        args = tool_arguments(arguments, example=example)
        if isinstance(args, str):
            return args
        ref, page = args.get("ref"), args.get("page", 1)
        if not isinstance(ref, str) or not ref.strip() or len(ref) > _MAX_REF_CHARS:
            return (
                f"error: ref must be a reference of up to {_MAX_REF_CHARS} characters, got {brief(ref)}; "
                f"send {example}."
            )
        number = whole_number(page)
        if number is None:
            return f"error: page must be a whole number from 1, got {brief(page)}; send {example}."
        try:
            return self.read_context(ref, page=number)
        except SnapshotError as exc:
            return f"error: {exc}"

    def recall(self, query: str) -> str:
        """Handle the `recall` tool: the memories best matching ``query`` that the view does not show.

        Raises:
            UsageError: the session has no memory (create it with ``memory=``).
            MemoryQueryError: the query is empty or not text.
        """
        if self.memory is None:
            raise UsageError(f"session {self.session_id!r} has no long-term memory; create it with `memory=`.")
        from .exceptions import MemoryQueryError
        from .memory.longterm import MAX_QUERY_CHARS

        if not isinstance(query, str) or not query.strip():
            raise MemoryQueryError(f"recall needs the query as a non-empty text, got {brief(query)}.", field="query")
        room = self.memory.room(self.budget.effective)
        return self.memory.answer(
            query[-MAX_QUERY_CHARS:], view=self.engine.book.view, max_tokens=room, count=self.accountant.count_message
        )

    def _answer_recall(self, arguments: str | Mapping[str, Any]) -> str:
        example = '{"query": "the failing test and its error"}'
        args = tool_arguments(arguments, example=example)
        if isinstance(args, str):
            return args
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            return f"error: query must be a non-empty text, got {brief(query)}; send {example}."
        return self.recall(query)

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
        Usage the provider did not report (``RequestUsage.reported`` False, or no usage at all)
        is counted in ``session.usage.unreported`` and teaches the calibration nothing.
        """
        reported: object = None
        if isinstance(usage, RequestUsage):
            self.usage.incr(usage)
            reported = usage.input_tokens if usage.reported else None
        elif usage:
            reported = usage.get("prompt_tokens", usage.get("input_tokens"))
        if _positive_int(reported):
            # the provider counts the tool schemas too: compare like with like (the counter's tokens)
            recalled = self.memory.tokens if self.memory is not None else 0
            estimated = self.engine.status().used_raw + recalled + self.budget.tool_schemas
            self.accountant.calibration.record(estimated, reported)
        if step:
            self.engine.ledger.note(step, status=status)
        self._record_pressure()

    def on_tool_result(self, name: str, result: Any, *, call_id: str, is_error: bool = False) -> int:
        """Add a tool's result (any JSON-able value) for the pending call ``call_id``."""
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
        return self.add([Message.tool_result(call_id, text, name=name, is_error=is_error)])

    def _accept(self, response: ModelResponse) -> ModelResponse:
        """Record a reply from `complete()`/`stream()`: usage, calibration, the reply itself.

        A tool call whose arguments are not valid JSON does not lose the reply: it is appended
        with ``{}`` arguments (the raw text kept in ``extra``) and answered with an error result.

        Returns:
            The reply as appended (``invalid_tool_calls`` lists the calls answered that way).
        """
        kept, messages = repair_reply(response)
        self._largest_answered = max(self._largest_answered, self.engine.status().used_raw)
        self.on_turn_end(kept.usage)
        self.add(messages)
        if kept.invalid_tool_calls:
            names = ", ".join(f"{c.name} ({c.error})" for c in kept.invalid_tool_calls)
            logger.warning(
                "session %s: tool calls with invalid JSON arguments answered with an error: %s", self.session_id, names
            )
        return kept

    def _all_tools(self, tools: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]] | None:
        merged = [*self.tools, *(tools or ())]
        return merged or None

    def _record_pressure(self) -> None:
        try:
            self.monitor.budget = self.budget  # counts and limits in the counter's tokens, like the engine's
            report = self.monitor.record_turn(self.engine.status().used_raw)
        except Exception:  # a monitoring bug must never stop the agent
            self.engine.hook_errors += 1
            logger.exception("pressure monitor failed for session %s", self.session_id)
            return
        if getattr(report, "spike", False):
            self.events.emit(Alert(session_id=self.session_id, alert="spike", detail=f"turn cost spike: {report}"))

    def _recalled(self, result: Served) -> Served:
        """The pipeline's view with the memories the current request recalls (see `contextkeeper.recall`)."""
        memory = self.memory
        if memory is None:
            return result
        from .recall import with_memory_status

        view, status = result[0], _resolved(result[1])
        budget = self.budget
        try:
            view = memory.assemble(
                self.engine,
                view,
                used=status.used_raw,
                effective=budget.effective,
                count=self.accountant.count_message,
            )
        except Exception:  # a memory bug must never fail the turn: serve the pipeline's view
            self.engine.hook_errors += 1
            logger.exception("memory failed for session %s", self.session_id)
        return view, with_memory_status(status, memory, budget=budget)

    def _finish(self, result: Served, format: OutputFormat | None) -> PreparedView:
        if self.memory is not None and not self._recalled_async:
            result = self._recalled(result)
        view, status = result
        if self._store_problem() is not None:
            status = self._with_store(_resolved(status))
        fmt = format or self.format
        if fmt == "internal":  # the engine's copy already: the caller may change it freely
            return PreparedView(messages=view, view=view, status=status)
        return PreparedView(messages=self._convert(view, fmt), view=view, status=status)

    def _convert(self, view: list[Message], fmt: Format) -> list[Any]:
        """The view in ``fmt``; between compactions only the appended messages are converted."""
        generation = self.engine.view_generation
        if self.memory is not None:  # a recalled block inserted before the request changes the view too
            generation = hash((generation, *(m.message_id for m in view if m.extra.get("contextkeeper") == "memory")))
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

    def _flow(self, reactive: bool) -> Generator[SummaryRequest, SummaryReply, Served]:
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
            existing session with this id is resumed. While the store cannot be reached, a due
            compaction runs in memory and is saved once it is back (``status().degraded``, an
            ``alert`` event); a store that lost the session raises `SessionLost` on `add`, and
            `restore_to_store` writes the session back.
        tenant: The session's owner in the store; a session of this id that belongs to another
            tenant is never opened (`SessionNotFound`, as for a missing one).
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

    def _persist_messages(self, fresh: Sequence[Message]) -> None:
        if self._link is not None and fresh:
            self._link.append(fresh, transcript_messages=len(self.engine.transcript))

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
            return self._finish(appended or self._drive(self._flow(False)), format)
        if link.problem is not None:  # the store fails: compact in memory; a later prepare saves the view
            link.unsaved = True
            return self._finish(self._drive(self._flow(False)), format)
        return self._finish(self._compact_saved(reactive=False), format)

    def _compact_saved(self, *, reactive: bool) -> Served:
        """Compact under the session's lock and save the view state (CAS); in memory while the store fails."""
        assert self._link is not None
        result: Served | None = None
        try:
            with self._link.lock():
                for attempt in range(_SAVE_ATTEMPTS):
                    if self._link.version() != self._state_version:  # another process compacted: start from its state
                        self._reload()
                    result = self._drive(self._flow(reactive))
                    try:
                        self._state_version = self._link.save(
                            self.engine.export_state(), expected_version=self._state_version
                        )
                        break
                    except VersionConflict:  # our lease ran out while we compacted and another writer saved
                        if attempt == _SAVE_ATTEMPTS - 1:
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
            return self._finish(self._drive(self._flow(True)), format)
        if link.problem is not None:
            self._resync()
        if link.problem is not None:
            link.unsaved = True
            return self._finish(self._drive(self._flow(True)), format)
        # saved like any compaction: a restart resumes this view
        return self._finish(self._compact_saved(reactive=True), format)

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
            self.delegate_pending(model)
        view = self.prepare(format="internal").view
        limit = self._reply_limit(max_tokens)
        for attempt in range(self.config.reactive_retries + 1):
            sent = self.engine.status().used_raw
            try:
                response = model.request(view, tools=self._all_tools(tools), max_tokens=limit, temperature=temperature)
                break
            except ContextOverflowError as exc:
                if attempt >= self.config.reactive_retries:
                    raise
                self._adopt_served_window(exc)
                view = self.on_context_overflow(format="internal").view
                sent_limit, limit = limit, self._reply_limit(max_tokens)
                self._check_progress(exc, sent, sent_limit, limit)
        return self._accept(response)

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
        A stream that ends before its first event while the view is larger than any view answered
        so far (or near the budget) may be a server's way of refusing a prompt too long for it
        (llama-cpp-python's server answers so): the request is sent once more without streaming,
        to get the real error (then the reactive layer and a retry) or the reply (then replayed as events).
        The last event's `ResponseDone.response` is the reply as appended.
        """
        if self.delegation_due():
            self.delegate_pending(model)
        view = self.prepare(format="internal").view
        limit = self._reply_limit(max_tokens)
        for attempt in range(self.config.reactive_retries + 1):
            sent = self.engine.status().used_raw
            started = False
            overflow: ContextOverflowError
            try:
                for event in model.stream(
                    view, tools=self._all_tools(tools), max_tokens=limit, temperature=temperature
                ):
                    started = True
                    if isinstance(event, ResponseDone):
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
                    response = model.request(
                        view, tools=self._all_tools(tools), max_tokens=limit, temperature=temperature
                    )
                except ContextOverflowError as exc:
                    overflow = exc
                else:
                    yield from replay_events(self._accept(response))
                    return
            if attempt >= self.config.reactive_retries:
                raise overflow
            self._adopt_served_window(overflow)
            view = self.on_context_overflow(format="internal").view
            sent_limit, limit = limit, self._reply_limit(max_tokens)
            self._check_progress(overflow, sent, sent_limit, limit)

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
        """Prepare, call ``call(view)``; on ContextOverflowError compact (reactive layer) and retry as configured.

        A smaller window named by the error is adopted, and a view compaction could not shrink
        raises `OverflowUnresolved` instead of being sent again (as in `complete()`).
        """
        view = self.prepare(format=format)
        for attempt in range(self.config.reactive_retries + 1):
            sent = self.engine.status().used_raw
            try:
                return call(view.messages)
            except ContextOverflowError as exc:
                if attempt >= self.config.reactive_retries:
                    raise
                self._adopt_served_window(exc)
                view = self.on_context_overflow(format=format)
                self._check_progress(exc, sent, None, None)
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
    async def open(cls, session_id: str, *, store: Any, **kwargs: Any) -> AsyncSession:
        """A session bound to an async store: created there if new, resumed (transcript and view state) if not.

        Raises:
            SessionNotFound: the id belongs to another tenant's session.
        """
        session = cls(session_id, store=store, **kwargs)
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
        self._loaded = True

    def _persist_messages(self, fresh: Sequence[Message]) -> None:
        if self.store is not None:
            self._unsaved.extend(fresh)  # written by the next prepare() or flush()

    async def flush(self) -> None:
        """Write messages added since the last prepare to the store (idempotent by message id).

        Raises:
            SessionLost: the store no longer has the session (`restore_to_store` writes it back).
            StoreUnavailable: the store cannot be reached; the messages stay for the next try.
        """
        if self._alink is not None and self._unsaved:
            if not self._loaded:
                raise UsageError("AsyncSession with a store must be loaded first: use `await AsyncSession.open(...)`.")
            batch, self._unsaved = self._unsaved, []
            try:
                await self._alink.append(batch, transcript_messages=len(self.engine.transcript))
            except BaseException:
                self._unsaved[:0] = batch  # keep them for the next try
                raise

    async def prepare(self, *, format: OutputFormat | None = None) -> PreparedView:
        """The view for the next model call, compacting first when it passed the high-water mark.

        With a store, pending messages are written first; a compaction runs under the session's
        lock and saves the view state with compare-and-set. While the store fails, messages wait
        in memory, a due compaction runs in memory, and a later prepare saves both.
        """
        link = self._alink
        if link is not None:
            await self._resync()
        if link is None or not self.engine.needs_compaction():
            appended = self.engine.prepare_appended()
            return self._finish(await self._arecalled(appended or await self._drive(self._flow(False))), format)
        if link.problem is not None:  # the store fails: compact in memory; a later prepare saves it all
            link.unsaved = True
            return self._finish(await self._arecalled(await self._drive(self._flow(False))), format)
        return self._finish(await self._arecalled(await self._compact_saved(reactive=False)), format)

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
            return self._finish(await self._arecalled(await self._drive(self._flow(True))), format)
        await self._resync()
        if link.problem is not None:
            link.unsaved = True
            return self._finish(await self._arecalled(await self._drive(self._flow(True))), format)
        return self._finish(await self._arecalled(await self._compact_saved(reactive=True)), format)

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
                for attempt in range(_SAVE_ATTEMPTS):
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
                        if attempt == _SAVE_ATTEMPTS - 1:
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
        limit = self._reply_limit(max_tokens)
        for attempt in range(self.config.reactive_retries + 1):
            sent = self.engine.status().used_raw
            try:
                response = await model.request(
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
        return self._accept(response)

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
        limit = self._reply_limit(max_tokens)
        for attempt in range(self.config.reactive_retries + 1):
            sent = self.engine.status().used_raw
            started = False
            overflow: ContextOverflowError
            try:
                async for event in model.stream(
                    view, tools=self._all_tools(tools), max_tokens=limit, temperature=temperature
                ):
                    started = True
                    if isinstance(event, ResponseDone):
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
                    response = await model.request(
                        view, tools=self._all_tools(tools), max_tokens=limit, temperature=temperature
                    )
                except ContextOverflowError as exc:
                    overflow = exc
                else:
                    for replayed in replay_events(self._accept(response)):
                        yield replayed
                    return
            if attempt >= self.config.reactive_retries:
                raise overflow
            self._adopt_served_window(overflow)
            view = (await self.on_context_overflow(format="internal")).view
            sent_limit, limit = limit, self._reply_limit(max_tokens)
            self._check_progress(overflow, sent, sent_limit, limit)

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
            sent = self.engine.status().used_raw
            try:
                return await call(view.messages)
            except ContextOverflowError as exc:
                if attempt >= self.config.reactive_retries:
                    raise
                self._adopt_served_window(exc)
                view = await self.on_context_overflow(format=format)
                self._check_progress(exc, sent, None, None)
        raise UsageError("unreachable: reactive retry loop ended without a result")  # pragma: no cover

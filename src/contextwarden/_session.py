"""What `Session` and `AsyncSession` share: `BaseSession` (everything but the I/O of the summarize
layer and of the store), the prepared view, and the helpers both use.

The engine's compaction is a generator that yields a `SummaryRequest`; each twin answers it with
its own summarizer, and drives its own store (`session` and `async_session`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import uuid
import weakref
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeGuard

from ._binding import StoreLink
from ._brief import brief
from ._json import tool_arguments, whole_number
from ._replies import overflow_unresolved, repair_reply
from .adapters import Format, from_messages, to_messages
from .budget import Budget, PressureMonitor, Thresholds
from .compaction.config import CompactionConfig
from .compaction.engine import ContextEngine
from .compaction.viewstatus import StatusReading, ViewStatus
from .delegation import DelegationResult, session_options
from .events import Alert, DelegationFinished, Event, EventBus
from .exceptions import (
    BudgetExceeded,
    ConfigError,
    ContextOverflowError,
    OverflowUnresolved,
    SnapshotError,
    UsageError,
)
from .figures import measure
from .instructions import UserInstructions
from .ledger import Ledger, StepStatus
from .llm.served_window import ServedWindow
from .messages import Message, ToolCall
from .models import lookup_model
from .notes import NOTES_TOOL, Notes
from .served import default_reply_reserve, registry_knows, resolve_served_window, unknown_model_margin
from .snapshots import READ_CONTEXT_TOOL, FileSnapshotStore, MemorySnapshotStore, SnapshotStore, read_context
from .stores.protocols import AsyncSessionStore, SessionStore, StateWrite
from .summarize.base import AsyncSummarizer, Summarizer, SummaryReply, SummaryRequest
from .timeline import STATUS_SLOT, Timeline
from .tokens import TokenCounter, counter_for_model, get_counter
from .tokens.accountant import OPENAI_FRAMING, Framing, TokenAccountant
from .usage import RequestUsage, SessionUsage

if TYPE_CHECKING:
    from .llm.base import ModelResponse
    from .memory.longterm import LongTermMemory
    from .memory.tiers import HybridMemory
    from .recall import SessionMemory


__all__ = ["DelegableTask", "OutputFormat", "PreparedView", "Served"]

OutputFormat = Format | Literal["internal"]
"""A provider format, or ``"internal"`` for contextwarden `Message` objects (no conversion)."""

logger = logging.getLogger("contextwarden.session")

_ONLY_MESSAGES = frozenset({Message})
"""The types of a batch of `Message` objects only (compared in C, without a loop in Python)."""

Served = tuple[list[Message], ViewStatus | StatusReading]
"""A served view and its status (a `StatusReading` until something needs the `ViewStatus`)."""


class PreparedView:
    """The view for the next model call: ``messages`` to send, the same ``view`` as contextwarden
    messages, and its ``status`` (computed when first read)."""

    __slots__ = ("_status", "messages", "view")

    def __init__(self, *, messages: list[Any], view: list[Message], status: ViewStatus | StatusReading) -> None:
        self.messages = messages
        """The view in the caller's format (what to send)."""
        self.view = view
        """The same view as contextwarden messages."""
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


def _weak_sink(method: Callable[[Mapping[str, Any]], None]) -> Callable[[Mapping[str, Any]], None]:
    """The session's timeline sink, held weakly by its event bus (see `_weak_budget`)."""
    ref = weakref.WeakMethod(method)

    def sink(record: Mapping[str, Any]) -> None:
        bound = ref()
        if bound is not None:
            bound(record)

    return sink


def served_base_url(model: object) -> str | None:
    """The base URL of a model client bound to one server (its window can be probed there), else None."""
    from .llm.base import ServerBound

    return model.base_url if isinstance(model, ServerBound) else None


def _positive_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


SAVE_ATTEMPTS = 3
"""Compactions of one prepare that may lose a compare-and-set (a holder whose lock lease ran out)."""
STATUS_LIST_LIMIT = 12
"""Rows of a list (the user's instructions) the saved status record carries, newest first."""


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


class BaseSession:
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
        store: SessionStore | AsyncSessionStore | None = None,
        tenant: str = "default",
        data_dir: str | os.PathLike[str] | None = None,
        thresholds: Thresholds | None = None,
        max_tokens: int | Literal["reserved"] | None = "reserved",
        memory: SessionMemory | LongTermMemory | HybridMemory | bool | None = None,
        served_window: int | ServedWindow | Literal["probe"] | None = None,
        base_url: str | None = None,
    ) -> None:
        self.session_id = session_id or "ses_" + uuid.uuid4().hex
        self.memory: SessionMemory | None = None
        """Long-term memory wired into the view (`contextwarden.recall`); None when off (the default)."""
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
        served = resolve_served_window(served_window, base_url=base_url, model=model)
        self.served: ServedWindow | None = served
        """What the model server said about its window (``served_window=``), or None."""
        served_limit = served.window if served is not None else None
        if window is None and model is None:
            if served_limit is None:
                raise ConfigError(
                    "Session needs `model=` (looked up in the registry), `window=` (tokens), or "
                    "`served_window=` (the server's window, or 'probe' with `base_url=`).",
                    key="window",
                )
            window = served_limit
        info = lookup_model(model, window=window) if model is not None else None
        ctx_window = window if window is not None else info.context_window  # type: ignore[union-attr]
        if reserved_output is None:
            # a session that knows only a window still keeps room for the reply: without it, a
            # `max_tokens="reserved"` request would send no limit and replies could run past the window
            reserved_output = (
                min(info.max_output, ctx_window // 4) if info is not None else default_reply_reserve(ctx_window)
            )
        self.config = CompactionConfig.coerce(config)
        guessed = counter is None and not (model is not None and registry_knows(model))
        if counter is None:
            counter = counter_for_model(model) if model is not None else get_counter("heuristic")
        elif isinstance(counter, str):
            counter = get_counter(counter)
        self.accountant = TokenAccountant(counter, framing=framing)
        if guessed or (served is not None and served.token_count_url is not None and info is None):
            # counts of a tokenizer that is not the model's may fall short: a margin until usage calibrates
            self.accountant.calibration.prior = unknown_model_margin(counter, served)
        if served_limit is not None:
            self.accountant.calibration.adopt_window(served_limit)
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
        self._instruction_tokens = 0
        """Tokens of a framework's own instructions counted in ``configured_budget.tool_schemas``."""
        self._pipeline_cache: tuple[Budget, int, Budget] | None = None
        self._engine_built = False
        """False while `_reset_engine` builds an engine (its constructor already asks for the budget)."""
        self._budget = self.configured_budget
        self._largest_answered = 0
        """Counted tokens of the largest view a model answered (an empty stream past it may be an overflow)."""
        self.format: Format = format
        self.events = EventBus()
        self.store: SessionStore | AsyncSessionStore | None = store
        """A session store (`contextwarden.stores.open_store`) the transcript and view state persist in."""
        self.tenant = tenant
        """The tenant the session belongs to in its store; another tenant's session of this id is never opened."""
        self._link: StoreLink | None = self._link_store(snapshots_in_store=snapshots is None)
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
        self.timeline = Timeline()
        """Status points, compactions and alerts of this session, bounded (`contextwarden.timeline`)."""
        self._status_version = 0
        self._status_due = False
        """The figures changed since they were saved (a view, a turn's end, a compaction, an alert): the
        session's next write saves them with it, so readers of the store see the latest turn."""
        self._status_now = False
        """A compaction or an alert: saved as soon as the view is prepared, before the model call."""
        self.events.sinks.append(_weak_sink(self._on_record))
        self._delegable: list[DelegableTask] = []

    def _link_store(self, *, snapshots_in_store: bool) -> StoreLink | None:
        """The link to a sync store that `__init__` writes through (`Session`'s); the async twin links its own."""
        return None

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

    def use_tools(self, tools: Sequence[Mapping[str, Any]]) -> None:
        """Hold the view to a budget that leaves room for ``tools``, the schemas the next requests carry.

        A proxy calls this with each request's own tools: the tools follow the request, not the
        request that opened the session.

        Raises:
            BudgetExceeded: the tool schemas leave no room for messages in the window.
        """
        tools = list(tools)
        if tools == self.tools:
            return
        counted = self.accountant.count_tools(tools) if tools else 0
        try:
            configured = replace(self.configured_budget, tool_schemas=counted + self._instruction_tokens)
        except ConfigError as exc:
            raise BudgetExceeded(
                f"session {self.session_id!r}: the request's tool schemas take {counted} tokens, which leaves no room "
                f"for messages in a window of {self.configured_budget.window} tokens ({exc}); send fewer tools or "
                "use a model with a larger window.",
                budget=self.configured_budget.window,
                used=counted,
            ) from None
        self.tools = tools
        self.configured_budget = configured
        self._budget_key = (-1.0, None)  # recomputed from the new configured budget on next read
        self._pipeline_cache = None

    def count_instructions(self, text: str | None) -> int:
        """Count a framework's own system prompt in the budget, like tool schemas: sent with every request.

        Frameworks (LangChain's ``system_prompt``, an Agents SDK agent's ``instructions``,
        pydantic-ai's ``instructions``) send their instructions beside the history the session
        manages; the integrations hand them here, so the view is held to what is left. Only the
        latest text counts (calling again with other instructions replaces them).

        Returns:
            The tokens the instructions take (0 for none).
        """
        tokens = self.accountant.count_message(Message.system(text)) if text and text.strip() else 0
        if tokens != self._instruction_tokens:
            tools = self.configured_budget.tool_schemas - self._instruction_tokens
            try:
                self.configured_budget = replace(self.configured_budget, tool_schemas=tools + tokens)
            except ConfigError:  # instructions larger than the window: counting them would leave no budget
                logger.warning("session %s: instructions of %d tokens leave no room", self.session_id, tokens)
                return 0
            self._instruction_tokens = tokens
            self._budget_key = (math.nan, None)  # the next `budget` is built from the new configured one
        return tokens

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
        budget (`contextwarden.delegation.run`) and adds only its result here: a ``delegate``
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
        if items.__class__ is list and set(map(type, items)) == _ONLY_MESSAGES:
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

    @property
    def instructions(self) -> UserInstructions:
        """The user's own words the view keeps for the whole session (``instructions.current()``: the
        task, standing rules, corrections, values and decisions in force, oldest first)."""
        return self.engine.instructions

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
        """Answer contextwarden's own tools (``read_context``, ``notes``); None for other tools.

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
            estimated = self.engine.used() + recalled + self.budget.tool_schemas
            self.accountant.calibration.record(estimated, reported)
        if step:
            self.engine.ledger.note(step, status=status)
        self._record_pressure()
        self._status_due = True  # calibrated counts, the usage: saved with the turn's reply

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
        self._largest_answered = max(self._largest_answered, self.engine.used())
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
            report = self.monitor.record_turn(self.engine.used())
        except Exception:  # a monitoring bug must never stop the agent
            self.engine.hook_errors += 1
            logger.exception("pressure monitor failed for session %s", self.session_id)
            return
        if report.spike:
            self.events.emit(Alert(session_id=self.session_id, alert="spike", detail=f"turn cost spike: {report}"))

    def _recalled(self, result: Served) -> Served:
        """The pipeline's view with the memories the current request recalls (see `contextwarden.recall`)."""
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

    def _on_record(self, record: Mapping[str, Any]) -> None:
        """The timeline's event sink: compactions that changed the view, and alerts."""
        kind = record.get("kind")
        turn = self.engine.counters.turn
        if kind == "compaction.finished" and int(record.get("items") or 0) > 0:
            budget = self.budget
            self.timeline.compaction(
                turn=turn,
                layer=str(record.get("layer")),
                trigger=str(record.get("trigger")),
                before=budget.calibrated(int(record.get("tokens_before") or 0)),
                after=budget.calibrated(int(record.get("tokens_after") or 0)),
                items=int(record.get("items") or 0),
                ts=float(record.get("ts") or 0.0),
            )
            self._status_due = self._status_now = True
        elif kind == "alert":
            self.timeline.alert(
                turn=turn,
                alert=str(record.get("alert")),
                detail=str(record.get("detail")),
                ts=float(record.get("ts") or 0.0),
            )
            self._status_due = self._status_now = True

    def _load_timeline(self, record: Mapping[str, Any] | None) -> None:
        if record and isinstance(record.get("timeline"), dict):
            self.timeline.load(record["timeline"])

    def status_record(self) -> dict[str, Any]:
        """What the session saves in the store's ``status`` slot: its `figures`, its `timeline`, the
        prompt-cache reuse and the user's instructions in force (newest first, bounded)."""
        usage = self.usage
        cache = {
            "requests": usage.requests,
            "input_tokens": usage.input_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "reuse": round(usage.cache_read_tokens / usage.input_tokens, 4) if usage.input_tokens else None,
        }
        current = self.instructions.current()
        instructions = {
            "total": len(current),
            "items": [{"step": i.step, "kind": i.kind, "text": i.text} for i in reversed(current[-STATUS_LIST_LIMIT:])],
        }
        return {
            "figures": self.status().figures(),
            "timeline": self.timeline.to_dict(),
            "cache": cache,
            "instructions": instructions,
        }

    def _status_write(self) -> StateWrite | None:
        """The figures to save with the next write of messages (None: unchanged since they were saved)."""
        if not self._status_due:
            return None
        return StateWrite(slot=STATUS_SLOT, state=self.status_record(), version=self._status_version)

    def _status_written(self, write: StateWrite | None) -> None:
        """The figures of ``write`` went to the store with the messages."""
        if write is not None:
            # the store's new version, unless another writer saved between: then the next save retries once
            self._status_version = write.version + 1
            self._status_due = self._status_now = False

    def _note_point(self, status: ViewStatus | StatusReading) -> None:
        """A point of the timeline for the served view (cheap: no `ViewStatus` is computed for it)."""
        if isinstance(status, StatusReading):
            used_raw, turn = status.used, status.turn
        else:
            used_raw, turn = status.used_raw, status.turn
        used, _, ratio = measure(self.budget, used_raw)
        self.timeline.point(turn, used, ratio)
        self._status_due = True

    def _finish(self, result: Served, format: OutputFormat | None) -> PreparedView:
        if self.memory is not None and not self._recalled_async:
            result = self._recalled(result)
        view, status = result
        self._note_point(status)
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
            generation = hash((generation, *(m.message_id for m in view if m.extra.get("contextwarden") == "memory")))
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

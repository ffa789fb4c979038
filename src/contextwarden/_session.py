"""What `Session` and `AsyncSession` share: `BaseSession` (everything but the I/O of the summarize
layer and of the store), the prepared view, and the helpers both use.

The engine's compaction is a generator that yields a `SummaryRequest`; each twin answers it with
its own summarizer, and drives its own store (`session` and `async_session`).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
import weakref
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeGuard, TypeVar

from ._binding import StoreLink
from ._replies import repair_reply
from ._session_delegation import DelegableTask, SessionDelegation
from .adapters import Format, from_messages, to_messages
from .budget import Budget, PressureMonitor, Thresholds
from .compaction.config import CompactionConfig
from .compaction.engine import ContextEngine
from .compaction.viewstatus import StatusReading, ViewStatus
from .events import Alert, Event, EventBus
from .exceptions import (
    ConfigError,
)
from .figures import measure
from .instructions import UserInstructions
from .ledger import Ledger, StepStatus
from .llm.served_window import ServedWindow
from .messages import Message
from .models import lookup_model
from .notes import Notes
from .served import default_reply_reserve, registry_knows, resolve_served_window, unknown_model_margin
from .served_counts import ServedCounts
from .session_state import SessionState
from .snapshots import READ_CONTEXT_TOOL, FileSnapshotStore, MemorySnapshotStore, SnapshotStore
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

_T = TypeVar("_T")

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


def _weak_budget(method: Callable[[], _T]) -> Callable[[], _T]:
    """The session's budget method, held weakly: the engine must not keep its session alive.

    A strong reference makes a cycle (session → engine → bound method → session) that only the
    full garbage collector frees; a service caching many sessions then pauses for it.
    """
    ref = weakref.WeakMethod(method)

    def budget() -> _T:
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


class BaseSession(SessionDelegation):
    """Everything `Session` and `AsyncSession` share but the I/O: the transcript, the view, status and
    hooks here; the budget, the session's own tools and delegation in the bases."""

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
        self.served_counts = ServedCounts(served=served)
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
            held=None if self.memory is None else _weak_budget(self._memory_room),
        )
        self._state = SessionState(self.engine)
        self._converted = None
        self._engine_built = True

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
        """Every message ever added, unaltered by compaction (a new list; `state` reads without copying)."""
        return list(self.engine.transcript)

    @property
    def state(self) -> SessionState:
        """A read-only view of what the session holds: transcript, view, context block, accounting."""
        return self._state

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
                self._state,
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
        prompt-cache reuse and the user's instructions in force as the context block last read them
        (newest first, bounded).

        The record is saved with every turn's write, so it reads no message itself: the user's messages
        are read when a compaction renders the context block, or on a long turn (`contextwarden.compaction.ahead`).
        """
        usage = self.usage
        cache = {
            "requests": usage.requests,
            "input_tokens": usage.input_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "reuse": round(usage.cache_read_tokens / usage.input_tokens, 4) if usage.input_tokens else None,
        }
        current = self.engine.instructions_read.current()
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

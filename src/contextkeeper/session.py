"""The agent-facing API: add messages, prepare the view, hook into the agent loop.

`Session` (sync) and `AsyncSession` (async) share `_BaseSession`, which holds everything but
the I/O of the summary layer: the engine's compaction is a generator that yields a
`SummaryRequest`, and each twin answers it with its own summarizer.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .adapters import Format, from_messages, to_messages
from .budget import Budget, PressureMonitor
from .compaction.config import CompactionConfig
from .compaction.engine import ContextEngine, ViewStatus
from .compaction.summarizer import AsyncSummarizer, Summarizer, SummaryRequest
from .events import Alert, Event, EventBus
from .exceptions import ConfigError, ContextOverflowError, UsageError
from .ledger import Ledger, StepStatus
from .messages import Message
from .models import lookup_model
from .snapshots import READ_CONTEXT_TOOL, MemorySnapshotStore, SnapshotStore, read_context
from .tokens import TokenCounter, get_counter
from .tokens.accountant import OPENAI_FRAMING, Framing, TokenAccountant

__all__ = ["AsyncSession", "OutputFormat", "PreparedView", "Session"]

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
            counter = get_counter(info.tokenizer if info is not None else "heuristic")
        elif isinstance(counter, str):
            counter = get_counter(counter)
        self.accountant = TokenAccountant(counter, framing=framing)
        self.tools = [*tools, READ_CONTEXT_TOOL] if include_read_tool else list(tools)
        self.budget = Budget(
            window=ctx_window,
            reserved_output=reserved_output,
            tool_schemas=self.accountant.count_tools(self.tools) if self.tools else 0,
        )
        self.format: Format = format
        self.events = EventBus()
        self.snapshots: SnapshotStore = snapshots if snapshots is not None else MemorySnapshotStore()
        self.engine = ContextEngine(
            session_id=self.session_id,
            accountant=self.accountant,
            budget=self.budget,
            config=self.config,
            snapshots=self.snapshots,
            events=self.events,
        )
        self.monitor = PressureMonitor(budget=self.budget)
        self.model = model

    # --- transcript -----------------------------------------------------------------------
    def add(self, items: Sequence[Any] | Any, *, format: Format | None = None) -> int:
        """Append messages in any supported format; returns how many were new.

        Raises:
            MessageError: a malformed message (index, field and fix named); the session is unchanged.
            ToolPairError: a result for an unknown call, or a second result for a call.
        """
        if isinstance(items, Message | Mapping) or not isinstance(items, Sequence):
            items = [items]
        if all(isinstance(m, Message) for m in items):
            messages: list[Message] = list(items)
        else:
            messages = to_messages(items, format=format or self.format)
        return self.engine.add(messages)

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

    def pin(self, message_id: str) -> None:
        """Never evict or shorten this message (and its round)."""
        self.engine.pinned_copy(message_id)

    def read_context(self, ref: str, *, page: int = 1) -> str:
        """Handle the `read_context` tool: a page of a snapshot or a transcript span."""
        return read_context(
            ref,
            session_id=self.session_id,
            snapshots=self.snapshots,
            transcript=lambda: self.engine.transcript,
            page=page,
        ).render()

    def handle_tool_call(self, name: str, arguments: str | Mapping[str, Any]) -> str | None:
        """Run the read-back tool if ``name`` is it; None for other tools."""
        if name != READ_CONTEXT_TOOL["function"]["name"]:
            return None
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        return self.read_context(str(args.get("ref", "")), page=int(args.get("page", 1)))

    # --- hooks for agent loops --------------------------------------------------------------
    def on_turn_start(self) -> None:
        """Call before each model call (counts the turn for burn rate)."""

    def on_turn_end(
        self, usage: Mapping[str, Any] | None = None, *, step: str | None = None, status: StepStatus = "done"
    ) -> None:
        """Call after each model call with the provider's usage; calibrates counting, records a step."""
        if usage:
            reported = usage.get("prompt_tokens", usage.get("input_tokens"))
            if isinstance(reported, int) and reported > 0:
                self.accountant.calibration.record(self.engine.status().used, reported)
        if step:
            self.engine.ledger.note(step, status=status)
        self._record_pressure()

    def on_tool_result(self, name: str, result: Any, *, call_id: str, is_error: bool = False) -> int:
        """Add a tool's result (any JSON-able value) for the pending call ``call_id``."""
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
        return self.engine.add([Message.tool_result(call_id, text, name=name, is_error=is_error)])

    def _record_pressure(self) -> None:
        try:
            report = self.monitor.record_turn(self.engine.status().used)
        except Exception:  # a monitoring bug must never stop the agent
            self.engine.hook_errors += 1
            logger.exception("pressure monitor failed for session %s", self.session_id)
            return
        if getattr(report, "spike", False):
            self.events.emit(
                Alert(session_id=self.session_id, alert="spike", detail=f"turn cost spike: {report}")
            )

    def _finish(self, result: tuple[list[Message], ViewStatus], format: OutputFormat | None) -> PreparedView:
        view, status = result
        fmt = format or self.format
        if fmt == "internal":
            return PreparedView(messages=list(view), view=view, status=status)
        return PreparedView(messages=from_messages(view, format=fmt), view=view, status=status)

    def _flow(self, reactive: bool) -> Generator[SummaryRequest, str | None, tuple[list[Message], ViewStatus]]:
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
        summarizer: Drives the summary layer (L3); without one, clearing, eviction and the ledger do the work.
        snapshots: Where full originals go (default: in memory).
        format: Format of `prepare()` output and of `add()` input by default.
    """

    def __init__(self, session_id: str | None = None, *, summarizer: Summarizer | None = None, **kwargs: Any) -> None:
        super().__init__(session_id, **kwargs)
        self.summarizer = summarizer
        self.engine.summarizer_enabled = summarizer is not None

    def prepare(self, *, format: OutputFormat | None = None) -> PreparedView:
        """The view for the next model call, compacting first when it passed the high-water mark."""
        return self._finish(self._drive(self._flow(False)), format)

    def on_context_overflow(self, *, format: OutputFormat | None = None) -> PreparedView:
        """The provider said the prompt is too long: compact deeper now and return the view to retry with."""
        return self._finish(self._drive(self._flow(True)), format)

    def _drive(
        self, flow: Generator[SummaryRequest, str | None, tuple[list[Message], ViewStatus]]
    ) -> tuple[list[Message], ViewStatus]:
        try:
            request = next(flow)
            while True:
                reply: str | None
                try:
                    assert self.summarizer is not None
                    reply = self.summarizer.summarize(request)
                except Exception:
                    logger.exception("summarizer failed for session %s", self.session_id)
                    reply = None
                request = flow.send(reply)
        except StopIteration as stop:
            result: tuple[list[Message], ViewStatus] = stop.value
            return result

    def call_with_retry(self, call: Callable[[list[Any]], Any], *, format: OutputFormat | None = None) -> Any:
        """Prepare, call ``call(view)``; on ContextOverflowError compact (L4) and retry as configured."""
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
        super().__init__(session_id, **kwargs)
        self.summarizer = summarizer
        self.engine.summarizer_enabled = summarizer is not None

    async def prepare(self, *, format: OutputFormat | None = None) -> PreparedView:
        """The view for the next model call, compacting first when it passed the high-water mark."""
        return self._finish(await self._drive(self._flow(False)), format)

    async def on_context_overflow(self, *, format: OutputFormat | None = None) -> PreparedView:
        """The provider said the prompt is too long: compact deeper now and return the view to retry with."""
        return self._finish(await self._drive(self._flow(True)), format)

    async def _drive(
        self, flow: Generator[SummaryRequest, str | None, tuple[list[Message], ViewStatus]]
    ) -> tuple[list[Message], ViewStatus]:
        try:
            request = next(flow)
            while True:
                reply: str | None
                try:
                    assert self.summarizer is not None
                    reply = await self.summarizer.summarize(request)
                except Exception:
                    logger.exception("summarizer failed for session %s", self.session_id)
                    reply = None
                request = flow.send(reply)
        except StopIteration as stop:
            result: tuple[list[Message], ViewStatus] = stop.value
            return result

    async def call_with_retry(self, call: Callable[[list[Any]], Any], *, format: OutputFormat | None = None) -> Any:
        """Prepare, await ``call(view)``; on ContextOverflowError compact (L4) and retry as configured."""
        view = await self.prepare(format=format)
        for attempt in range(self.config.reactive_retries + 1):
            try:
                return await call(view.messages)
            except ContextOverflowError:
                if attempt >= self.config.reactive_retries:
                    raise
                view = await self.on_context_overflow(format=format)
        raise UsageError("unreachable: reactive retry loop ended without a result")  # pragma: no cover

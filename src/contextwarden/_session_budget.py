"""The session's budget: calibration of the counter, the window the server serves, and the room
tool schemas and a framework's instructions take (`SessionBudget`, the base of `BaseSession`)."""

from __future__ import annotations

import logging
import math
from collections.abc import Generator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from ._replies import overflow_unresolved
from .budget import Budget
from .compaction.engine import ContextEngine
from .events import Alert, EventBus
from .exceptions import BudgetExceeded, ConfigError, ContextOverflowError, OverflowUnresolved
from .llm.served_calls import Answer, Call
from .messages import Message
from .served_counts import ServedCounts, request_text
from .session_state import SessionState
from .tokens.accountant import TokenAccountant
from .usage import RequestUsage

if TYPE_CHECKING:
    from .recall import SessionMemory

__all__ = ["SessionBudget"]

logger = logging.getLogger("contextwarden.session")


class SessionBudget:
    """The budget a session holds its view to, and what it learns about the window from the server.

    `BaseSession` sets the attributes declared here in its constructor.
    """

    session_id: str
    model: str | None
    accountant: TokenAccountant
    configured_budget: Budget
    """The budget as configured; `budget` adds calibration and the window the server serves."""
    tools: list[Mapping[str, Any]]
    memory: SessionMemory | None
    engine: ContextEngine
    _state: SessionState
    events: EventBus
    max_tokens: int | Literal["reserved"] | None
    _budget: Budget
    _budget_key: tuple[float, int | None]
    _instruction_tokens: int
    _pipeline_cache: tuple[Budget, int, Budget] | None
    _engine_built: bool
    _largest_answered: int
    _status_due: bool
    served_counts: ServedCounts
    """When the session asks the server to count a request whose reply carried no usage (see `served_counts`)."""

    def _pipeline_budget(self) -> Budget:
        """The budget the compaction pipeline works to: the session's, less the room recalled memories take."""
        budget = self._current_budget()
        assert self.memory is not None
        # while an engine is being built there is no view yet: memory holds only its own room
        reserve = self.memory.reserve(self._state if self._engine_built else None, budget.effective)
        cached = self._pipeline_cache
        if cached is not None and cached[0] is budget and cached[1] == reserve:
            return cached[2]
        try:
            narrowed = replace(budget, tool_schemas=budget.tool_schemas + reserve)
        except ConfigError:  # a budget too small to share: memory gets no room of its own
            narrowed = budget
        self._pipeline_cache = (budget, reserve, narrowed)
        return narrowed

    def _memory_room(self) -> int:
        """Tokens the pipeline's budget holds back for the current request's recalled memories."""
        return self.memory.room(self._current_budget().effective) if self.memory is not None else 0

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

    def _server_count(
        self,
        usage: RequestUsage,
        view: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        base_url: str | None,
        model_name: str,
    ) -> Generator[Call, Answer, None] | None:
        """The calls that calibrate from the server's own count of a request whose reply carried no usage.

        None when no call is due (usage was reported, the calibration has its samples, or the
        server has no count endpoint). Run the steps before the reply is appended: the sample
        compares the server's count with the view's as it was sent.
        """
        if not self.served_counts.wanted(self.accountant.calibration, usage, base_url):
            return None
        return self._count_steps(request_text(view, tools), base_url, self.model or model_name)

    def _server_count_failed(self, error: Exception) -> None:
        """The server could not count (`_server_count`'s calls raised): it is not asked again."""
        self.served_counts.unavailable = True
        logger.info("session %s: the server's token count is unavailable (%s)", self.session_id, error)

    def _count_steps(self, text: str, base_url: str | None, model: str | None) -> Generator[Call, Answer, None]:
        theirs = yield from self.served_counts.flow(text, base_url=base_url, model=model)
        if theirs is None:
            return
        # the same estimate `on_turn_end` compares reported usage with, its text counted by the server
        recalled = self.memory.tokens if self.memory is not None else 0
        estimated = self.engine.used() + recalled + self.budget.tool_schemas
        reported = estimated - (self.accountant.count_text(text) if text else 0) + theirs
        if estimated > 0 and reported > 0:
            self.accountant.calibration.record(estimated, reported)
            self._status_due = True

    def _may_be_overflow(self) -> bool:
        """An empty or cut stream before the first event may be a prompt too long for the server.

        Some servers (llama-cpp-python's) answer a streamed request that does not fit their
        window with HTTP 200 and no events. Likely when the view is larger than any view a model
        answered in this session, or near the budget.
        """
        status = self.engine.status()
        return status.used_raw > self._largest_answered or status.ratio >= 0.9

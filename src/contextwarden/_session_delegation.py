"""Delegation, the cascade's last strategy: sub-tasks the caller marks delegable and their results
(`DelegableTask`, and `SessionDelegation`, a base of `BaseSession`)."""

from __future__ import annotations

import json
import uuid
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._session_tools import SessionTools
from .adapters import Format
from .compaction.config import CompactionConfig
from .delegation import DelegationResult, session_options
from .events import DelegationFinished
from .exceptions import ConfigError
from .messages import Message, ToolCall
from .usage import SessionUsage

__all__ = ["DelegableTask", "SessionDelegation"]


@dataclass(frozen=True, kw_only=True)
class DelegableTask:
    """A sub-task the caller marked delegable (`Session.mark_delegable`)."""

    task_id: str
    task: str
    context: str | tuple[Message, ...] | None
    max_result_tokens: int
    max_turns: int


class SessionDelegation(SessionTools):
    """Sub-tasks marked delegable, run when the view reaches the ``delegation`` utilization."""

    config: CompactionConfig
    usage: SessionUsage
    _delegable: list[DelegableTask]

    @abstractmethod
    def add(self, items: Sequence[Any] | Any, *, format: Format | None = None) -> int:
        """Append messages (`BaseSession.add`)."""

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
        return self.engine.status().ratio >= self.config.gate("delegation")

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

"""Sub-agent delegation: run a sub-task in an isolated session and hand back only its result.

`delegate(task, context, model=..., window=...)` opens a fresh `Session` with its own budget (the
sub-task's history never enters the parent's view), asks the model until it answers, and
returns a `DelegationResult` whose ``result`` is at most ``max_result_tokens`` long (condensed
with `summarize.condense` when the answer is longer), plus the usage the sub-task cost. The
sub-session compacts on its own when the sub-task outgrows its window and retries once after a
provider context-length error. No tools are offered: a sub-task is answered from the context
it is given. `adelegate` is the async twin.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .compaction.config import CompactionConfig
from .compaction.summarizer import AsyncSummarizer, Summarizer
from .exceptions import ConfigError
from .llm.base import AsyncModel, Model, ModelResponse
from .messages import Message
from .session import AsyncSession, Session, _BaseSession
from .summarize.extractive import condense
from .tokens import TokenCounter
from .usage import SessionUsage

__all__ = ["DelegationResult", "adelegate", "delegate"]

INSTRUCTIONS = (
    "You are a sub-agent working on one delegated sub-task. Use only the context given. Answer with the "
    "result the parent agent needs: findings, decisions and exact identifiers (ids, paths, numbers, error "
    "messages) verbatim; no preamble. Keep the answer under {max_tokens} tokens."
)
_NO_TOOLS = "No tools are available in this sub-task; answer with the result from the context you have."
_EMPTY = "Your reply was empty; answer with the result now."
_CONTINUE = "Your answer was cut off; continue exactly where it stopped."


@dataclass(frozen=True, kw_only=True)
class DelegationResult:
    """What a delegated sub-task returns to its parent."""

    task: str
    result: str
    """The sub-agent's answer, at most ``max_result_tokens`` (condensed when it was longer)."""
    result_tokens: int
    """Tokens of ``result`` by the sub-session's counter."""
    condensed: bool
    """True when the answer was longer than ``max_result_tokens`` and was condensed."""
    finished: bool
    """True when the model answered; False when ``max_turns`` ran out (``result`` holds what it wrote)."""
    turns: int
    """Model calls made."""
    usage: SessionUsage = field(default_factory=SessionUsage)
    """Tokens the sub-task cost, as the provider reported them."""
    session_id: str = ""
    """The sub-session's id (its transcript is not part of the result)."""


def _check(max_result_tokens: int, max_turns: int) -> None:
    if max_result_tokens < 16:
        raise ConfigError(f"max_result_tokens={max_result_tokens}; give at least 16 (1000-2000 is typical).")
    if max_turns < 1:
        raise ConfigError(f"max_turns={max_turns}; give at least 1.")


def _context_messages(context: str | Sequence[Message] | None) -> list[Message]:
    if context is None:
        return []
    if isinstance(context, str):
        return [Message.user("Context for the sub-task:\n" + context)] if context.strip() else []
    # the parent's own instructions are context here, not the sub-agent's instructions
    return [Message.user(m.text, message_id=m.message_id) if m.role in ("system", "developer") else m for m in context]


def _session_kwargs(
    window: int | None,
    model_name: str | None,
    reserved_output: int | None,
    max_result_tokens: int,
    counter: TokenCounter | str | None,
    config: CompactionConfig | Mapping[str, Any] | None,
) -> dict[str, Any]:
    if window is None and model_name is None:
        raise ConfigError(
            "delegate() needs the sub-session's budget: `window=` (tokens) or `model_name=` (looked up in the "
            "model registry).",
            key="window",
        )
    if reserved_output is None and window is not None:
        reserved_output = min(2 * max_result_tokens, window // 4)
    return {
        "window": window,
        "model": model_name,
        "reserved_output": reserved_output,
        "counter": counter,
        "config": config,
        "format": "openai",
    }


class _Loop:
    """The turn logic shared by `delegate` and `adelegate`."""

    def __init__(self, session: _BaseSession, task: str, max_result_tokens: int, max_turns: int) -> None:
        self.session = session
        self.task = task
        self.max_result_tokens = max_result_tokens
        self.max_turns = max_turns
        self.usage = SessionUsage()
        self.parts: list[str] = []
        self.turns = 0
        self.finished = False
        self.reply_tokens = max(session.budget.reserved_output, max_result_tokens) or None

    def start(self, context: str | Sequence[Message] | None, instructions: str | None) -> None:
        system = instructions or INSTRUCTIONS.format(max_tokens=self.max_result_tokens)
        self.session.add([Message.system(system), *_context_messages(context), Message.user(self.task)])

    def after(self, response: ModelResponse) -> bool:
        """Record a reply; True when the sub-task is answered."""
        self.turns += 1
        self.usage.incr(response.usage)
        reported = response.usage.input_tokens
        self.session.on_turn_end({"input_tokens": reported} if reported else None)
        text = response.text.strip()
        if response.tool_calls:
            if text:
                self.session.add(Message.assistant(text))
            self.session.add(Message.user(_NO_TOOLS))
            return False
        if not text:
            self.session.add(Message.user(_EMPTY))
            return False
        self.parts.append(text)
        self.session.add(Message.assistant(text))
        if response.finish_reason == "length":
            self.session.add(Message.user(_CONTINUE))
            return False
        self.finished = True
        return True

    def result(self) -> DelegationResult:
        counter = self.session.accountant.counter
        full = "\n".join(self.parts)
        text = condense(full, self.max_result_tokens, counter=counter)
        return DelegationResult(
            task=self.task,
            result=text,
            result_tokens=counter.count_text(text),
            condensed=text != full,
            finished=self.finished,
            turns=self.turns,
            usage=self.usage,
            session_id=self.session.session_id,
        )


def delegate(
    task: str,
    context: str | Sequence[Message] | None = None,
    *,
    model: Model,
    window: int | None = None,
    model_name: str | None = None,
    max_result_tokens: int = 1500,
    max_turns: int = 6,
    reserved_output: int | None = None,
    instructions: str | None = None,
    counter: TokenCounter | str | None = None,
    config: CompactionConfig | Mapping[str, Any] | None = None,
    summarizer: Summarizer | None = None,
    temperature: float | None = None,
    session_id: str | None = None,
) -> DelegationResult:
    """Run ``task`` in an isolated session with ``model`` and return only its condensed result.

    Args:
        task: What the sub-agent must do (its user message).
        context: What it needs to know: a text, or messages (the parent's, copied in; the
            sub-session compacts them within its own budget).
        model: The model that does the sub-task.
        window: The sub-session's context window in tokens (its budget, separate from the parent's).
        model_name: Look the window up in the model registry instead.
        max_result_tokens: Longest result handed back (longer answers are condensed).
        max_turns: Model calls at most (a reply cut off by its length limit is continued).
        reserved_output: Tokens kept free for each reply (default: min(2 × max_result_tokens, window/4)).
        instructions: The sub-agent's system prompt (default: answer from the context, ids verbatim).
        counter: Token counter of the sub-session (a spec like ``"tiktoken:cl100k_base"`` or a counter).
        config: Compaction config of the sub-session.
        summarizer: Summary layer of the sub-session.
        temperature: Sampling temperature of the sub-task's calls.
        session_id: Id of the sub-session (default: a fresh ``sub_`` id).

    Raises:
        ConfigError: No window and no registry model name, or limits below their minimum.
        UpstreamError: The model failed (after its own retries); ContextOverflowError after the
            sub-session's reactive compaction did not help.
    """
    _check(max_result_tokens, max_turns)
    kwargs = _session_kwargs(window, model_name, reserved_output, max_result_tokens, counter, config)
    session = Session(session_id or "sub_" + uuid.uuid4().hex, summarizer=summarizer, **kwargs)
    loop = _Loop(session, task, max_result_tokens, max_turns)
    loop.start(context, instructions)

    def call(messages: list[Any]) -> ModelResponse:
        return model.request(messages, max_tokens=loop.reply_tokens, temperature=temperature)

    while loop.turns < max_turns:
        if loop.after(session.call_with_retry(call, format="internal")):
            break
    return loop.result()


async def adelegate(
    task: str,
    context: str | Sequence[Message] | None = None,
    *,
    model: AsyncModel,
    window: int | None = None,
    model_name: str | None = None,
    max_result_tokens: int = 1500,
    max_turns: int = 6,
    reserved_output: int | None = None,
    instructions: str | None = None,
    counter: TokenCounter | str | None = None,
    config: CompactionConfig | Mapping[str, Any] | None = None,
    summarizer: AsyncSummarizer | None = None,
    temperature: float | None = None,
    session_id: str | None = None,
) -> DelegationResult:
    """The async twin of `delegate` (same arguments, an `AsyncModel` and an `AsyncSummarizer`)."""
    _check(max_result_tokens, max_turns)
    kwargs = _session_kwargs(window, model_name, reserved_output, max_result_tokens, counter, config)
    session = AsyncSession(session_id or "sub_" + uuid.uuid4().hex, summarizer=summarizer, **kwargs)
    loop = _Loop(session, task, max_result_tokens, max_turns)
    loop.start(context, instructions)

    def call(messages: list[Any]) -> Awaitable[ModelResponse]:
        return model.request(messages, max_tokens=loop.reply_tokens, temperature=temperature)

    caller: Callable[[list[Any]], Awaitable[ModelResponse]] = call
    while loop.turns < max_turns:
        if loop.after(await session.call_with_retry(caller, format="internal")):
            break
    return loop.result()

"""The turn loop of a delegated sub-task, run in a session its caller created.

A sub-task runs in a fresh session with its own budget (its history never enters the parent's
view); the model is asked until it answers, and only its result goes back, at most
``max_result_tokens`` long (condensed with `summarize.condense` when the answer is longer),
with the usage it cost. No tools are offered: a sub-task is answered from the context it is
given. `run` and `arun` take the sub-session ready-made, so this module needs no session class:
`Session.delegate_pending` and `contextwarden.delegate.delegate` both build on it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .budget import Budget
from .compaction.config import CompactionConfig
from .exceptions import ConfigError, UsageError
from .messages import INSTRUCTION_ROLES, Message
from .summarize.extractive import condense
from .tokens import TokenCounter
from .tokens.accountant import TokenAccountant
from .usage import SessionUsage

if TYPE_CHECKING:
    from .llm.base import AsyncModel, Model, ModelResponse

__all__ = [
    "INSTRUCTIONS",
    "AsyncSubSession",
    "DelegationResult",
    "SubSession",
    "arun",
    "check_limits",
    "run",
    "session_options",
]

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


class _Session(Protocol):
    """What the loop needs of a sub-session (a `Session` or an `AsyncSession`)."""

    session_id: str
    accountant: TokenAccountant

    @property
    def budget(self) -> Budget: ...

    def add(self, items: Sequence[Message] | Message) -> int: ...

    def on_turn_end(self, usage: Mapping[str, Any] | None = None) -> None: ...


class SubSession(_Session, Protocol):
    """A sync sub-session: `Session`."""

    def call_with_retry(self, call: Callable[[list[Any]], Any], *, format: Any = None) -> Any: ...


class AsyncSubSession(_Session, Protocol):
    """An async sub-session: `AsyncSession`."""

    async def call_with_retry(self, call: Callable[[list[Any]], Any], *, format: Any = None) -> Any: ...


def check_limits(max_result_tokens: int, max_turns: int) -> None:
    """Raise `ConfigError` for limits below their minimum."""
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
    return [Message.user(m.text, message_id=m.message_id) if m.role in INSTRUCTION_ROLES else m for m in context]


def session_options(
    window: int | None,
    model: str | None,
    reserved_output: int | None,
    max_result_tokens: int,
    counter: TokenCounter | str | None,
    config: CompactionConfig | Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The keyword arguments of a sub-session (`Session`/`AsyncSession`) for these limits.

    Raises:
        ConfigError: neither ``window`` nor ``model`` is given.
        UsageError: ``model`` is not a registry name (a model client goes in ``client=``).
    """
    if model is not None and not isinstance(model, str):
        raise UsageError(
            f"delegate(model=...) is the model's name in the registry, got a {type(model).__name__}; pass the "
            "model client as `client=`."
        )
    if window is None and model is None:
        raise ConfigError(
            "delegate() needs the sub-session's budget: `window=` (tokens) or `model=` (a name looked up in the "
            "model registry).",
            key="window",
        )
    if reserved_output is None and window is not None:
        reserved_output = min(2 * max_result_tokens, window // 4)
    return {
        "window": window,
        "model": model,
        "reserved_output": reserved_output,
        "counter": counter,
        "config": config,
        "format": "openai",
    }


class _Loop:
    """The turn logic shared by `run` and `arun`."""

    def __init__(self, session: _Session, task: str, max_result_tokens: int, max_turns: int) -> None:
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


def run(
    session: SubSession,
    task: str,
    context: str | Sequence[Message] | None,
    *,
    client: Model,
    max_result_tokens: int,
    max_turns: int,
    instructions: str | None = None,
    temperature: float | None = None,
) -> DelegationResult:
    """Run ``task`` in the fresh ``session``, asking ``client``, until it is answered or ``max_turns`` ran out."""
    loop = _Loop(session, task, max_result_tokens, max_turns)
    loop.start(context, instructions)

    def call(messages: list[Any]) -> ModelResponse:
        return client.request(messages, max_tokens=loop.reply_tokens, temperature=temperature)

    while loop.turns < max_turns:
        if loop.after(session.call_with_retry(call, format="internal")):
            break
    return loop.result()


async def arun(
    session: AsyncSubSession,
    task: str,
    context: str | Sequence[Message] | None,
    *,
    client: AsyncModel,
    max_result_tokens: int,
    max_turns: int,
    instructions: str | None = None,
    temperature: float | None = None,
) -> DelegationResult:
    """The async twin of `run`."""
    loop = _Loop(session, task, max_result_tokens, max_turns)
    loop.start(context, instructions)

    def call(messages: list[Any]) -> Awaitable[ModelResponse]:
        return client.request(messages, max_tokens=loop.reply_tokens, temperature=temperature)

    caller: Callable[[list[Any]], Awaitable[ModelResponse]] = call
    while loop.turns < max_turns:
        if loop.after(await session.call_with_retry(caller, format="internal")):
            break
    return loop.result()

"""What every integration does around its framework's model call: count its instructions, learn, recover.

* **Instructions count.** A framework sends its own system prompt (LangChain's ``system_prompt``,
  an Agents SDK agent's ``instructions``, pydantic-ai's ``instructions``) beside the history; the
  session counts it in its budget like tool schemas (`Session.count_instructions`).
* **Usage calibrates.** The input tokens the framework reports go to ``session.on_turn_end``.
* **Overflow recovers.** `as_overflow` recognises a framework's context-length error (its own
  type, the provider's ``context_length_exceeded``, or the wording of any server the library
  knows) as a `ContextOverflowError`, with the window when the error names it; the integration
  then compacts with the reactive layer (``session.on_context_overflow``) and calls once more.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..exceptions import ContextOverflowError
from ..llm.errors import classify_error, is_context_overflow
from ..session import AsyncSession, PreparedView, Session

__all__ = ["add_instructions", "as_overflow", "record_input_tokens"]

_MAX_CHAIN = 8


def add_instructions(session: Session | AsyncSession, text: str | None) -> None:
    """Count the framework's instructions in ``session``'s budget (see `Session.count_instructions`)."""
    session.count_instructions(text)


def record_input_tokens(session: Session | AsyncSession, input_tokens: object) -> None:
    """Feed the input tokens a framework reported into the session's calibration (none reported: nothing)."""
    if isinstance(input_tokens, int) and not isinstance(input_tokens, bool) and input_tokens > 0:
        session.on_turn_end({"input_tokens": input_tokens})


def _status_and_body(exc: BaseException) -> tuple[int | None, Any]:
    try:
        import openai
    except ImportError:  # the framework uses another client: its message is all there is
        return None, None
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code, exc.body
    return None, None


def as_overflow(exc: BaseException, *types: type[BaseException]) -> ContextOverflowError | None:
    """The `ContextOverflowError` a framework's exception stands for, or ``None`` when it is another error.

    Args:
        exc: What the framework raised.
        *types: The framework's own context-length error types (always an overflow, whatever the text).
    """
    seen: BaseException | None = exc
    for _ in range(_MAX_CHAIN):
        if seen is None:
            return None
        if isinstance(seen, ContextOverflowError):
            return seen
        status, body = _status_and_body(seen)
        text = str(seen)
        detail: Any = body if isinstance(body, Mapping) else text
        said = is_context_overflow(text) or (body is not None and is_context_overflow(str(body)))
        if isinstance(seen, types) or said:
            error = classify_error(status if status is not None else 400, detail, url=None)
            if isinstance(error, ContextOverflowError):
                return error
            return ContextOverflowError(f"{type(seen).__name__}: {text}", status_code=status)
        seen = seen.__cause__ or seen.__context__
    return None


def near_full(view: PreparedView | None, share: float = 0.9) -> bool:
    """Whether a view is near its budget (an empty reply then may be a server's silent overflow)."""
    return view is not None and view.status.ratio >= share

"""Sub-agent delegation: run a sub-task in an isolated session and hand back only its result.

`delegate(task, context, client=..., window=...)` opens a fresh `Session` with its own budget (the
sub-task's history never enters the parent's view), asks the model until it answers, and
returns a `DelegationResult` whose ``result`` is at most ``max_result_tokens`` long (condensed
with `summarize.condense` when the answer is longer), plus the usage the sub-task cost. The
sub-session compacts on its own when the sub-task outgrows its window and retries once after a
provider context-length error. No tools are offered: a sub-task is answered from the context
it is given. `adelegate` is the async twin. The turn loop itself is `contextwarden.delegation`,
which `Session.delegate_pending` uses too (so the session never imports this module).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from .compaction.config import CompactionConfig
from .delegation import DelegationResult, arun, check_limits, run, session_options
from .llm.base import AsyncModel, Model
from .messages import Message
from .session import AsyncSession, Session
from .summarize.base import AsyncSummarizer, Summarizer
from .tokens import TokenCounter

__all__ = ["DelegationResult", "adelegate", "delegate"]


def delegate(
    task: str,
    context: str | Sequence[Message] | None = None,
    *,
    client: Model,
    window: int | None = None,
    model: str | None = None,
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
    """Run ``task`` in an isolated session, asking ``client``, and return only its condensed result.

    Args:
        task: What the sub-agent must do (its user message).
        context: What it needs to know: a text, or messages (the parent's, copied in; the
            sub-session compacts them within its own budget).
        client: The model client that does the sub-task (`contextwarden.llm`).
        window: The sub-session's context window in tokens (its budget, separate from the parent's).
        model: The model's name in the registry, to look the window up there instead.
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
        UsageError: ``model`` is not a name (the client goes in ``client=``).
        UpstreamError: The model failed (after its own retries); ContextOverflowError after the
            sub-session's reactive compaction did not help.
    """
    check_limits(max_result_tokens, max_turns)
    options = session_options(window, model, reserved_output, max_result_tokens, counter, config)
    session = Session(session_id or "sub_" + uuid.uuid4().hex, summarizer=summarizer, **options)
    return run(
        session,
        task,
        context,
        client=client,
        max_result_tokens=max_result_tokens,
        max_turns=max_turns,
        instructions=instructions,
        temperature=temperature,
    )


async def adelegate(
    task: str,
    context: str | Sequence[Message] | None = None,
    *,
    client: AsyncModel,
    window: int | None = None,
    model: str | None = None,
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
    """The async twin of `delegate` (same arguments, an `AsyncModel` client and an `AsyncSummarizer`)."""
    check_limits(max_result_tokens, max_turns)
    options = session_options(window, model, reserved_output, max_result_tokens, counter, config)
    session = AsyncSession(session_id or "sub_" + uuid.uuid4().hex, summarizer=summarizer, **options)
    return await arun(
        session,
        task,
        context,
        client=client,
        max_result_tokens=max_result_tokens,
        max_turns=max_turns,
        instructions=instructions,
        temperature=temperature,
    )

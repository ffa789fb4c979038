"""LangChain v1 agents and LangGraph: contextwarden's view as the model's input (extra ``langchain``).

`ContextWardenMiddleware` is an agent middleware for ``langchain.agents.create_agent``. Like
LangChain's ``SummarizationMiddleware`` it works in ``before_model`` / ``abefore_model``: the new
messages of the graph state are added to a contextwarden session (ids kept, tool calls and
``ToolMessage`` results paired) and the view is prepared, compacting when it passed high water.
Like ``ContextEditingMiddleware`` it hands that view to the model in ``wrap_model_call``
without touching the graph state (``after_model`` adds the reply to the session), so the state
keeps the whole conversation; ``rewrite_state=True`` replaces the state's messages by the view
instead, as ``SummarizationMiddleware`` does. The provider's reported input tokens calibrate the
session's counting after each call, and the agent's system prompt is counted in the session's
budget (the agent sends it beside the view). A context-length error from the model (LangChain's own
``ContextOverflowError``, a provider's ``context_length_exceeded``) makes ``wrap_model_call``
compact the view with the reactive layer and call the model once more.

`pre_model_hook` does the same for LangGraph's prebuilt ReAct agent: it returns
``{"llm_input_messages": view}``, which the agent sends instead of the state's messages.

A session per conversation: pass one `Session` (or `AsyncSession`), or a function of the
LangGraph ``thread_id`` that returns the session of that thread.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, RemoveMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime

from ..adapters import to_messages
from ..exceptions import UsageError
from ..session import AsyncSession, PreparedView, Session
from ..snapshots import READ_CONTEXT_TOOL
from ._mirror import Mirror, unseen
from ._recovery import add_instructions, as_overflow, record_input_tokens

try:
    from langchain_core.exceptions import ContextOverflowError as _LangChainOverflow

    _OVERFLOW_TYPES: tuple[type[BaseException], ...] = (_LangChainOverflow,)
except ImportError:  # an older langchain-core without its own overflow error: the wording still tells
    _OVERFLOW_TYPES = ()

__all__ = ["ContextWardenMiddleware", "SessionSource", "pre_model_hook", "read_context_tool"]

AnySession = Session | AsyncSession
SessionSource = AnySession | Callable[[str], AnySession]
"""One session for every run, or a function of the LangGraph ``thread_id`` returning that thread's session."""


@dataclass
class _Thread:
    session: AnySession
    mirror: Mirror = field(default_factory=Mirror)
    view: PreparedView | None = None
    view_of: str | None = None
    """Id of the last message the prepared view was made for (a request ending elsewhere prepares again)."""
    seconds: float = 0.0
    """Time spent adding and preparing (the per-turn overhead the benchmarks report)."""


class _Threads:
    """The session (and its mirror) of each LangGraph thread."""

    def __init__(self, source: SessionSource) -> None:
        if not (isinstance(source, Session | AsyncSession) or callable(source)):
            raise UsageError(
                f"session={type(source).__name__}: pass a contextwarden `Session` or `AsyncSession`, or a function "
                "of the thread id that returns one."
            )
        self._source = source
        self._threads: dict[str, _Thread] = {}

    def get(self) -> _Thread:
        thread_id = _thread_id()
        found = self._threads.get(thread_id)
        if found is None:
            source = self._source
            session = source if isinstance(source, Session | AsyncSession) else source(thread_id)
            if not isinstance(session, Session | AsyncSession):
                raise UsageError(
                    f"the session function returned {type(session).__name__} for thread {thread_id!r}; "
                    "it must return a contextwarden `Session` or `AsyncSession`."
                )
            found = self._threads[thread_id] = _Thread(session)
        return found


def _thread_id() -> str:
    from langgraph.config import get_config

    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # called outside a graph run
        return ""
    return str(configurable.get("thread_id", ""))


def _sync(thread: _Thread, messages: Sequence[BaseMessage]) -> None:
    """Add the messages the session has not seen (the context block of a rewritten state is not news)."""
    fresh = thread.mirror.fresh(messages)
    transcript = thread.session.transcript
    if len(fresh) == len(messages) and transcript:
        # a state the session did not see grow (rewritten by the view, say): what it holds,
        # compacted or not, is not news
        thread.session.add(unseen(to_messages(fresh, format="langchain"), transcript))
    elif fresh:
        thread.session.add(fresh, format="langchain")
    thread.mirror.mark(messages)


def _sync_prepare(thread: _Thread, messages: Sequence[BaseMessage]) -> PreparedView:
    session = thread.session
    if isinstance(session, AsyncSession):
        raise UsageError(
            "ContextWardenMiddleware got an AsyncSession in a sync run; invoke the agent with `ainvoke`/`astream`, "
            "or give it a `Session`."
        )
    started = time.perf_counter()
    _sync(thread, messages)
    view = thread.view = session.prepare(format="langchain")
    thread.view_of = messages[-1].id if messages else None
    thread.seconds += time.perf_counter() - started
    return view


async def _async_prepare(thread: _Thread, messages: Sequence[BaseMessage]) -> PreparedView:
    session = thread.session
    started = time.perf_counter()
    _sync(thread, messages)
    view = thread.view = (
        await session.prepare(format="langchain")
        if isinstance(session, AsyncSession)
        else (session.prepare(format="langchain"))
    )
    thread.view_of = messages[-1].id if messages else None
    thread.seconds += time.perf_counter() - started
    return view


def _rewritten(thread: _Thread, view: PreparedView) -> dict[str, Any]:
    # messages from elsewhere (the context block) get their contextwarden id, not a random one
    # from LangGraph, so a session handed this state again knows them
    messages = [
        m if m.id else m.model_copy(update={"id": ours.message_id})
        for m, ours in zip(view.messages, view.view, strict=True)
    ]
    thread.mirror.mark(messages)
    return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *messages]}


def _for_model(view: PreparedView) -> list[AnyMessage]:
    """The view without system messages: a LangChain agent sends its system prompt itself."""
    return [m for m in view.messages if m.type != "system"]


def _record_usage(thread: _Thread, response: Any) -> None:
    messages = response.result if isinstance(response, ModelResponse) else [response]
    for m in messages:
        usage = m.usage_metadata if isinstance(m, AIMessage) else None
        if usage and usage.get("input_tokens"):
            record_input_tokens(thread.session, usage["input_tokens"])
            return


def _last_id(request: ModelRequest[Any]) -> str | None:
    return request.messages[-1].id if request.messages else None


def _add_system(thread: _Thread, request: ModelRequest[Any]) -> bool:
    """Count the agent's own system prompt in the session; True when it was new (prepare again)."""
    system = request.system_message
    text = system.text if system is not None else None
    if not text:
        return False
    before = thread.session.configured_budget
    add_instructions(thread.session, text)
    return thread.session.configured_budget is not before


class ContextWardenMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Give a LangChain v1 agent's model contextwarden's view of the conversation.

    Args:
        session: A `Session` (sync runs) or `AsyncSession` (async runs), or a function of the
            LangGraph ``thread_id`` that returns the session of that thread.
        rewrite_state: Replace the graph state's messages by the view after each compaction
            (as ``SummarizationMiddleware`` does). By default the state keeps every message and
            only the model request carries the view.
        include_read_tool: Register the ``read_context`` tool, so the model can read back any
            compacted step, snapshot or span (the session answers it).

    Raises:
        UsageError: ``session`` is not a session or a function returning one.
    """

    def __init__(self, session: SessionSource, *, rewrite_state: bool = False, include_read_tool: bool = False) -> None:
        super().__init__()
        self._threads = _Threads(session)
        self.rewrite_state = rewrite_state
        self.tools: Sequence[BaseTool] = [read_context_tool(self.session)] if include_read_tool else []

    def session(self) -> AnySession:
        """The session of the current thread."""
        return self._threads.get().session

    @property
    def seconds(self) -> float:
        """Seconds spent adding messages and preparing views, over every thread."""
        return sum(t.seconds for t in self._threads._threads.values())

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Add the state's new messages to the session and prepare the view (compacting when due)."""
        thread = self._threads.get()
        view = _sync_prepare(thread, state["messages"])
        return _rewritten(thread, view) if self.rewrite_state and view.status.layer else None

    async def abefore_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async `before_model` (an `AsyncSession` runs its summarizer and store without blocking)."""
        thread = self._threads.get()
        view = await _async_prepare(thread, state["messages"])
        return _rewritten(thread, view) if self.rewrite_state and view.status.layer else None

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Add the model's reply to the session (its transcript and store are then up to date)."""
        thread = self._threads.get()
        _sync(thread, state["messages"])
        return None

    async def aafter_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async `after_model`."""
        return self.after_model(state, runtime)

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any] | AIMessage:
        """Call the model with the prepared view instead of the state's messages."""
        thread = self._threads.get()
        view = thread.view
        if _add_system(thread, request) or view is None or thread.view_of != _last_id(request):
            view = _sync_prepare(thread, request.messages)  # another middleware changed the messages
        try:
            response = handler(request.override(messages=_for_model(view)))
        except Exception as exc:
            overflow = as_overflow(exc, *_OVERFLOW_TYPES)
            session = thread.session
            if overflow is None or isinstance(session, AsyncSession):
                raise
            # the provider's window is smaller than the view: compact deeper and call once more
            view = thread.view = session.on_context_overflow(format="langchain", error=overflow)
            response = handler(request.override(messages=_for_model(view)))
        _record_usage(thread, response)
        return response

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> ModelResponse[Any] | AIMessage:
        """Async `wrap_model_call`."""
        thread = self._threads.get()
        view = thread.view
        if _add_system(thread, request) or view is None or thread.view_of != _last_id(request):
            view = await _async_prepare(thread, request.messages)
        try:
            response = await handler(request.override(messages=_for_model(view)))
        except Exception as exc:
            overflow = as_overflow(exc, *_OVERFLOW_TYPES)
            if overflow is None:
                raise
            session = thread.session
            view = thread.view = (
                await session.on_context_overflow(format="langchain", error=overflow)
                if isinstance(session, AsyncSession)
                else session.on_context_overflow(format="langchain", error=overflow)
            )
            response = await handler(request.override(messages=_for_model(view)))
        _record_usage(thread, response)
        return response


def pre_model_hook(session: SessionSource) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A LangGraph ``pre_model_hook`` that sends contextwarden's view as ``llm_input_messages``.

    The graph state keeps every message; the agent's model gets the view. Use it with
    ``langgraph.prebuilt.create_react_agent(model, tools, pre_model_hook=pre_model_hook(session))``.

    Raises:
        UsageError: ``session`` is not a session or a function returning one; an `AsyncSession`
            (a pre-model hook node here is sync: give it a `Session`).
    """
    threads = _Threads(session)

    def hook(state: dict[str, Any]) -> dict[str, Any]:
        view = _sync_prepare(threads.get(), state["messages"])
        return {"llm_input_messages": view.messages}

    return hook


def read_context_tool(session: AnySession | Callable[[], AnySession]) -> BaseTool:
    """contextwarden's ``read_context`` tool as a LangChain tool answered by ``session``."""
    spec = READ_CONTEXT_TOOL["function"]

    def read_context(**arguments: Any) -> str:
        # the session checks the arguments: a model that got them wrong reads what to send instead
        target = session if isinstance(session, Session | AsyncSession) else session()
        return target.handle_tool_call(spec["name"], arguments) or ""

    return StructuredTool.from_function(
        read_context, name=spec["name"], description=spec["description"], args_schema=spec["parameters"]
    )

"""OpenAI Agents SDK: a session whose history is contextwarden's view, and a model-input filter (extra ``agents``).

`ContextWardenSession` implements the SDK's ``Session`` protocol (``get_items``, ``add_items``,
``pop_item``, ``clear_session``) over a contextwarden `AsyncSession`: ``add_items`` appends to
the transcript (in the session's store, when it has one), ``get_items`` returns the managed view,
compacted when it passed high water, as Responses input items. Pass it as
``Runner.run(agent, input, session=...)``.

`ContextWardenInputFilter` is a ``RunConfig(call_model_input_filter=...)`` for runs that keep
their own session (or none): before every model call of a run, the new input items are added to
a contextwarden session and the model gets its view instead of the whole input. Use it for long
runs (many tool calls in one ``Runner.run``), where the SDK reads a session's items only once,
with the SDK's own sessions or none, not with a `ContextWardenSession`: that session's items are
already a view, which the filter would take for new messages.

Items are converted with the Responses adapter: item ids, call ids and the pairing of
``function_call`` and ``function_call_output`` survive both ways. An item without an id (user
input, tool outputs, and the SDK's placeholder ``__fake_id__`` for replies of Chat Completions
models) gets a message id derived from its place and content, so handing the same history over
twice never duplicates it; it is given back as it came (without an id, or with the placeholder).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any, cast

from agents import (
    AgentOutputSchemaBase,
    Handoff,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    SessionSettings,
    Tool,
    TResponseInputItem,
)
from agents.items import TResponseStreamEvent
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.run import CallModelData, ModelInputData
from openai.types.responses import ResponseCompletedEvent

from ..adapters import Format, from_messages, to_messages
from ..exceptions import UsageError
from ..messages import Message
from ..session import AsyncSession, PreparedView, Session
from ._mirror import Mirror, unseen
from ._recovery import add_instructions, as_overflow, record_input_tokens

__all__ = [
    "ContextWardenInputFilter",
    "ContextWardenModel",
    "ContextWardenSession",
    "items_to_messages",
    "messages_to_items",
]

_FORMAT: Format = "responses"
_DERIVED = "cw_item_"


def items_to_messages(items: Sequence[TResponseInputItem], *, start: int = 0) -> list[Message]:
    """Convert Agents SDK input items to messages (ids kept; an item without one gets a stable derived id).

    Args:
        items: Responses input items, as the SDK hands them over.
        start: The position of the first item's message in its history (part of a derived id).

    Raises:
        MessageError: an item that is not a Responses input item (index, field and fix named).
    """
    given = {item.get("id") for item in items if isinstance(item, dict)} - {FAKE_RESPONSES_ID}
    out = []
    for i, m in enumerate(to_messages(items, format=_FORMAT), start):
        if m.message_id not in given:
            digest = hashlib.blake2b(f"{i}:{m.role}:{m.content_hash}".encode(), digest_size=12).hexdigest()
            m = replace(m, message_id=_DERIVED + digest)
        out.append(m)
    return out


def messages_to_items(messages: Sequence[Message]) -> list[TResponseInputItem]:
    """Convert messages to Agents SDK input items (the inverse of `items_to_messages`)."""
    items = from_messages(messages, format=_FORMAT)
    for item in items:
        if str(item.get("id", "")).startswith(_DERIVED):  # the SDK's placeholder stood there
            item["id"] = FAKE_RESPONSES_ID
    return cast(list[TResponseInputItem], items)


def _last_items(items: list[TResponseInputItem], limit: int | None) -> list[TResponseInputItem]:
    """The newest ``limit`` items, reaching back so that no tool output loses its call."""
    if limit is None or limit >= len(items):
        return items
    start = max(len(items) - limit, 0)
    while 0 < start < len(items) and _kind(items[start]) == "function_call_output":
        start -= 1
    while 0 < start and _kind(items[start]) == "function_call" and _kind(items[start - 1]) == "function_call":
        start -= 1  # parallel calls travel together
    return items[start:]


def _kind(item: Any) -> Any:
    return item.get("type") if isinstance(item, dict) else None


class ContextWardenSession:
    """An Agents SDK session backed by a contextwarden session; ``get_items`` returns the managed view.

    Args:
        session_id: The conversation's id (also the contextwarden session's).
        store: An async session store (`contextwarden.stores.open_async_store`); the transcript and
            view state persist there and an existing session of this id is resumed.
        session_settings: The SDK's settings (``limit`` caps the items ``get_items`` returns).
        **options: Keyword arguments of `AsyncSession` (``window=``, ``model=``, ``config=``, ...).
    """

    def __init__(
        self,
        session_id: str,
        *,
        store: Any = None,
        session_settings: SessionSettings | None = None,
        **options: Any,
    ) -> None:
        if "session_id" in options:
            raise UsageError("give the session id once, as the first argument of `ContextWardenSession`.")
        self.session_id = session_id
        self.session_settings = session_settings
        self._store = store
        self._options = options
        self._session: AsyncSession | None = None if store is not None else AsyncSession(session_id, **options)
        self.served: list[TResponseInputItem] = []
        """The items ``get_items`` returned last (a run's input starts with them; the rest is the run's own)."""

    async def open(self) -> AsyncSession:
        """The contextwarden session (opened in the store on first use)."""
        if self._session is None:
            self._session = await AsyncSession.open(self.session_id, store=self._store, **self._options)
        return self._session

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The view as input items (compacted first when it passed high water); ``limit`` keeps the newest."""
        session = await self.open()
        view = await session.prepare(format=_FORMAT)
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        items = _last_items(view.messages, limit)
        self.served = list(items)
        return items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append items to the transcript (written to the store at once)."""
        session = await self.open()
        session.add(items_to_messages(items, start=len(session.transcript)))
        await session.flush()

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item.

        The transcript is append-only, so the session is rebuilt without that item (in its store
        too); the SDK pops only to undo an input it is about to send again.
        """
        session = await self.open()
        items = messages_to_items(session.transcript)
        if not items:
            return None
        await self._rebuild(items[:-1])
        return items[-1]

    async def clear_session(self) -> None:
        """Forget every item (the store's copy of the session too)."""
        await self._rebuild([])

    async def _rebuild(self, items: list[TResponseInputItem]) -> None:
        if self._store is not None:
            await self._store.delete_session(self.session_id, tenant=self._options.get("tenant", "default"))
            self._session = None
        else:
            self._session = AsyncSession(self.session_id, **self._options)
        if items:
            await self.add_items(items)


class ContextWardenInputFilter:
    """A ``call_model_input_filter``: the model gets contextwarden's view of the run's input.

    Args:
        session: The contextwarden session of this conversation (a `Session` or an `AsyncSession`).

    Raises:
        UsageError: ``session`` is not a contextwarden session.
    """

    def __init__(self, session: Session | AsyncSession) -> None:
        if not isinstance(session, Session | AsyncSession):
            raise UsageError(
                f"session={type(session).__name__}: pass a contextwarden `Session` or `AsyncSession` "
                "(one per conversation)."
            )
        self.session = session
        self._mirror = Mirror()
        self._messages = 0
        self.seconds = 0.0
        """Time spent adding items and preparing views (the per-turn overhead the benchmarks report)."""

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        """Add the input's new items to the session and return its view, with the run's instructions."""
        started = time.perf_counter()
        items = data.model_data.input
        fresh = self._mirror.fresh(items)
        if len(fresh) == len(items):
            self._messages = 0  # a new or rewritten history: positions count from its start again
        messages = items_to_messages(fresh, start=self._messages)
        self._messages += len(messages)
        session = self.session
        session.add(messages)
        self._mirror.mark(items)
        add_instructions(session, data.model_data.instructions)
        view: PreparedView
        if isinstance(session, AsyncSession):
            view = await session.prepare(format=_FORMAT)
        else:
            view = session.prepare(format=_FORMAT)
        self.seconds += time.perf_counter() - started
        return ModelInputData(input=view.messages, instructions=data.model_data.instructions)


class ContextWardenModel(Model):
    """An Agents SDK model wrapper: usage calibrates the session; a context-length error compacts and retries.

    Neither an SDK session nor an input filter sees the model's reply or its errors; this wrapper
    does. ``Agent(model=ContextWardenModel(model, session), ...)``: after each reply the input
    tokens the SDK reports go to the session's calibration, and the agent's instructions are
    counted in the session. When the model raises a context-length error (a provider's
    ``context_length_exceeded``, or the wording of any server the library knows), the session
    compacts with the reactive layer, adopting the window the error names, and the request is
    sent once more: the compacted view, then the run's items the session has not seen.

    Args:
        wrapped: The model the agent would use (``OpenAIChatCompletionsModel(...)``, ...).
        session: The conversation's contextwarden session, or its `ContextWardenSession`.
    """

    def __init__(self, wrapped: Model, session: Session | AsyncSession | ContextWardenSession) -> None:
        if not isinstance(session, Session | AsyncSession | ContextWardenSession):
            raise UsageError(
                f"session={type(session).__name__}: pass the conversation's contextwarden session "
                "(`Session`, `AsyncSession` or `ContextWardenSession`)."
            )
        self.wrapped = wrapped
        self._source = session

    async def _session(self) -> Session | AsyncSession:
        source = self._source
        return await source.open() if isinstance(source, ContextWardenSession) else source

    async def _retry_input(
        self, error: BaseException, given: str | list[TResponseInputItem]
    ) -> list[TResponseInputItem]:
        overflow = as_overflow(error)
        if overflow is None:
            raise error
        session = await self._session()
        items = cast(
            list[TResponseInputItem], [{"role": "user", "content": given}] if isinstance(given, str) else given
        )
        source = self._source
        if isinstance(source, ContextWardenSession):
            # the run's input is the session's items, then what the run added (the SDK saves it after the run)
            served = source.served
            known = len(served) if items[: len(served)] == served else 0
            fresh = unseen(items_to_messages(items[known:]), session.transcript)
        else:
            fresh = []  # the input filter already added the run's items to the session
        view = (
            await session.on_context_overflow(format=_FORMAT, error=overflow)
            if isinstance(session, AsyncSession)
            else session.on_context_overflow(format=_FORMAT, error=overflow)
        )
        return [*view.messages, *messages_to_items(fresh)]

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        **kwargs: Any,
    ) -> ModelResponse:
        """The wrapped model's reply; on a context-length error compact and ask once more."""
        session = await self._session()
        add_instructions(session, system_instructions)
        args = (model_settings, tools, output_schema, handoffs, tracing)
        try:
            response = await self.wrapped.get_response(system_instructions, input, *args, **kwargs)
        except Exception as exc:
            retried = await self._retry_input(exc, input)
            response = await self.wrapped.get_response(system_instructions, retried, *args, **kwargs)
        record_input_tokens(session, response.usage.input_tokens)
        return response

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        **kwargs: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """The wrapped model's stream; a context-length error before its first event compacts and retries."""
        session = await self._session()
        add_instructions(session, system_instructions)
        args = (model_settings, tools, output_schema, handoffs, tracing)
        started = False
        try:
            async for event in self.wrapped.stream_response(system_instructions, input, *args, **kwargs):
                started = True
                _record_stream_usage(session, event)
                yield event
            return
        except Exception as exc:
            if started:
                raise
            retried = await self._retry_input(exc, input)
        async for event in self.wrapped.stream_response(system_instructions, retried, *args, **kwargs):
            _record_stream_usage(session, event)
            yield event


def _record_stream_usage(session: Session | AsyncSession, event: TResponseStreamEvent) -> None:
    if isinstance(event, ResponseCompletedEvent) and event.response.usage is not None:
        record_input_tokens(session, event.response.usage.input_tokens)

"""LlamaIndex: a chat memory whose ``get`` is contextwarden's view (extra ``llamaindex``).

`ContextWardenMemory` implements LlamaIndex's ``BaseMemory`` (``get``/``aget``, ``get_all``,
``put``/``aput``, ``put_messages``, ``set``, ``reset``), so it goes wherever a
``ChatMemoryBuffer`` or ``Memory`` goes: ``FunctionAgent.run(user_msg, memory=memory)``,
``SimpleChatEngine(memory=memory)``. ``put`` appends to the transcript (and the session's store),
``get`` returns the view, compacted when it passed high water, ``get_all`` the whole transcript.
With ``asynchronous=True`` it runs an `AsyncSession` (async store, async summarizer) and the
``a``-methods await it; otherwise the sync methods run a `Session` and the ``a``-methods run them
in a worker thread, as LlamaIndex's own memories do.

Conversion (`to_messages` / `from_messages`) is lossless for JSON-able messages: roles, text,
images, thinking, tool calls (``ToolCallBlock`` or OpenAI-style ``additional_kwargs["tool_calls"]``)
and tool results (``additional_kwargs["tool_call_id"]``) map to contextwarden's fields, and each
message's LlamaIndex JSON rides along in ``extra["llamaindex"]``, so an unchanged message comes
back equal; one compaction changed comes back with its new text and its original's other fields.
LlamaIndex messages have no ids: ids are derived from the position and content.
"""

from __future__ import annotations

import hashlib
import json
import logging
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent
from llama_index.core.memory.types import BaseMemory
from llama_index_instrumentation import get_dispatcher
from pydantic import ConfigDict, PrivateAttr

from ..exceptions import MessageError, UsageError
from ..messages import ImagePart, Message, Part, Role, TextPart, ThinkingPart, ToolCall
from ..session import AsyncSession, Session
from ._recovery import add_instructions, as_overflow, record_input_tokens

__all__ = ["ContextWardenMemory", "from_messages", "to_messages"]

logger = logging.getLogger("contextwarden.integrations")

FORMAT = "llamaindex"
_DERIVED = "cw_li_"
_ROLES: Mapping[str, Role] = {
    "system": "system",
    "developer": "developer",
    "user": "user",
    "assistant": "assistant",
    "chatbot": "assistant",
    "model": "assistant",
    "tool": "tool",
    "function": "tool",
}


# --- LlamaIndex -> Message ------------------------------------------------------------------------
def to_messages(messages: Sequence[ChatMessage], *, start: int = 0) -> list[Message]:
    """Convert LlamaIndex chat messages to messages (the input is not modified).

    Args:
        messages: ``ChatMessage`` objects.
        start: The position of the first message in its conversation (part of the derived ids).

    Raises:
        MessageError: an item that is not a ``ChatMessage``, or a tool result without a
            ``tool_call_id`` (index, field and fix named).
    """
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, ChatMessage):
            raise MessageError(
                f"item {i}: expected a LlamaIndex ChatMessage, got {type(m).__name__}; wrap text in "
                "`ChatMessage(role='user', content=...)`.",
                index=i,
                field="(item)",
            )
        out.append(_convert(m, i, start + i))
    return out


def _convert(m: ChatMessage, index: int, position: int) -> Message:
    role = _ROLES.get(str(getattr(m.role, "value", m.role)), "user")
    kwargs = m.additional_kwargs
    parts: list[Part] = []
    for block in m.blocks:
        if isinstance(block, TextBlock):
            parts.append(TextPart(text=block.text))
        elif isinstance(block, ImageBlock) and block.url is not None:
            parts.append(ImagePart(url=str(block.url)))
        elif isinstance(block, ThinkingBlock) and block.content:
            parts.append(ThinkingPart(text=block.content))
        elif isinstance(block, ToolCallBlock):
            parts.append(_call(block.tool_call_id, block.tool_name, block.tool_kwargs))
    for call in kwargs.get("tool_calls") or ():
        parts.append(_openai_call(call, index))
    tool_call_id = None
    if role == "tool":
        tool_call_id = kwargs.get("tool_call_id")
        if not isinstance(tool_call_id, str) or not tool_call_id:
            raise MessageError(
                f"item {index}: a tool message without `additional_kwargs['tool_call_id']`; give the id of the "
                "call it answers.",
                index=index,
                field="additional_kwargs.tool_call_id",
            )
    name = kwargs.get("name")
    message = Message(
        role=role,
        parts=tuple(parts),
        tool_call_id=tool_call_id,
        name=name if isinstance(name, str) else None,
        message_id="cw_li_pending",
    )
    data = m.model_dump(mode="json")
    digest = hashlib.blake2b(f"{position}:{message.content_hash}".encode(), digest_size=12).hexdigest()
    return replace(message, message_id=_DERIVED + digest, extra={FORMAT: {"message": data, "fp": message.content_hash}})


def _call(call_id: str | None, name: str, arguments: Any) -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCall(call_id=call_id or "", name=name, arguments=text)


def _openai_call(call: Any, index: int) -> ToolCall:
    data = call.model_dump() if hasattr(call, "model_dump") else call
    if isinstance(data, Mapping) and isinstance(data.get("function"), Mapping):
        fn = data["function"]
        return _call(data.get("id"), str(fn.get("name", "")), fn.get("arguments") or "{}")
    if isinstance(data, Mapping) and "tool_name" in data:  # a ToolSelection
        return _call(data.get("tool_id"), str(data["tool_name"]), data.get("tool_kwargs") or {})
    raise MessageError(
        f"item {index}: an entry of `additional_kwargs['tool_calls']` is neither an OpenAI tool call nor a "
        f"ToolSelection ({type(call).__name__}); use a `ToolCallBlock` in the message's blocks.",
        index=index,
        field="additional_kwargs.tool_calls",
    )


# --- Message -> LlamaIndex ------------------------------------------------------------------------
def from_messages(messages: Sequence[Message]) -> list[ChatMessage]:
    """Convert messages to LlamaIndex chat messages (new objects; the inverse of `to_messages`).

    Raises:
        MessageError: an item that is not a contextwarden `Message`.
    """
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Message):
            raise MessageError(
                f"item {i}: expected a contextwarden Message, got {type(m).__name__}; convert LlamaIndex messages "
                "with `to_messages` first.",
                index=i,
                field="(item)",
            )
        raw = m.extra.get(FORMAT)
        hints: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        original = hints.get("message")
        if isinstance(original, Mapping) and hints.get("fp") == m.content_hash:
            out.append(ChatMessage.model_validate(original))
            continue
        out.append(_rebuilt(m, original if isinstance(original, Mapping) else {}))
    return out


def _rebuilt(m: Message, original: Mapping[str, Any]) -> ChatMessage:
    blocks: list[Any] = []
    calls_in_kwargs = bool((original.get("additional_kwargs") or {}).get("tool_calls"))
    for p in m.parts:
        if isinstance(p, TextPart):
            blocks.append(TextBlock(text=p.text))
        elif isinstance(p, ImagePart):
            blocks.append(ImageBlock(url=p.url))
        elif isinstance(p, ThinkingPart):
            blocks.append(ThinkingBlock(content=p.text))
        elif isinstance(p, ToolCall) and not calls_in_kwargs:
            blocks.append(ToolCallBlock(tool_call_id=p.call_id, tool_name=p.name, tool_kwargs=p.arguments))
    kwargs = dict(original.get("additional_kwargs") or {})
    if m.tool_call_id is not None:
        kwargs["tool_call_id"] = m.tool_call_id
    return ChatMessage(role=original.get("role") or m.role, blocks=blocks, additional_kwargs=kwargs)


# --- the memory -----------------------------------------------------------------------------------
class ContextWardenMemory(BaseMemory):
    """A LlamaIndex memory backed by a contextwarden session: ``get`` returns the managed view.

    Build it with `from_defaults` (or the same keyword arguments): ``session_id``, ``store``,
    ``asynchronous``, ``instructions`` (the agent's system prompt, counted in the budget; the agent
    sends it itself) and any option of `Session` / `AsyncSession` (``window=``, ``model=``,
    ``served_window=``, ``config=``, ...).

    The usage of each LLM call that carried the memory's view (LlamaIndex's instrumentation reports
    it) calibrates the session. A LlamaIndex agent cannot retry a model call from its memory: on a
    context-length error call `on_context_overflow` and run again.
    """

    _options: dict[str, Any] = PrivateAttr(default_factory=dict)
    _session: Session | AsyncSession | None = PrivateAttr(default=None)
    _built: dict[tuple[str, str], ChatMessage] = PrivateAttr(default_factory=dict)
    _instructions: str | None = PrivateAttr(default=None)
    _last: ChatMessage | None = PrivateAttr(default=None)
    _listener: _UsageListener | None = PrivateAttr(default=None)

    def __init__(
        self,
        *,
        session_id: str | None = None,
        store: Any = None,
        asynchronous: bool = False,
        instructions: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        self._options = {"session_id": session_id, "store": store, "asynchronous": asynchronous, **options}
        self._instructions = instructions
        self._session = self._new_session() if not (asynchronous and store is not None) else None
        self._listener = _UsageListener.attach(self)

    @classmethod
    def class_name(cls) -> str:
        """LlamaIndex's name for the class."""
        return "ContextWardenMemory"

    @classmethod
    def from_defaults(cls, **kwargs: Any) -> ContextWardenMemory:
        """A memory with a new (or, in a store, resumed) session: see the class docstring for the arguments."""
        return cls(**kwargs)

    def _new_session(self) -> Session | AsyncSession:
        options = dict(self._options)
        session_id, store, asynchronous = options.pop("session_id"), options.pop("store"), options.pop("asynchronous")
        if store is not None:
            options["store"] = store
        session = AsyncSession(session_id, **options) if asynchronous else Session(session_id, **options)
        add_instructions(session, self._instructions)
        return session

    @property
    def session(self) -> Session | AsyncSession:
        """The contextwarden session (for an async memory with a store: after the first ``a``-call)."""
        if self._session is None:
            raise UsageError("an asynchronous ContextWardenMemory with a store opens on its first `aget`/`aput`.")
        return self._session

    async def _asession(self) -> AsyncSession:
        if self._session is None:
            options = dict(self._options)
            session_id, store = options.pop("session_id"), options.pop("store")
            options.pop("asynchronous")
            self._session = await AsyncSession.open(session_id, store=store, **options)
            add_instructions(self._session, self._instructions)
        return cast(AsyncSession, self._session)

    def _view(self, view: list[Message]) -> list[ChatMessage]:
        # An agent reads the memory before every step; rebuilding a hundred ChatMessages each time
        # cost 5 ms. Between compactions the view only grows, so each is built once and kept.
        built = self._built
        keys = [(m.message_id, m.content_hash) for m in view]
        missing = [m for m, key in zip(view, keys, strict=True) if key not in built]
        if missing:
            built.update(zip(((m.message_id, m.content_hash) for m in missing), from_messages(missing), strict=True))
        if len(built) > 4 * len(view) + 64:  # forget what compaction took out of the view
            self._built = built = {key: built[key] for key in keys}
        out = [built[key] for key in keys]
        self._last = out[-1] if out else None
        return out

    # --- calibration and recovery -------------------------------------------------------------------
    def sent(self, messages: Sequence[ChatMessage]) -> bool:
        """Whether ``messages`` (an LLM call's input) carry this memory's latest view."""
        last = self._last
        return last is not None and any(m is last for m in messages)

    def record_usage(self, response: Any) -> None:
        """Feed the prompt tokens of a LlamaIndex ``ChatResponse`` into the session's calibration.

        Called for every LLM call that carried this memory's view (LlamaIndex's instrumentation
        reports them); usage is read from ``raw["usage"]`` or ``additional_kwargs``.
        """
        record_input_tokens(self.session, _prompt_tokens(response))

    def on_context_overflow(self, error: BaseException | None = None) -> None:
        """The model refused the view as too long: compact with the reactive layer (the next ``get`` fits).

        LlamaIndex agents cannot retry a model call from a memory: catch the error around the run and
        call this, then run again (see the real-servers guide). ``error`` may be the framework's own
        exception; a window it names is adopted.
        """
        overflow = as_overflow(error) if error is not None else None
        self._sync("on_context_overflow").on_context_overflow(format="internal", error=overflow)

    async def aon_context_overflow(self, error: BaseException | None = None) -> None:
        """Async `on_context_overflow`."""
        overflow = as_overflow(error) if error is not None else None
        session = self.session if self._session is not None else await self._asession()
        if isinstance(session, AsyncSession):
            await session.on_context_overflow(format="internal", error=overflow)
        else:
            session.on_context_overflow(format="internal", error=overflow)

    def _sync(self, method: str) -> Session:
        session = self.session
        if isinstance(session, AsyncSession):
            raise UsageError(
                f"ContextWardenMemory(asynchronous=True) is async: call `a{method}` instead of `{method}`."
            )
        return session

    # --- BaseMemory -------------------------------------------------------------------------------
    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """The view: what the next model call should get (compacted first when it passed high water)."""
        return self._view(self._sync("get").prepare(format="internal").view)

    async def aget(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """Async `get`."""
        if not self._options["asynchronous"]:
            return await super().aget(input, **kwargs)
        session = await self._asession()
        return self._view((await session.prepare(format="internal")).view)

    def get_all(self) -> list[ChatMessage]:
        """Every message ever put, unaltered by compaction."""
        return from_messages(self.session.transcript)

    async def aget_all(self) -> list[ChatMessage]:
        """Async `get_all`."""
        if not self._options["asynchronous"]:
            return await super().aget_all()
        return from_messages((await self._asession()).transcript)

    def put(self, message: ChatMessage) -> None:
        """Append one message."""
        self.put_messages([message])

    def put_messages(self, messages: list[ChatMessage]) -> None:
        """Append messages (written to the session's store at once)."""
        session = self._sync("put_messages")
        session.add(to_messages(messages, start=len(session.transcript)))

    async def aput(self, message: ChatMessage) -> None:
        """Async `put`."""
        await self.aput_messages([message])

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        """Async `put_messages`."""
        if not self._options["asynchronous"]:
            return await super().aput_messages(messages)
        session = await self._asession()
        session.add(to_messages(messages, start=len(session.transcript)))
        await session.flush()
        return None

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the history by ``messages``: a new session holding them."""
        self.reset()
        self.put_messages(messages)

    async def aset(self, messages: list[ChatMessage]) -> None:
        """Async `set`."""
        if not self._options["asynchronous"]:
            return await super().aset(messages)
        await self.areset()
        await self.aput_messages(messages)
        return None

    def reset(self) -> None:
        """Start over with an empty session (the store's copy of the session is deleted)."""
        store = self._options["store"]
        if store is not None and self._session is not None:
            self._sync("reset")
            store.delete_session(self._session.session_id, tenant=self._options.get("tenant", "default"))
        self._session = self._new_session()

    async def areset(self) -> None:
        """Async `reset`."""
        if not self._options["asynchronous"]:
            return await super().areset()
        store = self._options["store"]
        if store is not None and self._session is not None:
            await store.delete_session(self._session.session_id, tenant=self._options.get("tenant", "default"))
            self._session = None
        else:
            self._session = self._new_session()
        return None


def _prompt_tokens(response: Any) -> int | None:
    """The prompt tokens a LlamaIndex ``ChatResponse`` reports (raw OpenAI usage or ``additional_kwargs``)."""
    raw = response.raw if isinstance(response, ChatResponse) else None
    usage = raw.get("usage") if isinstance(raw, Mapping) else None
    if isinstance(usage, Mapping) and isinstance(usage.get("prompt_tokens"), int):
        return int(usage["prompt_tokens"])
    extra = response.additional_kwargs if isinstance(response, ChatResponse) else {}
    tokens = extra.get("prompt_tokens")
    return tokens if isinstance(tokens, int) else None


class _UsageListener(BaseEventHandler):
    """Hands the usage of each LLM call that carried a memory's view to that memory (held weakly)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    memory: Any = None

    @classmethod
    def attach(cls, memory: ContextWardenMemory) -> _UsageListener:
        listener = cls(memory=weakref.ref(memory))
        get_dispatcher().add_event_handler(listener)
        return listener

    @classmethod
    def class_name(cls) -> str:
        """LlamaIndex's name for the class."""
        return "ContextWardenUsageListener"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        """Record the usage of a finished chat call that sent the memory's view."""
        memory = self.memory() if self.memory is not None else None
        if not isinstance(memory, ContextWardenMemory) or not isinstance(event, LLMChatEndEvent):
            return
        if event.response is not None and memory._session is not None and memory.sent(event.messages):
            try:
                memory.record_usage(event.response)
            except Exception:  # calibration must never break the agent's run
                logger.exception("recording LlamaIndex usage failed")

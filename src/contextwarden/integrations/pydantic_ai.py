"""pydantic-ai: a history processor that hands the model contextwarden's view (extra ``pydantic-ai``).

``Agent(model, history_processors=[history_processor(session)])``: before every model request
of a run, the run's new messages are added to the session and the model gets the view, compacted
when it passed high water. A `Session` gives a sync processor, an `AsyncSession` an async one.
pydantic-ai makes a processor's output the run's history, so ``result.all_messages()`` is the
view plus the run's new messages; the session's transcript keeps every message (and its store,
when it has one). Passing that history to the next run adds only what is new: each pydantic-ai
message carries the ids of its contextwarden messages in ``metadata`` (never sent to the model).

Conversion (`to_messages` / `from_messages`) is lossless: a ``ModelRequest`` becomes one message
per part (system prompt, user prompt, each tool return, retry feedback), a ``ModelResponse``
one assistant message (text, tool calls with their ids, thinking). Each message carries its
part's (or response's) pydantic-ai JSON in ``extra["pydantic-ai"]``, so ``from_messages`` gives
back equal messages, consecutive parts of one request regrouped; a message compaction changed
(a cleared tool return) is rebuilt from its new content with the original's metadata, and a
message from elsewhere (the context block) becomes a request of its own. Parts that are not
conversation (instruction parts, say) travel with their neighbouring part. A pydantic-ai message
without recorded ids gets ids derived from its position and content, so a history handed over
twice is added once.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from typing import Any, cast

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ModelContextWindowExceededError
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryPromptPart,
    SystemPromptPart,
    ThinkingPart as AIThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from ..exceptions import MessageError, UsageError
from ..messages import Message, Part, TextPart, ThinkingPart, ToolCall
from ..session import AsyncSession, Session
from ._mirror import Mirror, unseen
from ._recovery import add_instructions, as_overflow, record_input_tokens

__all__ = ["ContextWardenModel", "HistoryProcessor", "from_messages", "history_processor", "to_messages"]

FORMAT = "pydantic-ai"
_DERIVED = "cw_pai_"
_PENDING = "cw_pai_pending"
"""Placeholder id of a message being converted (its id is decided once its place is known)."""
_IDS_KEY = "contextwarden_ids"
"""Key of a pydantic-ai message's ``metadata`` holding the ids of its contextwarden messages (`from_messages`)."""

HistoryProcessor = (
    Callable[[list[ModelMessage]], list[ModelMessage]] | Callable[[list[ModelMessage]], Awaitable[list[ModelMessage]]]
)


# --- pydantic-ai -> Message -----------------------------------------------------------------------
def to_messages(history: Sequence[ModelMessage], *, start: int = 0) -> list[Message]:
    """Convert pydantic-ai messages to messages (the input is not modified).

    Args:
        history: ``ModelRequest`` and ``ModelResponse`` objects.
        start: The position of the first resulting message in its conversation (part of the derived ids).

    Raises:
        MessageError: an item that is not a pydantic-ai message (index and fix named).
    """
    out: list[Message] = []
    dumped = ModelMessagesTypeAdapter.dump_python(list(_checked(history)), mode="json")
    for message, data in zip(history, dumped, strict=True):
        position = start + len(out)
        converted = (
            [_response(message, data)]
            if isinstance(message, ModelResponse)
            else _request(message, data, group=str(position))
        )
        ids = (message.metadata or {}).get(_IDS_KEY) if isinstance(message.metadata, Mapping) else None
        if not (isinstance(ids, list) and len(ids) == len(converted) and all(isinstance(i, str) for i in ids)):
            ids = [_derived_id(m, position + k) for k, m in enumerate(converted)]
        out.extend(replace(m, message_id=i) for m, i in zip(converted, ids, strict=True))
    return out


def _checked(history: Sequence[Any]) -> Sequence[ModelMessage]:
    for i, m in enumerate(history):
        if not isinstance(m, ModelRequest | ModelResponse):
            raise MessageError(
                f"item {i}: expected a pydantic-ai ModelRequest or ModelResponse, got {type(m).__name__}; pass "
                "`result.all_messages()` or a history processor's `messages`.",
                index=i,
                field="(item)",
            )
    return history


def _derived_id(message: Message, position: int) -> str:
    return _DERIVED + hashlib.blake2b(f"{position}:{message.content_hash}".encode(), digest_size=12).hexdigest()


def _fingerprinted(message: Message, hints: dict[str, Any]) -> Message:
    hints["fp"] = message.content_hash
    return replace(message, extra={FORMAT: hints})


def _response(message: ModelResponse, data: Mapping[str, Any]) -> Message:
    parts: list[Part] = []
    for p in message.parts:
        if isinstance(p, ToolCallPart):
            parts.append(ToolCall(call_id=p.tool_call_id, name=p.tool_name, arguments=p.args_as_json_str()))
        elif isinstance(p, AIThinkingPart):
            parts.append(ThinkingPart(text=p.content, signature=p.signature))
        elif p.part_kind == "text":
            parts.append(TextPart(text=p.content))
    return _fingerprinted(Message(role="assistant", parts=tuple(parts), message_id=_PENDING), {"response": dict(data)})


def _request(message: ModelRequest, data: Mapping[str, Any], *, group: str) -> list[Message]:
    meta = {k: v for k, v in data.items() if k != "parts"}
    out: list[Message] = []
    pending: list[Any] = []  # parts that are not conversation, carried by the next (or last) message
    for p, part_data in zip(message.parts, data["parts"], strict=True):
        converted = _request_part(p)
        if converted is None:
            pending.append(part_data)
            continue
        hints = {"group": group, "request": meta, "part": part_data, "before": pending}
        pending = []
        out.append(_fingerprinted(converted, hints))
    if pending:
        if not out:  # a request of such parts only: keep it as an empty user turn that renders back
            return [
                _fingerprinted(
                    Message(role="user", message_id=_PENDING), {"group": group, "request": meta, "before": pending}
                )
            ]
        last = out[-1]
        hints = {**last.extra[FORMAT], "after": pending}
        out[-1] = replace(last, extra={FORMAT: hints})
    return out


def _request_part(p: Any) -> Message | None:
    if isinstance(p, SystemPromptPart):
        return Message(role="system", parts=(TextPart(text=p.content),), message_id=_PENDING)
    if isinstance(p, UserPromptPart):
        text = p.content if isinstance(p.content, str) else " ".join(c for c in p.content if isinstance(c, str))
        return Message(role="user", parts=(TextPart(text=text),), message_id=_PENDING)
    if isinstance(p, ToolReturnPart):
        return Message.tool_result(
            p.tool_call_id,
            p.model_response_str(),
            name=p.tool_name,
            is_error=p.outcome in ("failed", "retried"),
            message_id=_PENDING,
        )
    if isinstance(p, RetryFeedbackPart):
        return Message(role="user", parts=(TextPart(text=str(p.content)),), message_id=_PENDING)
    if isinstance(p, RetryPromptPart):  # older histories
        if p.tool_name is None:
            return Message(role="user", parts=(TextPart(text=p.model_response()),), message_id=_PENDING)
        return Message.tool_result(
            p.tool_call_id, p.model_response(), name=p.tool_name, is_error=True, message_id=_PENDING
        )
    return None


# --- Message -> pydantic-ai -----------------------------------------------------------------------
def from_messages(messages: Sequence[Message], *, tag_ids: bool = False) -> list[ModelMessage]:
    """Convert messages to pydantic-ai messages (new objects; the inverse of `to_messages`).

    Args:
        messages: The messages.
        tag_ids: Record each message's id in its pydantic-ai message's ``metadata`` (never sent to
            the model), so that `to_messages` gives the same ids back.

    Raises:
        MessageError: an item that is not a contextwarden `Message`.
    """
    return ModelMessagesTypeAdapter.validate_python([data for _, data in _grouped(messages, tag_ids=tag_ids)])


def _grouped(messages: Sequence[Message], *, tag_ids: bool) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """Each pydantic-ai message's JSON, with the key of the messages it is made of (ids and contents)."""
    out: list[tuple[list[str], dict[str, Any]]] = []
    group: str | None = None
    for i, m in enumerate(messages):
        if not isinstance(m, Message):
            raise MessageError(
                f"item {i}: expected a contextwarden Message, got {type(m).__name__}; convert pydantic-ai messages "
                "with `to_messages` first.",
                index=i,
                field="(item)",
            )
        raw = m.extra.get(FORMAT)
        hints: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        exact = hints.get("fp") == m.content_hash
        key = [m.message_id, m.content_hash]
        if m.role == "assistant":
            out.append((key, _response_data(m, hints, exact)))
            group = None
            continue
        parts = [*hints.get("before", ()), *_part_data(m, hints, exact), *hints.get("after", ())]
        if hints.get("group") is not None and hints.get("group") == group and out:
            out[-1][1]["parts"].extend(parts)
            out[-1][0].extend(key)
        else:
            out.append((key, {**hints.get("request", {"kind": "request"}), "parts": parts}))
        group = hints.get("group")
    if tag_ids:
        for key, data in out:
            data["metadata"] = {**(data.get("metadata") or {}), _IDS_KEY: key[::2]}
    return [(tuple(key), data) for key, data in out]


def _response_data(m: Message, hints: Mapping[str, Any], exact: bool) -> dict[str, Any]:
    original = hints.get("response")
    if exact and isinstance(original, Mapping):
        return dict(original)
    parts: list[dict[str, Any]] = []
    for p in m.parts:
        if isinstance(p, TextPart):
            parts.append({"part_kind": "text", "content": p.text})
        elif isinstance(p, ToolCall):
            parts.append(
                {"part_kind": "tool-call", "tool_name": p.name, "args": p.arguments, "tool_call_id": p.call_id}
            )
        elif isinstance(p, ThinkingPart):
            parts.append({"part_kind": "thinking", "content": p.text, "signature": p.signature})
    base = {k: v for k, v in original.items() if k != "parts"} if isinstance(original, Mapping) else {}
    return {**base, "kind": "response", "parts": parts}


def _part_data(m: Message, hints: Mapping[str, Any], exact: bool) -> list[dict[str, Any]]:
    original = hints.get("part")
    if isinstance(original, Mapping) and exact:
        return [dict(original)]
    if "part" not in hints and "before" in hints and not m.parts:
        return []  # the empty carrier of a request without conversation parts
    text = m.text
    if m.role == "tool":
        if isinstance(original, Mapping) and original.get("part_kind") == "tool-return":
            return [{**original, "content": text}]  # compacted: the new content, the original's metadata
        return [
            {"part_kind": "tool-return", "tool_name": m.name or "", "content": text, "tool_call_id": m.tool_call_id}
        ]
    kind = "system-prompt" if m.role in ("system", "developer") else "user-prompt"
    return [{"part_kind": kind, "content": text}]


# --- the history processor ------------------------------------------------------------------------
class _Processor:
    """Adds a run's new messages to the session and turns its view into the run's history."""

    def __init__(self, session: Session | AsyncSession) -> None:
        self.session = session
        self.mirror = Mirror()
        self.built: dict[tuple[str, ...], ModelMessage] = {}
        self.seconds = 0.0
        """Time spent adding messages and preparing views (the per-turn overhead the benchmarks report)."""

    def add(self, history: list[ModelMessage]) -> None:
        # the agent's instructions travel beside the history, not in it: the session counts them
        instructions = next(
            (m.instructions for m in reversed(history) if isinstance(m, ModelRequest) and m.instructions), None
        )
        add_instructions(self.session, instructions)
        fresh = self.mirror.fresh(history)
        transcript = self.session.transcript
        messages = to_messages(fresh, start=len(transcript))
        if len(fresh) == len(history) and transcript:
            # a history from elsewhere (a new run's message_history, say) holds what the session has,
            # compacted or not, and the context block: only the rest is new
            messages = unseen(messages, transcript)
        self.session.add(messages)

    def view(self, view: list[Message]) -> list[ModelMessage]:
        # Validating a hundred pydantic-ai messages per call cost 10 ms; between compactions all
        # but the newest are the ones built before, so each is built once and kept by its key.
        grouped = _grouped(view, tag_ids=True)
        fresh = [(key, data) for key, data in grouped if key not in self.built]
        if fresh:
            made = ModelMessagesTypeAdapter.validate_python([data for _, data in fresh])
            self.built.update(zip((key for key, _ in fresh), made, strict=True))
        out = [self.built[key] for key, _ in grouped]
        if len(self.built) > 4 * len(out) + 64:  # forget what compaction took out of the view
            shown = {key for key, _ in grouped}
            self.built = {k: v for k, v in self.built.items() if k in shown}
        # pydantic-ai makes the processed list the run's history: the next call hands these objects back
        self.mirror.mark(out)
        return out


def history_processor(session: Session | AsyncSession) -> HistoryProcessor:
    """A pydantic-ai history processor giving the model ``session``'s view of the run's messages.

    Args:
        session: One contextwarden session per conversation: a `Session` gives a sync processor,
            an `AsyncSession` an async one (its summarizer and store then never block the loop).

    Raises:
        UsageError: ``session`` is not a contextwarden session.
    """
    if not isinstance(session, Session | AsyncSession):
        raise UsageError(
            f"session={type(session).__name__}: pass a contextwarden `Session` (sync processor) or `AsyncSession` "
            "(async processor), one per conversation."
        )
    state = _Processor(session)

    if isinstance(session, AsyncSession):
        keeper = session

        async def process_async(messages: list[ModelMessage]) -> list[ModelMessage]:
            started = time.perf_counter()
            state.add(messages)
            out = state.view((await keeper.prepare(format="internal")).view)
            state.seconds += time.perf_counter() - started
            return out

        process_async.state = state  # type: ignore[attr-defined]  # read by benchmarks (time spent)
        return process_async

    sync_keeper = session

    def process(messages: list[ModelMessage]) -> list[ModelMessage]:
        started = time.perf_counter()
        state.add(messages)
        out = state.view(sync_keeper.prepare(format="internal").view)
        state.seconds += time.perf_counter() - started
        return out

    process.state = state  # type: ignore[attr-defined]  # read by benchmarks (time spent)
    return cast(HistoryProcessor, process)


# --- the model wrapper: calibration and recovery ----------------------------------------------------
class ContextWardenModel(WrapperModel):
    """A pydantic-ai model wrapper: reported usage calibrates ``session``; a context-length error compacts and retries.

    A history processor cannot see the model's reply or its errors; this wrapper can. Use both::

        Agent(ContextWardenModel(model, session), history_processors=[history_processor(session)])

    After each reply the input tokens pydantic-ai reports go to the session's calibration. When
    the model raises ``ModelContextWindowExceededError`` (or any error whose text is a provider's
    context-length refusal), the session compacts with the reactive layer (adopting the window the
    error names) and the request is sent once more with the compacted view.

    Args:
        wrapped: The model (or its name) the agent would use.
        session: The same contextwarden session the history processor uses.
    """

    def __init__(self, wrapped: Model | str, session: Session | AsyncSession) -> None:
        if not isinstance(session, Session | AsyncSession):
            raise UsageError(f"session={type(session).__name__}: pass the contextwarden session of the conversation.")
        super().__init__(wrapped)
        self.session = session

    async def _compacted(self, error: BaseException, messages: list[ModelMessage]) -> list[ModelMessage]:
        overflow = as_overflow(error, ModelContextWindowExceededError)
        if overflow is None:
            raise error
        session = self.session
        view = (
            await session.on_context_overflow(format="internal", error=overflow)
            if isinstance(session, AsyncSession)
            else session.on_context_overflow(format="internal", error=overflow)
        )
        retried = from_messages(view.view)
        # the newest request keeps the run's instructions (pydantic-ai reads them from there)
        last = next((m for m in reversed(messages) if isinstance(m, ModelRequest)), None)
        if last is not None and last.instructions and retried and isinstance(retried[-1], ModelRequest):
            retried[-1] = replace(retried[-1], instructions=last.instructions)
        return retried

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        """Send the request; on a context-length error compact and send it once more."""
        try:
            response = await self.wrapped.request(messages, model_settings, model_request_parameters)
        except Exception as exc:
            retried = await self._compacted(exc, messages)
            response = await self.wrapped.request(retried, model_settings, model_request_parameters)
        record_input_tokens(self.session, response.usage.input_tokens)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        """Stream the request; a context-length error before the stream opens compacts and retries once."""
        async with AsyncExitStack() as stack:
            try:
                stream = await stack.enter_async_context(
                    self.wrapped.request_stream(messages, model_settings, model_request_parameters, run_context)
                )
            except Exception as exc:
                retried = await self._compacted(exc, messages)
                stream = await stack.enter_async_context(
                    self.wrapped.request_stream(retried, model_settings, model_request_parameters, run_context)
                )
            yield stream
            record_input_tokens(self.session, stream.usage.input_tokens)

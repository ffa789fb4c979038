"""OpenAI Chat Completions (``POST /v1/chat/completions``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from starlette.responses import Response

from ...adapters import to_messages
from ...exceptions import MessageError
from ...messages import Message
from ..errors import ServiceError, error_body
from ..intake import check_stream_options, check_texts
from ..keep import chat_reply_messages
from ..replies import ChunkAssembler, usage_of
from .base import (
    Conversation,
    Dialect,
    Reply,
    StreamAssembler,
    as_sent,
    parse_object,
    require_messages,
    require_model_and_stream,
    require_tool_list,
)

__all__ = ["OpenAIChat", "invalid_message"]


def invalid_message(field: str, start: int, exc: MessageError) -> ServiceError:
    """The 400 for a message an adapter cannot read, naming its index in the request."""
    return ServiceError(400, f"{field}[{start + (exc.index or 0)}]: {exc}", param=field, code="invalid_message")


def _text_on_tool_calls(message: Any) -> Any:
    """``message`` with ``"content": ""`` when it is an assistant message calling tools with null or no content.

    The library's client sends "" there too: OpenAI accepts all three forms, but llama-cpp-python's server
    answers a null content with HTTP 500 (a validation error) and a missing one with HTTP 500 as well (its chat
    template reads the field), and every later turn would fail while that round is in the view.
    """
    if (
        isinstance(message, dict)
        and message.get("role") == "assistant"
        and message.get("tool_calls")
        and message.get("content") is None
    ):
        return {**message, "content": ""}
    return message


def _choices(body: Mapping[str, Any]) -> int:
    n = body.get("n", 1)
    return n if isinstance(n, int) and not isinstance(n, bool) else 1


class _ChatAssembler(StreamAssembler):
    def __init__(self, choices: int) -> None:
        self.inner = ChunkAssembler()
        self.choices = choices

    def feed(self, data: str) -> None:
        self.inner.feed(data)
        self.error = self.inner.error

    @property
    def done(self) -> bool:
        return self.inner.done

    @property
    def complete(self) -> bool:
        return self.inner.complete

    def reply(self) -> Reply:
        if self.choices > 1:
            return Reply(messages=None, usage=self.inner.usage)
        message = self.inner.message()
        return Reply(
            messages=chat_reply_messages(message, self.inner.finish_reason), usage=self.inner.usage, keyed=[message]
        )


class OpenAIChat(Dialect):
    """Chat Completions: ``messages`` (system prompt inline), ``tools``, OpenAI's error shape."""

    name = "chat.completions"
    route = "/v1/chat/completions"
    upstream_path = "chat/completions"
    view_format: Literal["openai", "internal"] = "openai"

    def parse(self, raw: bytes) -> dict[str, Any]:
        body = parse_object(raw, "a chat-completions request")
        require_messages(body)
        require_model_and_stream(body)
        require_tool_list(body)
        check_texts(body, ("user",))
        check_stream_options(body)
        return body

    def conversation(self, body: Mapping[str, Any], memo: dict[str, Any] | None = None) -> Conversation:
        messages: list[dict[str, Any]] = body["messages"]

        def convert(start: int) -> list[Message]:
            try:
                return to_messages(messages[start:], format="openai")
            except MessageError as exc:
                raise invalid_message("messages", start, exc) from None

        return Conversation(keyed=messages, convert=convert)

    def render(
        self,
        body: Mapping[str, Any],
        view: list[Any],
        *,
        extra_tools: Sequence[Mapping[str, Any]] = (),
        memo: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        out = dict(body)
        out["messages"] = [_text_on_tool_calls(m) for m in as_sent(view, body.get("messages"))]
        if extra_tools:
            out["tools"] = [*(body.get("tools") or ()), *extra_tools]
        if body.get("stream"):
            # usage calibrates the session's counting; a client that did not ask for it still gets what it asked
            options = dict(out.get("stream_options") or {})
            options.setdefault("include_usage", True)
            out["stream_options"] = options
        return out

    def tool_schema(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        return dict(spec)

    def reply(self, body: Mapping[str, Any], data: Any) -> Reply:
        try:
            message = data["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise ValueError("not a chat completion") from None
        if not isinstance(message, dict):
            raise ValueError("the message is not an object")
        usage = usage_of(data.get("usage"))
        if _choices(body) > 1 or len(data["choices"]) > 1:
            return Reply(messages=None, usage=usage)
        finish = data["choices"][0].get("finish_reason") if isinstance(data["choices"][0], dict) else None
        return Reply(
            messages=chat_reply_messages(message, finish if isinstance(finish, str) else None),
            usage=usage,
            keyed=[message],
        )

    def assembler(self, body: Mapping[str, Any]) -> StreamAssembler:
        return _ChatAssembler(_choices(body))

    def error_body(self, status: int, message: str, *, code: str | None, param: str | None) -> dict[str, Any]:
        return error_body(status, message, code=code, param=param)

    def too_long(self, message: str) -> Response:
        return self.error_response(400, message, code="context_length_exceeded", param="messages")

    def session_hint(self, body: Mapping[str, Any]) -> str | None:
        user = body.get("user")
        return user.strip() if isinstance(user, str) and user.strip() else None

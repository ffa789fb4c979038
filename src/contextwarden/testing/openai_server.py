"""A real local HTTP server that speaks the OpenAI chat API (and Anthropic's Messages API) from a script.

`ScriptedOpenAIServer` listens on ``127.0.0.1`` on a free port, in a background thread, using only
the standard library. Each request to ``POST /v1/chat/completions`` (or ``POST /v1/messages``)
takes the next item of the script and answers with it, in the format of the endpoint it came
to, streaming (SSE) when the request asks for it::

    with ScriptedOpenAIServer(["Hello!", ScriptedError.rate_limited(retry_after=0.01), "Again"]) as server:
        model = OpenAIChatModel("any", base_url=server.base_url)
        model.request([Message.user("hi")]).text     # "Hello!"
        server.requests[0]["messages"]               # the JSON body the server received

Script items: text, `ScriptedReply` (text, tool calls, reasoning, usage numbers, delays, a
mid-stream disconnect), `ScriptedError` (a status and an error body: context overflow, rate
limit with ``Retry-After``, server error, or any body verbatim), `ScriptedStream` (stream events
sent verbatim, for malformed or empty streams), `ScriptedDisconnect` (close the connection without
answering), or a function of the request body returning one of those.
``POST /v1/embeddings`` answers with one vector per input (OpenAI's format): by default a
deterministic hashed vector of ``embedding_dim`` floats, or whatever the ``embed`` function
returns for the inputs (vectors, or a `ScriptedError` to fail).
``GET /v1/models`` lists the server's model. ``routes`` adds endpoints of other servers
(llama.cpp's ``GET /props``, Ollama's ``POST /api/show``, ...), each answered with a fixed JSON
payload or a function of the request body. The server exists so that agents and the library's own
tests can exercise real HTTP (retries, timeouts, streaming) without a model or a network.

With ``n_ctx`` the server also has a context window: it counts each request's prompt
(``count_tokens``) and answers one of ``n_ctx`` tokens or more with a context-length error, before
taking a script item. `ScriptedOpenAIServer.llama_cpp_python` behaves like llama-cpp-python's
server (``python -m llama_cpp.server``): the error in OpenAI's wording, a too-long *streamed*
request answered with HTTP 200 and an empty event stream, and no usage in streams.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Self

from ..messages import ToolCall

__all__ = [
    "ReceivedRequest",
    "ScriptedDisconnect",
    "ScriptedError",
    "ScriptedOpenAIServer",
    "ScriptedReply",
    "ScriptedStream",
    "ServerRoute",
    "ServerScriptItem",
    "hashed_embedding",
]


@dataclass(frozen=True, kw_only=True)
class ScriptedReply:
    """A successful reply."""

    text: str = ""
    """The reply's text."""
    tool_calls: Sequence[ToolCall] = ()
    """Tool calls the reply makes."""
    reasoning: str | None = None
    """Reasoning text (OpenAI-style ``reasoning_content``; an Anthropic thinking block)."""
    prompt_tokens: int | None = None
    """Reported prompt tokens (cached ones included); ``None`` estimates them from the request size."""
    completion_tokens: int | None = None
    """Reported completion tokens; ``None`` estimates them from the reply size."""
    cached_tokens: int = 0
    """Reported prompt-cache hits (part of ``prompt_tokens``)."""
    finish_reason: str | None = None
    """OpenAI finish reason; default ``"tool_calls"`` when there are calls, else ``"stop"``."""
    delay: float = 0.0
    """Seconds to wait before answering (longer than the client's timeout to test timeouts)."""
    chunk_delay: float = 0.0
    """Seconds between stream events."""
    disconnect_after: int | None = None
    """For a stream: close the connection after this many events, before the end marker."""


@dataclass(frozen=True, kw_only=True)
class ScriptedError:
    """An error reply: an HTTP status and a provider-style error body."""

    status: int = 500
    """The HTTP status."""
    message: str = "The server had an error while processing your request."
    """The error message (OpenAI ``error.message``)."""
    type: str = "server_error"
    """OpenAI ``error.type``."""
    code: str | None = None
    """OpenAI ``error.code``."""
    anthropic_message: str | None = None
    """The message on the Anthropic endpoint, when it words the error differently."""
    body: Mapping[str, Any] | str | None = None
    """A body sent verbatim instead of the generated one (a real provider's error, say)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers (``Retry-After``, ...)."""
    delay: float = 0.0
    """Seconds to wait before answering."""
    in_stream: bool = False
    """For a streaming request: answer 200 and send the error as a stream event."""

    @classmethod
    def context_length_exceeded(cls, *, limit: int = 4096, requested: int = 5000, in_stream: bool = False) -> Self:
        """The 400 a provider sends when the prompt does not fit the window."""
        return cls(
            status=400,
            message=(
                f"This model's maximum context length is {limit} tokens. However, your messages resulted in"
                f" {requested} tokens. Please reduce the length of the messages."
            ),
            type="invalid_request_error",
            code="context_length_exceeded",
            anthropic_message=f"prompt is too long: {requested} tokens > {limit} maximum",
            in_stream=in_stream,
        )

    @classmethod
    def rate_limited(cls, *, retry_after: float | None = None) -> Self:
        """A 429, with a ``Retry-After`` header (seconds) when given."""
        headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else {}
        return cls(
            status=429,
            message="Rate limit reached for requests. Please try again later.",
            type="requests",
            code="rate_limit_exceeded",
            headers=headers,
        )

    @classmethod
    def server_error(cls, status: int = 500) -> Self:
        """A 5xx."""
        return cls(status=status)


@dataclass(frozen=True, kw_only=True)
class ScriptedStream:
    """A streamed reply (HTTP 200, ``text/event-stream``) whose events are sent verbatim.

    For replies no well-behaved server sends: chunks of the wrong shape, an empty event stream,
    a stream without its end marker.
    """

    events: Sequence[str | Mapping[str, Any] | Sequence[Any]] = ()
    """The ``data:`` payload of each event; anything but a string is JSON-encoded."""
    done: bool = True
    """Send ``data: [DONE]`` after the events (OpenAI's end marker)."""


@dataclass(frozen=True, kw_only=True)
class ScriptedDisconnect:
    """Close the connection without sending a response."""

    delay: float = 0.0
    """Seconds to wait before closing."""


ServerScriptItem = (
    str
    | ScriptedReply
    | ScriptedError
    | ScriptedStream
    | ScriptedDisconnect
    | Callable[[dict[str, Any]], "str | ScriptedReply | ScriptedError | ScriptedStream | ScriptedDisconnect"]
)
"""One entry of the server's script; a function gets the request's JSON body."""


ServerRoute = Mapping[str, Any] | Sequence[Any] | ScriptedError | Callable[[Any], "Mapping[str, Any] | ScriptedError"]
"""The answer of an extra route: a JSON payload (HTTP 200), an error, or a function of the request body."""


@dataclass(frozen=True, kw_only=True)
class ReceivedRequest:
    """A request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names in lower case."""
    body: dict[str, Any] | None
    """The decoded JSON body, if any."""


_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _pieces(text: str) -> list[str]:
    """Word-sized pieces, as a real server streams them."""
    return re.findall(r"\s*\S+\s*|\s+", text)


def _arg_pieces(arguments: str, size: int = 12) -> list[str]:
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or [""]


def _api(path: str) -> Literal["openai", "anthropic"] | None:
    """Which API a completion path belongs to (``None`` for other routes)."""
    path = path.split("?")[0].rstrip("/")
    if path in ("/v1/chat/completions", "/chat/completions"):
        return "openai"
    return "anthropic" if path == "/v1/messages" else None


class _Closed(Exception):
    """The client went away (or the server is stopping) while we were answering."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # the status line and headers go out in one write and the body in another: with Nagle's
    # algorithm on, a kept-alive client's delayed ACK holds the body back ~40 ms per request
    disable_nagle_algorithm = True
    server: _Server

    # --- plumbing ------------------------------------------------------------------------
    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _wait(self, seconds: float) -> None:
        if seconds > 0 and self.server.stopping.wait(seconds):
            raise _Closed

    def _write(self, data: bytes) -> None:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError as exc:
            raise _Closed from exc

    def _send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
        except OSError as exc:
            raise _Closed from exc
        self._write(data)

    def _start_stream(self) -> None:
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
        except OSError as exc:
            raise _Closed from exc

    def _chunk(self, text: str) -> None:
        data = text.encode()
        self._write(b"%x\r\n%s\r\n" % (len(data), data))

    def _end_stream(self) -> None:
        self._write(b"0\r\n\r\n")

    # --- routes --------------------------------------------------------------------------
    def _route(self, method: str, body: Any) -> bool:
        """Answer from the server's extra ``routes``; False when none matches."""
        route = self.server.owner.routes.get(f"{method} {self.path.rstrip('/')}")
        if route is None:
            return False
        answer = route(body) if callable(route) else route
        if isinstance(answer, ScriptedError):
            self._error("openai", answer, stream=False)
        else:
            self._send_json(200, answer)
        return True

    def do_GET(self) -> None:
        self.server.record(ReceivedRequest(method="GET", path=self.path, headers=self._headers(), body=None))
        try:
            if self._route("GET", None):
                return
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                model = {"id": self.server.model, "object": "model", "created": 0, "owned_by": "contextwarden"}
                self._send_json(200, {"object": "list", "data": [model]})
            elif self.path.rstrip("/") in ("/health", ""):
                self._send_json(200, {"status": "ok"})
            else:
                self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
        except _Closed:
            self.close_connection = True

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        api = _api(self.path)
        try:
            if self.server.owner.routes.get(f"POST {self.path.rstrip('/')}") is not None:
                self.server.record(ReceivedRequest(method="POST", path=self.path, headers=self._headers(), body=body))
                self._route("POST", body)
                return
            if api is None and self.path.rstrip("/") in ("/v1/embeddings", "/embeddings"):
                self.server.record(ReceivedRequest(method="POST", path=self.path, headers=self._headers(), body=body))
                self._embeddings(body)
                return
            if api is None:
                self.server.record(ReceivedRequest(method="POST", path=self.path, headers=self._headers(), body=body))
                self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            if not isinstance(body, dict):
                self.server.record(ReceivedRequest(method="POST", path=self.path, headers=self._headers(), body=None))
                self._send_json(
                    400, {"error": {"message": "the body is not a JSON object", "type": "invalid_request_error"}}
                )
                return
            self.server.record(ReceivedRequest(method="POST", path=self.path, headers=self._headers(), body=body))
            overflow = self.server.owner._overflow(body)
            if overflow is not None:
                self._overflow(api, body, overflow)
                return
            item = self.server.next_item(body)
            self._answer(api, body, item)
        except _Closed:
            self.close_connection = True

    def _embeddings(self, body: Any) -> None:
        inputs = body.get("input") if isinstance(body, dict) else None
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not all(isinstance(x, str) for x in inputs):
            problem = {"message": "`input` must be a string or a list of strings", "type": "invalid_request_error"}
            self._send_json(400, {"error": problem})
            return
        answer = self.server.owner.embed(inputs)
        if isinstance(answer, ScriptedError):
            self._send_json(answer.status, self._error_body("openai", answer))
            return
        data = [{"object": "embedding", "index": i, "embedding": list(v)} for i, v in enumerate(answer)]
        tokens = sum(max(1, len(x) // 4) for x in inputs)
        self._send_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": body.get("model", self.server.model),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def _headers(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers.items()}

    def _overflow(self, api: Literal["openai", "anthropic"], body: dict[str, Any], error: ScriptedError) -> None:
        """A prompt longer than the server's window: an error, or (streamed) what the server mode sends."""
        if body.get("stream") and self.server.owner.overflow_stream == "empty":
            self._start_stream()  # HTTP 200, then nothing: the server logs the error instead
            self._end_stream()
            return
        self._error(api, error, stream=bool(body.get("stream")))

    def _answer(
        self,
        api: Literal["openai", "anthropic"],
        body: dict[str, Any],
        item: str | ScriptedReply | ScriptedError | ScriptedStream | ScriptedDisconnect,
    ) -> None:
        if isinstance(item, str):
            item = ScriptedReply(text=item)
        stream = bool(body.get("stream"))
        if isinstance(item, ScriptedDisconnect):
            self._wait(item.delay)
            self.close_connection = True
            return
        if isinstance(item, ScriptedStream):
            frames = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in item.events]
            self._send_frames(frames + (["data: [DONE]\n\n"] if item.done else []), ScriptedReply())
            return
        self._wait(item.delay)
        if isinstance(item, ScriptedError):
            self._error(api, item, stream=stream)
        elif api == "openai":
            self._openai_stream(body, item) if stream else self._send_json(200, self._openai_reply(body, item))
        else:
            self._anthropic_stream(body, item) if stream else self._send_json(200, self._anthropic_reply(body, item))

    # --- errors --------------------------------------------------------------------------
    def _error_body(self, api: Literal["openai", "anthropic"], error: ScriptedError) -> Any:
        if error.body is not None:
            return error.body if isinstance(error.body, str) else dict(error.body)
        if api == "openai":
            return {"error": {"message": error.message, "type": error.type, "param": None, "code": error.code}}
        kind = _ANTHROPIC_ERROR_TYPES.get(error.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": error.anthropic_message or error.message}}

    def _error(self, api: Literal["openai", "anthropic"], error: ScriptedError, *, stream: bool) -> None:
        payload = self._error_body(api, error)
        if not (stream and error.in_stream):
            self._send_json(error.status, payload, error.headers)
            return
        self._start_stream()
        data = payload if isinstance(payload, str) else json.dumps(payload)
        self._chunk(f"data: {data}\n\n" if api == "openai" else f"event: error\ndata: {data}\n\n")
        self._end_stream()

    # --- usage ---------------------------------------------------------------------------
    def _usage(self, body: Mapping[str, Any], reply: ScriptedReply) -> tuple[int, int]:
        prompt = reply.prompt_tokens
        if prompt is None:
            prompt = self.server.owner.prompt_tokens(body)
        completion = reply.completion_tokens
        if completion is None:
            size = (
                len(reply.text)
                + len(reply.reasoning or "")
                + sum(len(c.name) + len(c.arguments) for c in reply.tool_calls)
            )
            completion = max(1, size // 4)
        return prompt, completion

    def _finish(self, reply: ScriptedReply) -> str:
        return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")

    # --- OpenAI --------------------------------------------------------------------------
    def _openai_usage(self, body: Mapping[str, Any], reply: ScriptedReply) -> dict[str, Any]:
        prompt, completion = self._usage(body, reply)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
        }

    def _openai_reply(self, body: Mapping[str, Any], reply: ScriptedReply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or (None if reply.tool_calls else "")}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in reply.tool_calls
            ]
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.server.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish(reply), "logprobs": None}],
            "usage": self._openai_usage(body, reply),
        }

    def _openai_stream(self, body: Mapping[str, Any], reply: ScriptedReply) -> None:
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model") or self.server.model,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        frames: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""})]
        frames += [chunk({"reasoning_content": p}) for p in _pieces(reply.reasoning or "")]
        frames += [chunk({"content": p}) for p in _pieces(reply.text)]
        for index, call in enumerate(reply.tool_calls):
            head = {
                "index": index,
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            frames.append(chunk({"tool_calls": [head]}))
            frames += [
                chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
                for p in _arg_pieces(call.arguments)
            ]
        frames.append(chunk({}, self._finish(reply)))
        if (body.get("stream_options") or {}).get("include_usage") and self.server.owner.stream_usage:
            frames.append({**base, "choices": [], "usage": self._openai_usage(body, reply)})
        self._send_frames([f"data: {json.dumps(f)}\n\n" for f in frames] + ["data: [DONE]\n\n"], reply)

    def _send_frames(self, frames: list[str], reply: ScriptedReply) -> None:
        self._start_stream()
        for number, frame in enumerate(frames):
            if reply.disconnect_after is not None and number >= reply.disconnect_after:
                # No terminating chunk: the client sees the connection drop mid-body.
                self.close_connection = True
                return
            if number and reply.chunk_delay:
                self._wait(reply.chunk_delay)
            self._chunk(frame)
        self._end_stream()

    # --- Anthropic -----------------------------------------------------------------------
    def _anthropic_content(self, reply: ScriptedReply) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = []
        if reply.reasoning:
            content.append({"type": "thinking", "thinking": reply.reasoning, "signature": "scripted-signature"})
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for call in reply.tool_calls:
            content.append(
                {"type": "tool_use", "id": call.call_id, "name": call.name, "input": call.parsed_arguments()}
            )
        return content

    def _anthropic_usage(self, body: Mapping[str, Any], reply: ScriptedReply) -> dict[str, Any]:
        prompt, completion = self._usage(body, reply)
        return {
            "input_tokens": prompt - reply.cached_tokens,
            "output_tokens": completion,
            "cache_read_input_tokens": reply.cached_tokens,
            "cache_creation_input_tokens": 0,
        }

    def _anthropic_message(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "id": f"msg_{uuid.uuid4().hex[:20]}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model") or self.server.model,
            "stop_sequence": None,
        }

    def _anthropic_reply(self, body: Mapping[str, Any], reply: ScriptedReply) -> dict[str, Any]:
        finish = self._finish(reply)
        return {
            **self._anthropic_message(body),
            "content": self._anthropic_content(reply),
            "stop_reason": _ANTHROPIC_STOP.get(finish, finish),
            "usage": self._anthropic_usage(body, reply),
        }

    def _anthropic_stream(self, body: Mapping[str, Any], reply: ScriptedReply) -> None:
        usage = self._anthropic_usage(body, reply)
        start_usage = {**usage, "output_tokens": 1}
        events: list[tuple[str, dict[str, Any]]] = [
            (
                "message_start",
                {
                    "message": {
                        **self._anthropic_message(body),
                        "content": [],
                        "stop_reason": None,
                        "usage": start_usage,
                    }
                },
            ),
            ("ping", {}),
        ]
        for index, block in enumerate(self._anthropic_content(reply)):
            kind = block["type"]
            if kind == "thinking":
                events.append(
                    (
                        "content_block_start",
                        {"index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
                    )
                )
                events += [
                    ("content_block_delta", {"index": index, "delta": {"type": "thinking_delta", "thinking": p}})
                    for p in _pieces(block["thinking"])
                ]
                events.append(
                    (
                        "content_block_delta",
                        {"index": index, "delta": {"type": "signature_delta", "signature": block["signature"]}},
                    )
                )
            elif kind == "text":
                events.append(("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}))
                events += [
                    ("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": p}})
                    for p in _pieces(block["text"])
                ]
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                events.append(("content_block_start", {"index": index, "content_block": start}))
                events += [
                    ("content_block_delta", {"index": index, "delta": {"type": "input_json_delta", "partial_json": p}})
                    for p in _arg_pieces(json.dumps(block["input"]))
                ]
            events.append(("content_block_stop", {"index": index}))
        finish = self._finish(reply)
        events.append(
            (
                "message_delta",
                {
                    "delta": {"stop_reason": _ANTHROPIC_STOP.get(finish, finish), "stop_sequence": None},
                    "usage": {"output_tokens": usage["output_tokens"]},
                },
            )
        )
        events.append(("message_stop", {}))
        frames = [f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n" for name, data in events]
        self._send_frames(frames, reply)


def hashed_embedding(text: str, dimension: int) -> list[float]:
    """A deterministic unit vector for ``text``: the same text always gives the same vector."""
    digest = b""
    counter = 0
    while len(digest) < dimension:
        digest += hashlib.sha256(f"{counter}:{text}".encode()).digest()
        counter += 1
    values = [b / 127.5 - 1.0 for b in digest[:dimension]]
    norm = sum(v * v for v in values) ** 0.5 or 1.0
    return [v / norm for v in values]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: ScriptedOpenAIServer, address: tuple[str, int]) -> None:
        super().__init__(address, _Handler)
        self.owner = owner
        self.model = owner.model
        self.stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()

    def track(self, connection: socket.socket, *, add: bool) -> None:
        with self._conn_lock:
            if add:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def drop_connections(self) -> None:
        with self._conn_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def record(self, request: ReceivedRequest) -> None:
        self.owner._record(request)

    def next_item(
        self, body: dict[str, Any]
    ) -> str | ScriptedReply | ScriptedError | ScriptedStream | ScriptedDisconnect:
        return self.owner._next_item(body)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients dropping connections mid-reply is what this server is for; stay quiet.
        pass


class ScriptedOpenAIServer:
    """A local OpenAI-compatible (and Anthropic-compatible) HTTP server answering from a script.

    Args:
        script: Items answered in order, one per completion request.
        default: The answer once the script is used up; without one, such a request gets a 400
            whose message says the script ran out.
        model: The model name ``GET /v1/models`` lists and replies report when a request names none.
        host: The interface to listen on.
        port: The port; 0 picks a free one.
        n_ctx: The server's context window in tokens: a request whose prompt has this many tokens
            or more gets a context-length error (OpenAI's wording, with both numbers) instead of
            the next script item. ``None``: no window.
        count_tokens: How the server counts a request's prompt (the JSON body in, tokens out), for
            ``n_ctx`` and for the usage it reports; default about four characters per token.
        stream_usage: Send usage in streams when the request asks for it
            (``stream_options.include_usage``); False for servers that never do.
        overflow_stream: How a *streamed* request over ``n_ctx`` is answered: ``"error"`` (the
            HTTP error, as for a plain request) or ``"empty"`` (HTTP 200 and an empty event stream).
        embed: Answers ``POST /v1/embeddings``: the inputs in, one vector per input (or a
            `ScriptedError`) out; default: `hashed_embedding` of ``embedding_dim`` floats.
        embedding_dim: The length of the default vectors.
        routes: Extra endpoints, keyed ``"GET /props"`` or ``"POST /api/show"`` (the path without a
            trailing slash), each answered with a JSON payload, a `ScriptedError`, or a function of
            the request's JSON body returning either.
    """

    def __init__(
        self,
        script: Sequence[ServerScriptItem] = (),
        *,
        default: ServerScriptItem | None = None,
        model: str = "scripted-model",
        host: str = "127.0.0.1",
        port: int = 0,
        n_ctx: int | None = None,
        count_tokens: Callable[[Mapping[str, Any]], int] | None = None,
        stream_usage: bool = True,
        overflow_stream: Literal["error", "empty"] = "error",
        embed: Callable[[list[str]], Sequence[Sequence[float]] | ScriptedError] | None = None,
        embedding_dim: int = 8,
        routes: Mapping[str, ServerRoute] | None = None,
    ) -> None:
        self.model = model
        self.routes: dict[str, ServerRoute] = dict(routes or {})
        self.embedding_dim = embedding_dim
        self._embed = embed
        self.default = default
        self.n_ctx = n_ctx
        self.count_tokens = count_tokens
        self.stream_usage = stream_usage
        self.overflow_stream: Literal["error", "empty"] = overflow_stream
        self._script: list[ServerScriptItem] = list(script)
        self._position = 0
        self._lock = threading.Lock()
        self.received: list[ReceivedRequest] = []
        """Every request received (completions, model listings, unknown routes), in order."""
        self._host, self._port = host, port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def llama_cpp_python(
        cls,
        script: Sequence[ServerScriptItem] = (),
        *,
        n_ctx: int = 2048,
        count_tokens: Callable[[Mapping[str, Any]], int] | None = None,
        **kwargs: Any,
    ) -> ScriptedOpenAIServer:
        """A server that behaves like llama-cpp-python's (``python -m llama_cpp.server``, 0.3).

        A prompt of ``n_ctx`` tokens or more gets HTTP 400 in OpenAI's wording ("This model's
        maximum context length is 2048 tokens. However, you requested 2300 tokens (2300 in the
        messages, None in the completion)..."), except on a streamed request: that one gets HTTP
        200 and an empty event stream. Streams carry no usage, even when asked for.
        """
        server = cls(
            script,
            n_ctx=n_ctx,
            count_tokens=count_tokens,
            stream_usage=False,
            overflow_stream="empty",
            **kwargs,
        )
        # its extras: a token count, and a plain completion that refuses an over-long prompt
        server.routes.setdefault("POST /extras/tokenize/count", server._count_text)
        server.routes.setdefault("POST /v1/completions", server._completion)
        return server

    def _count_text(self, body: Any) -> Mapping[str, Any] | ScriptedError:
        text = body.get("input") if isinstance(body, Mapping) else None
        if not isinstance(text, str):
            return ScriptedError(status=422, message="input: field required", type="invalid_request_error")
        return {"count": self.prompt_tokens({"messages": [{"role": "user", "content": text}]})}

    def _completion(self, body: Any) -> Mapping[str, Any] | ScriptedError:
        prompt = body.get("prompt") if isinstance(body, Mapping) else None
        if not isinstance(prompt, str):
            return ScriptedError(status=422, message="prompt: field required", type="invalid_request_error")
        as_chat = {"messages": [{"role": "user", "content": prompt}], "max_tokens": body.get("max_tokens")}
        overflow = self._overflow(as_chat)
        if overflow is not None:
            return overflow
        return {"object": "text_completion", "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}]}

    def embed(self, inputs: list[str]) -> Sequence[Sequence[float]] | ScriptedError:
        """The server's answer to an embeddings request for ``inputs``."""
        if self._embed is not None:
            return self._embed(inputs)
        return [hashed_embedding(text, self.embedding_dim) for text in inputs]

    def prompt_tokens(self, body: Mapping[str, Any]) -> int:
        """The server's count of a request's prompt tokens."""
        if self.count_tokens is not None:
            return int(self.count_tokens(body))
        return max(1, len(json.dumps(body.get("messages", []))) // 4 + len(str(body.get("system", ""))) // 4)

    def _overflow(self, body: Mapping[str, Any]) -> ScriptedError | None:
        """The context-length error for a request whose prompt does not fit ``n_ctx``, else None."""
        if self.n_ctx is None:
            return None
        prompt = self.prompt_tokens(body)
        if prompt < self.n_ctx:
            return None
        completion = body.get("max_tokens", body.get("max_completion_tokens"))
        requested = prompt + (completion if isinstance(completion, int) else 0)
        return ScriptedError(
            status=400,
            message=(
                f"This model's maximum context length is {self.n_ctx} tokens. However, you requested {requested}"
                f" tokens ({prompt} in the messages, {completion} in the completion). Please reduce the length of"
                " the messages or completion."
            ),
            type="invalid_request_error",
            code="context_length_exceeded",
            anthropic_message=f"prompt is too long: {prompt} tokens > {self.n_ctx} maximum",
        )

    # --- lifecycle -----------------------------------------------------------------------
    def start(self) -> Self:
        """Start listening (the context manager calls this)."""
        if self._server is not None:
            return self
        self._server = _Server(self, (self._host, self._port))
        # A short poll interval keeps stop() (called once per test) fast.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="ScriptedOpenAIServer", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and drop the open connections."""
        if self._server is None:
            return
        self._server.stopping.set()
        self._server.shutdown()
        self._server.drop_connections()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server, self._thread = None, None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- addresses -----------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The server's root URL (the ``base_url`` of an Anthropic client)."""
        if self._server is None:
            raise RuntimeError("ScriptedOpenAIServer is not running; use it as a context manager or call start().")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, ending in ``/v1``."""
        return f"{self.url}/v1"

    # --- script --------------------------------------------------------------------------
    def push(self, *items: ServerScriptItem) -> None:
        """Append items to the script (also while the server runs)."""
        with self._lock:
            self._script.extend(items)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the completion requests received, in order."""
        with self._lock:
            return [r.body for r in self.received if r.body is not None and _api(r.path) is not None]

    @property
    def remaining(self) -> int:
        """Script items not yet used."""
        with self._lock:
            return len(self._script) - self._position

    def _record(self, request: ReceivedRequest) -> None:
        with self._lock:
            self.received.append(request)

    def _next_item(
        self, body: dict[str, Any]
    ) -> str | ScriptedReply | ScriptedError | ScriptedStream | ScriptedDisconnect:
        with self._lock:
            if self._position < len(self._script):
                item: ServerScriptItem | None = self._script[self._position]
                self._position += 1
            else:
                item = self.default
            served = self._position
        if item is None:
            return ScriptedError(
                status=400,
                message=f"ScriptedOpenAIServer: the script ran out (request {served + 1}); add items or a default.",
                type="script_exhausted",
            )
        if callable(item):
            return item(body)
        return item

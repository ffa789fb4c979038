"""The request handler of `ScriptedOpenAIServer`: a script item answered in OpenAI's or Anthropic's format.

Plain JSON or a server-sent event stream, as the request asks; errors in each API's own error
shape; ``POST /v1/embeddings``, ``GET /v1/models`` and extra routes. The handler reads the script
through `ScriptOwner`, which `ScriptedOpenAIServer` implements.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Protocol

from .script import ReceivedRequest, ScriptedDisconnect, ScriptedError, ScriptedReply, ScriptedStream, ServerRoute

__all__ = ["ScriptHandler", "ScriptOwner", "ScriptServer", "api_of", "hashed_embedding"]


class ScriptOwner(Protocol):
    """What the handler asks of the server it answers for (a `ScriptedOpenAIServer`)."""

    model: str
    routes: dict[str, ServerRoute]
    stream_usage: bool
    overflow_stream: Literal["error", "empty"]

    def embed(self, inputs: list[str]) -> Sequence[Sequence[float]] | ScriptedError: ...

    def prompt_tokens(self, body: Mapping[str, Any]) -> int: ...

    def overflow_error(self, body: Mapping[str, Any]) -> ScriptedError | None: ...

    def record(self, request: ReceivedRequest) -> None: ...

    def next_answer(
        self, body: dict[str, Any]
    ) -> str | ScriptedReply | ScriptedError | ScriptedStream | ScriptedDisconnect: ...


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


def api_of(path: str) -> Literal["openai", "anthropic"] | None:
    """Which API a completion path belongs to (``None`` for other routes)."""
    path = path.split("?")[0].rstrip("/")
    if path in ("/v1/chat/completions", "/chat/completions"):
        return "openai"
    return "anthropic" if path == "/v1/messages" else None


class _Closed(Exception):
    """The client went away (or the server is stopping) while we were answering."""


class ScriptHandler(BaseHTTPRequestHandler):
    """One connection: each request answered from the owner's script, in the format of the endpoint it came to."""

    protocol_version = "HTTP/1.1"
    # the status line and headers go out in one write and the body in another: with Nagle's
    # algorithm on, a kept-alive client's delayed ACK holds the body back ~40 ms per request
    disable_nagle_algorithm = True
    server: ScriptServer

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
        api = api_of(self.path)
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
            overflow = self.server.owner.overflow_error(body)
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


class ScriptServer(ThreadingHTTPServer):
    """The HTTP server behind a `ScriptedOpenAIServer`: a thread per connection, connections tracked to drop on stop."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: ScriptOwner, address: tuple[str, int]) -> None:
        super().__init__(address, ScriptHandler)
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
        self.owner.record(request)

    def next_item(
        self, body: dict[str, Any]
    ) -> str | ScriptedReply | ScriptedError | ScriptedStream | ScriptedDisconnect:
        return self.owner.next_answer(body)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients dropping connections mid-reply is what this server is for; stay quiet.
        pass

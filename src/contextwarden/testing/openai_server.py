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

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Self

from .handler import ScriptServer, api_of, hashed_embedding
from .script import (
    ReceivedRequest,
    ScriptedDisconnect,
    ScriptedError,
    ScriptedReply,
    ScriptedStream,
    ServerRoute,
    ServerScriptItem,
)

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
        self._server: ScriptServer | None = None
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
        overflow = self.overflow_error(as_chat)
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

    def overflow_error(self, body: Mapping[str, Any]) -> ScriptedError | None:
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
        self._server = ScriptServer(self, (self._host, self._port))
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
            return [r.body for r in self.received if r.body is not None and api_of(r.path) is not None]

    @property
    def remaining(self) -> int:
        """Script items not yet used."""
        with self._lock:
            return len(self._script) - self._position

    def record(self, request: ReceivedRequest) -> None:
        """Keep ``request`` in `received` (the handler calls this for every request)."""
        with self._lock:
            self.received.append(request)

    def next_answer(
        self, body: dict[str, Any]
    ) -> str | ScriptedReply | ScriptedError | ScriptedStream | ScriptedDisconnect:
        """The answer to a completion request: the next script item (called with ``body`` when it is a function)."""
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

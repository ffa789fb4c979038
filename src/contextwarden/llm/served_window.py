"""Ask a model server for the context window it serves and the tokenizer it counts with.

A configured window is often not the served one: llama.cpp runs with ``--ctx-size``, vLLM with
``--max-model-len``, Ollama with ``num_ctx``, each usually smaller than the model's trained window.
`probe` reads the server's own endpoints before the first request, so a session fits from the
first turn instead of learning the window from a refusal:

| server | window from | token count from |
|---|---|---|
| llama.cpp (``llama-server``) | ``GET /props`` ``default_generation_settings.n_ctx`` | ``POST /tokenize`` |
| vLLM | ``GET /v1/models`` ``max_model_len`` | ``POST /tokenize`` |
| Ollama | ``GET /api/ps`` ``context_length`` (loaded model), else ``num_ctx`` of ``POST /api/show`` | none |
| llama-cpp-python | its refusal of one over-long prompt (see below) | ``POST /extras/tokenize/count`` |

llama-cpp-python's server (``python -m llama_cpp.server``) publishes no window. It refuses a
prompt longer than its window right after tokenizing it, before any evaluation, and names the
window in the refusal; the probe sends one prompt of `OVERFLOW_PROBE_TOKENS` tokens with
``max_tokens=1`` and reads the window from that error. Pass ``overflow_probe=False`` to skip it.

The probing logic is written once, as a generator of HTTP calls (`probe_flow`); `probe` and
`aprobe` only carry the calls out (with httpx, imported on first use: `ServedWindow` itself needs
nothing).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from ..exceptions import ContextOverflowError
from .errors import classify_error
from .served_calls import Answer, Call

if TYPE_CHECKING:
    import httpx

__all__ = [
    "OVERFLOW_PROBE_TOKENS",
    "ServedWindow",
    "ServerKind",
    "acount_tokens",
    "aprobe",
    "count_flow",
    "count_tokens",
    "probe",
    "probe_flow",
]

ServerKind = Literal["llama.cpp", "llama-cpp-python", "vllm", "ollama", "openai-compatible"]
"""The servers `probe` tells apart; ``"openai-compatible"`` is any other (OpenAI itself included)."""

OVERFLOW_PROBE_TOKENS = 1 << 18
"""Tokens in the prompt that asks llama-cpp-python's server for its window: more than any window such a
server runs with on a machine without an accelerator, so it is refused before evaluation."""

DEFAULT_PROBE_TIMEOUT = 10.0
"""Seconds each probe call may take."""


@dataclass(frozen=True, kw_only=True)
class ServedWindow:
    """What a model server says about its context window and tokenizer."""

    base_url: str
    """The OpenAI-compatible base URL that was probed (``.../v1``)."""
    server: ServerKind
    """Which server answered."""
    window: int | None
    """The context window the server serves, in its own tokens; ``None`` when it does not say."""
    source: str | None = None
    """The endpoint the window came from (``"GET /props"``, ...)."""
    model: str | None = None
    """The model the figures belong to, as the server names it."""
    trained_window: int | None = None
    """The model's own (trained) window, when the server reports it besides the served one."""
    tokenizer: str | None = None
    """What the server names as the model's tokenizer or weights (a GGUF path, a Hugging Face id)."""
    token_count_url: str | None = None
    """An endpoint that counts text in the server's own tokens (`count_tokens` uses it)."""


_V1 = re.compile(r"/v1/?$")


def _root(base_url: str) -> str:
    """The server's root URL: the base URL without its ``/v1``."""
    return _V1.sub("", base_url.rstrip("/"))


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _llama_cpp(base: str, root: str, props: Mapping[str, Any]) -> ServedWindow | None:
    settings = props.get("default_generation_settings")
    n_ctx = _positive(settings.get("n_ctx")) if isinstance(settings, Mapping) else None
    n_ctx = n_ctx or _positive(props.get("n_ctx"))
    if n_ctx is None:
        return None
    path = props.get("model_path")
    alias = props.get("model_alias")
    return ServedWindow(
        base_url=base,
        server="llama.cpp",
        window=n_ctx,
        source="GET /props",
        model=alias if isinstance(alias, str) else None,
        tokenizer=path if isinstance(path, str) else None,
        token_count_url=f"{root}/tokenize",
    )


def _pick(entries: list[Mapping[str, Any]], model: str | None) -> Mapping[str, Any] | None:
    if not entries:
        return None
    for entry in entries:
        if model is not None and entry.get("id") == model:
            return entry
    return entries[0]


def _ollama_num_ctx(parameters: object) -> int | None:
    if not isinstance(parameters, str):
        return None
    match = re.search(r"^\s*num_ctx\s+(\d+)", parameters, re.MULTILINE)
    return int(match.group(1)) if match else None


def _trained(model_info: object) -> int | None:
    if not isinstance(model_info, Mapping):
        return None
    for key, value in model_info.items():
        if isinstance(key, str) and key.endswith(".context_length"):
            return _positive(value)
    return None


def _ollama_flow(base: str, root: str, model: str) -> Generator[Call, Answer, ServedWindow | None]:
    show = yield Call("POST", f"{root}/api/show", {"model": model})
    if show.status != 200 or not isinstance(show.data, Mapping):
        return None
    trained = _trained(show.data.get("model_info"))
    info = show.data.get("model_info")
    tokenizer = info.get("tokenizer.ggml.model") if isinstance(info, Mapping) else None
    found = ServedWindow(
        base_url=base,
        server="ollama",
        window=None,
        model=model,
        trained_window=trained,
        tokenizer=tokenizer if isinstance(tokenizer, str) else None,
    )
    running = yield Call("GET", f"{root}/api/ps")
    if running.status == 200 and isinstance(running.data, Mapping) and isinstance(running.data.get("models"), list):
        for entry in running.data["models"]:
            if isinstance(entry, Mapping) and model in (entry.get("name"), entry.get("model")):
                loaded = _positive(entry.get("context_length"))
                if loaded is not None:
                    return replace(found, window=loaded, source="GET /api/ps")
    num_ctx = _ollama_num_ctx(show.data.get("parameters"))
    if num_ctx is not None:
        return replace(found, window=num_ctx, source="POST /api/show (num_ctx)")
    return found


def _llama_cpp_python_flow(
    base: str, root: str, model: str | None, overflow_probe: bool
) -> Generator[Call, Answer, ServedWindow | None]:
    counted = yield Call("POST", f"{root}/extras/tokenize/count", {"input": "a", "model": model})
    if counted.status != 200 or not isinstance(counted.data, Mapping) or "count" not in counted.data:
        return None
    found = ServedWindow(
        base_url=base,
        server="llama-cpp-python",
        window=None,
        model=model,
        token_count_url=f"{root}/extras/tokenize/count",
    )
    if not overflow_probe:
        return found
    prompt = " a" * OVERFLOW_PROBE_TOKENS
    refused = yield Call("POST", f"{base}/completions", {"model": model, "prompt": prompt, "max_tokens": 1})
    if refused.status is None or refused.status < 400:
        return found
    error = classify_error(refused.status, refused.text, url=f"{base}/completions")
    if isinstance(error, ContextOverflowError) and error.limit is not None:
        return replace(found, window=error.limit, source="POST /v1/completions (refusal)")
    return found


def probe_flow(base_url: str, model: str | None, overflow_probe: bool) -> Generator[Call, Answer, ServedWindow]:
    """The steps of `probe` as a generator of HTTP calls, for callers that carry them out themselves."""
    base = base_url.rstrip("/")
    root = _root(base)
    props = yield Call("GET", f"{root}/props")
    if props.status == 200 and isinstance(props.data, Mapping):
        found = _llama_cpp(base, root, props.data)
        if found is not None:
            return found
    listing = yield Call("GET", f"{base}/models")
    entries: list[Mapping[str, Any]] = []
    if listing.status == 200 and isinstance(listing.data, Mapping) and isinstance(listing.data.get("data"), list):
        entries = [e for e in listing.data["data"] if isinstance(e, Mapping)]
    entry = _pick(entries, model)
    name = model or (entry.get("id") if entry is not None and isinstance(entry.get("id"), str) else None)
    if entry is not None and _positive(entry.get("max_model_len")) is not None:
        tokenizer = entry.get("root")
        return ServedWindow(
            base_url=base,
            server="vllm",
            window=entry["max_model_len"],
            source="GET /v1/models",
            model=name,
            tokenizer=tokenizer if isinstance(tokenizer, str) else name,
            token_count_url=f"{root}/tokenize",
        )
    if name is not None:
        ollama = yield from _ollama_flow(base, root, name)
        if ollama is not None:
            return ollama
    llama_python = yield from _llama_cpp_python_flow(base, root, name, overflow_probe)
    if llama_python is not None:
        return llama_python
    return ServedWindow(base_url=base, server="openai-compatible", window=None, model=name)


def _count_call(served: ServedWindow, text: str) -> Call | None:
    url = served.token_count_url
    if url is None:
        return None
    if served.server == "llama.cpp":
        return Call("POST", url, {"content": text})
    if served.server == "llama-cpp-python":
        return Call("POST", url, {"input": text, "model": served.model})
    return Call("POST", url, {"model": served.model, "prompt": text})


def _count_from(answer: Answer) -> int | None:
    if answer.status != 200 or not isinstance(answer.data, Mapping):
        return None
    count = answer.data.get("count")
    if isinstance(count, int) and not isinstance(count, bool):
        return count
    tokens = answer.data.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None


def probe(
    base_url: str,
    *,
    model: str | None = None,
    api_key: str | None = None,
    timeout: float = DEFAULT_PROBE_TIMEOUT,
    overflow_probe: bool = True,
    http_client: httpx.Client | None = None,
) -> ServedWindow:
    """Ask the server at ``base_url`` for the window it serves and its token-count endpoint.

    Args:
        base_url: The OpenAI-compatible base URL (``http://localhost:8080/v1``); the server's
            own endpoints (``/props``, ``/api/show``, ``/tokenize``) are found from it.
        model: The model to ask about (Ollama and vLLM serve several); default the first listed.
        api_key: Sent as a bearer token, for servers started with one.
        timeout: Seconds each call may take.
        overflow_probe: Let the probe send llama-cpp-python's server one over-long prompt, which it
            refuses naming its window (see the module's description).
        http_client: An httpx client to send with (left open); default a client of its own.

    Returns:
        What the server said; ``window`` is ``None`` when it exposes none (OpenAI, most gateways).

    Raises:
        UpstreamError: Nothing listens at ``base_url``.
        UsageError: ``contextwarden.llm.ALLOW_MODEL_REQUESTS`` is off and the server is not local.
    """
    from ._served_io import run_sync

    found: ServedWindow = run_sync(probe_flow(base_url, model, overflow_probe), http_client, api_key, timeout)
    return found


async def aprobe(
    base_url: str,
    *,
    model: str | None = None,
    api_key: str | None = None,
    timeout: float = DEFAULT_PROBE_TIMEOUT,
    overflow_probe: bool = True,
    http_client: httpx.AsyncClient | None = None,
) -> ServedWindow:
    """The async twin of `probe`."""
    from ._served_io import run_async

    found: ServedWindow = await run_async(probe_flow(base_url, model, overflow_probe), http_client, api_key, timeout)
    return found


def count_flow(served: ServedWindow, text: str) -> Generator[Call, Answer, int | None]:
    """The steps of `count_tokens` as a generator of HTTP calls (none when the server has no count endpoint)."""
    call = _count_call(served, text)
    if call is None:
        return None
    answer = yield call
    return _count_from(answer)


def count_tokens(
    served: ServedWindow,
    text: str,
    *,
    api_key: str | None = None,
    timeout: float = DEFAULT_PROBE_TIMEOUT,
    http_client: httpx.Client | None = None,
) -> int | None:
    """``text`` counted by the server's own tokenizer; ``None`` when the server has no count endpoint.

    Raises:
        UpstreamError: The server cannot be reached.
    """
    from ._served_io import run_sync

    counted: int | None = run_sync(count_flow(served, text), http_client, api_key, timeout)
    return counted


async def acount_tokens(
    served: ServedWindow,
    text: str,
    *,
    api_key: str | None = None,
    timeout: float = DEFAULT_PROBE_TIMEOUT,
    http_client: httpx.AsyncClient | None = None,
) -> int | None:
    """The async twin of `count_tokens`."""
    from ._served_io import run_async

    counted: int | None = await run_async(count_flow(served, text), http_client, api_key, timeout)
    return counted

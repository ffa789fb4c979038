"""`probe` and `count_tokens` against real local HTTP servers that answer like llama.cpp, vLLM, Ollama."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from contextwarden.exceptions import UpstreamError
from contextwarden.llm.served_window import ServedWindow, acount_tokens, aprobe, count_tokens, probe
from contextwarden.testing import ScriptedError, ScriptedOpenAIServer

pytestmark = pytest.mark.anyio


def _llama_cpp() -> ScriptedOpenAIServer:
    props = {"default_generation_settings": {"n_ctx": 4096}, "model_path": "/models/qwen.gguf", "total_slots": 1}
    return ScriptedOpenAIServer(
        routes={"GET /props": props, "POST /tokenize": lambda body: {"tokens": list(range(len(body["content"]) // 3))}}
    )


def _vllm() -> ScriptedOpenAIServer:
    models = {
        "object": "list",
        "data": [
            {"id": "other", "max_model_len": 1024, "root": "org/other"},
            {"id": "qwen", "max_model_len": 32768, "root": "Qwen/Qwen2.5-7B-Instruct"},
        ],
    }
    return ScriptedOpenAIServer(
        routes={
            "GET /props": ScriptedError(status=404, message="Not Found", type="not_found"),
            "GET /v1/models": models,
            "POST /tokenize": lambda body: {"count": 7, "max_model_len": 32768, "tokens": [1] * 7},
        }
    )


def _ollama(*, loaded: bool) -> ScriptedOpenAIServer:
    show = {
        "parameters": "stop <|im_end|>\nnum_ctx 8192",
        "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768, "tokenizer.ggml.model": "gpt2"},
    }
    running = {"models": [{"name": "qwen2.5:7b", "model": "qwen2.5:7b", "context_length": 4096}] if loaded else []}
    return ScriptedOpenAIServer(
        model="qwen2.5:7b",
        routes={"POST /api/show": show, "GET /api/ps": running},
    )


async def _both(server: ScriptedOpenAIServer, **kwargs: Any) -> ServedWindow:
    """Probe with the sync and the async function; both must agree."""
    sync = probe(server.base_url, **kwargs)
    assert await aprobe(server.base_url, **kwargs) == sync
    return sync


async def test_llama_cpp_serves_its_window_in_props_and_counts_with_tokenize() -> None:
    with _llama_cpp() as server:
        found = await _both(server)
        assert (found.server, found.window, found.source) == ("llama.cpp", 4096, "GET /props")
        assert found.tokenizer == "/models/qwen.gguf"
        assert count_tokens(found, "abcdefghi") == 3
        assert await acount_tokens(found, "abcdefghi") == 3


async def test_vllm_serves_max_model_len_of_the_asked_model() -> None:
    with _vllm() as server:
        found = await _both(server, model="qwen")
        assert (found.server, found.window, found.tokenizer) == ("vllm", 32768, "Qwen/Qwen2.5-7B-Instruct")
        assert count_tokens(found, "anything") == 7
        assert server.received[-1].body == {"model": "qwen", "prompt": "anything"}


@pytest.mark.parametrize(
    ("loaded", "window", "source"), [(True, 4096, "GET /api/ps"), (False, 8192, "POST /api/show (num_ctx)")]
)
async def test_ollama_serves_the_loaded_context_or_num_ctx(loaded: bool, window: int, source: str) -> None:
    with _ollama(loaded=loaded) as server:
        found = await _both(server)
        assert (found.server, found.window, found.source) == ("ollama", window, source)
        assert found.trained_window == 32768 and found.tokenizer == "gpt2"
        assert count_tokens(found, "no endpoint") is None


async def test_llama_cpp_python_names_its_window_when_refusing_an_over_long_prompt() -> None:
    with ScriptedOpenAIServer.llama_cpp_python(n_ctx=2048) as server:
        found = await _both(server)
        assert (found.server, found.window) == ("llama-cpp-python", 2048)
        assert count_tokens(found, "x" * 400) == count_tokens(found, "y" * 400) > 50
        quiet = probe(server.base_url, overflow_probe=False)
        assert (quiet.server, quiet.window) == ("llama-cpp-python", None)


async def test_a_server_that_says_nothing_leaves_the_window_unknown() -> None:
    with ScriptedOpenAIServer() as server:
        found = await _both(server)
        base = server.base_url
        unknown = ServedWindow(base_url=base, server="openai-compatible", window=None, model="scripted-model")
        assert found == unknown


def test_nothing_listening_is_an_upstream_error_naming_the_url() -> None:
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]
    with pytest.raises(UpstreamError, match=f"127.0.0.1:{port}"):
        probe(f"http://127.0.0.1:{port}/v1", timeout=2)

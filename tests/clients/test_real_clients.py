"""Claude Code, Codex, opencode and qwen-code, headless, against a scripted agent model: directly, and
through ``contextwarden serve`` at a window small enough that the proxy compacts.

The CLIs are installed from npm into a cache outside the repository (see `_clis`). Without npm
or the registry the tests skip, and fail under ``CONTEXTWARDEN_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from _services import unavailable

from . import _clis
from ._agent import STEPS, AgentServer, ScriptedAgent, Tap, make_repo
from ._checks import client_requests, own_content_problems, pairing_problems

pytestmark = pytest.mark.clients

CLIENTS = ("claude", "codex", "opencode", "qwen")
DIRECT_STEPS = 10
"""The direct runs prove the harness; the 40-step runs go through the proxy."""
WINDOW = {"claude": 40_000, "codex": 20_000, "opencode": 16_000, "qwen": 28_000}
"""Each client's system prompt and tools plus room for a few rounds: its 40 steps need several compactions."""
RUN_SECONDS = 240


@pytest.fixture(scope="module")
def bin_dir() -> Path:
    try:
        return _clis.install()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        unavailable(f"the agent CLIs cannot be installed: {exc}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[Callable[[str, int], str]]:
    """A function that starts ``contextwarden serve`` in front of an upstream URL; stopped after the test."""
    started: list[subprocess.Popen[bytes]] = []
    logs: list[str] = []

    def start(upstream: str, window: int) -> str:
        port = _free_port()
        log = tmp_path / "serve.log"
        env = {
            **os.environ,
            "CONTEXTWARDEN_AGENT_CONTEXT__MAX_CONTEXT_TOKENS": str(window),
            "OPENAI_API_KEY": "",
        }
        argv = [sys.executable, "-m", "contextwarden", "serve", "--port", str(port), "--upstream", f"{upstream}/v1"]
        argv += ["--store", f"sqlite:///{tmp_path / 'proxy.db'}", "--log-level", "info"]
        with log.open("wb") as sink:
            process = subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT)
        started.append(process)
        logs.append(str(log))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=1).close()
                return url
            except OSError:
                if process.poll() is not None:
                    break
                time.sleep(0.2)
        raise AssertionError(f"serve did not start: {log.read_text()[-3000:]}")

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=15)


def _run(name: str, bin_dir: Path, base_url: str, repo: Path, home: Path) -> subprocess.CompletedProcess[str]:
    call = _clis.invocation(name, bin_dir, base_url, repo, home)
    try:
        return _clis.run(call, timeout=RUN_SECONDS)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{name} did not finish in {RUN_SECONDS} s: {str(exc.stderr)[-3000:]}") from None


def _assert_steps(name: str, agent: ScriptedAgent, done: subprocess.CompletedProcess[str], steps: int) -> None:
    outcome = agent.outcome
    assert done.returncode == 0, f"{name} exited {done.returncode}: {done.stderr[-3000:]}{done.stdout[-2000:]}"
    assert not outcome.steps_failed, f"steps whose result was wrong: {outcome.steps_failed}"
    assert not outcome.unknown_results, f"results for calls the model never made: {outcome.unknown_results}"
    assert not outcome.missing_tools, f"{name} offered no tool for: {outcome.missing_tools}"
    assert sorted(outcome.steps_ok) == list(range(steps))
    assert outcome.finished
    assert not outcome.signature_problems, outcome.signature_problems
    if _clis.DIALECT[name] in ("messages", "responses"):
        assert outcome.signatures_checked > 0, "no signed thinking or reasoning came back"
    for record in agent.records:
        assert not pairing_problems(record.request.dialect, record.request.body)


@pytest.mark.parametrize("name", CLIENTS)
def test_client_directly(name: str, bin_dir: Path, tmp_path: Path) -> None:
    """The harness itself: each CLI completes its steps against the scripted model with no proxy."""
    repo = make_repo(tmp_path / "repo")
    agent = ScriptedAgent(repo, steps=DIRECT_STEPS)
    with AgentServer(agent) as server:
        done = _run(name, bin_dir, server.url, repo, tmp_path / "home")
    _assert_steps(name, agent, done, DIRECT_STEPS)


def _route_served(path: str) -> bool:
    from contextwarden.service import create_app

    return any(getattr(route, "path", None) == path for route in create_app().routes)


_PENDING = {
    "claude": (not _route_served("/v1/messages"), "the proxy has no Anthropic Messages route yet"),
    "codex": (not _route_served("/v1/responses"), "the proxy has no OpenAI Responses route yet"),
    "opencode": (True, "the proxy merges the title request into the session and serves no read_context yet"),
    "qwen": (True, "the proxy merges qwen's compression requests into the session and serves no read_context yet"),
}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.xfail(_PENDING[n][0], reason=_PENDING[n][1], strict=False)) for n in CLIENTS],
)
def test_client_through_proxy(name: str, bin_dir: Path, tmp_path: Path, proxy: Callable[[str, int], str]) -> None:
    """40 steps through ``serve`` at a small window: every step succeeds, each upstream request carries
    its own system prompt and tools, pairs hold, signatures arrive unchanged, side requests stay
    apart, the proxy compacts and answers ``read_context`` itself."""
    repo = make_repo(tmp_path / "repo")
    agent = ScriptedAgent(repo, steps=STEPS)
    with AgentServer(agent) as server:
        proxy_url = proxy(server.url, WINDOW[name])
        with Tap(proxy_url) as tap:
            done = _run(name, bin_dir, tap.url, repo, tmp_path / "home")
    _assert_steps(name, agent, done, STEPS)
    problems = own_content_problems(agent.records, tap.sent)
    assert not problems, problems[:10]
    sent = client_requests(tap.sent)
    largest_client = max(len(json.dumps(body)) for _, body in sent)
    largest_upstream = max(len(json.dumps(r.request.body)) for r in agent.records)
    assert largest_upstream < largest_client, "the proxy never compacted"
    assert agent.outcome.read_context_calls >= 1, "the view never offered read_context"
    assert agent.outcome.read_context_answers and all(
        answer.strip() and "error" not in answer.lower()[:80] for answer in agent.outcome.read_context_answers
    ), agent.outcome.read_context_answers
    side = [r for r in agent.records if r.kind == "side"]
    for record in side:  # a side request reaches the upstream as the client sent it
        assert any(json.dumps(body) == json.dumps(record.request.body) for _, body in sent), "side request changed"

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
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from _services import unavailable

from . import _clis
from ._agent import STEPS, AgentServer, ScriptedAgent, Tap, make_repo
from ._checks import client_requests, own_content_problems, pairing_problems, signed_parts_changed
from ._dialects import text_of as _text_of

pytestmark = pytest.mark.clients

CLIENTS = ("claude", "codex", "opencode", "qwen")
DIRECT_STEPS = 10
"""The direct runs prove the harness; the 40-step runs go through the proxy."""
WINDOW = {"claude": 64_000, "codex": 32_000, "opencode": 28_000, "qwen": 32_000}
"""Each client's system prompt and tools plus room for a few rounds: its 40 steps need several compactions."""
RUN_SECONDS = 240
SIDE_REQUESTS = {"opencode": "title request"}
"""Side requests a client sends in every run through the proxy. qwen-code compresses its history (a side
request of its own) when the usage it is told passes 70% of its window: directly it does, behind the proxy
the usage is the managed view's and it need not; Claude Code's are off with its nonessential traffic."""


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


@pytest.mark.parametrize("name", CLIENTS)
def test_client_through_proxy(name: str, bin_dir: Path, tmp_path: Path, proxy: Callable[[str, int], str]) -> None:
    """40 steps through ``serve`` at a small window: every step succeeds, each upstream request carries
    its own system prompt and tools, pairs hold, signatures arrive unchanged, side requests stay
    apart, the proxy compacts and answers ``read_context`` itself."""
    repo = make_repo(tmp_path / "repo")
    agent = ScriptedAgent(repo, steps=STEPS)
    with AgentServer(agent) as server:
        proxy_url = proxy(server.url, WINDOW[name])
        with Tap(proxy_url) as tap:
            # qwen-code sends no session identity of its own: the session goes in the base URL
            base = f"{tap.url}/s/qwen-{tmp_path.name}" if name == "qwen" else tap.url
            done = _run(name, bin_dir, base, repo, tmp_path / "home")
    try:
        _assert_steps(name, agent, done, STEPS)
    except AssertionError as exc:  # the proxy's log says why a request failed
        log = (tmp_path / "serve.log").read_text(errors="replace")
        raise AssertionError(f"{exc}\n--- serve.log (end) ---\n{log[-4000:]}") from None
    problems = own_content_problems(agent.records, tap.sent)
    assert not problems, problems[:10]
    changed = signed_parts_changed(agent.records, tap.sent)
    assert not changed, changed[:5]
    sent = client_requests(tap.sent)
    largest_client = max(len(json.dumps(body)) for _, body in sent)
    largest_upstream = max(len(json.dumps(r.request.body)) for r in agent.records)
    assert largest_upstream < largest_client, "the proxy never compacted"
    offered = sum("read_context" in r.request.tools for r in agent.records)
    referred = sum("read_context(" in r.request.text for r in agent.records)
    assert agent.outcome.read_context_calls >= 1, (
        f"read_context offered in {offered}, referred to in {referred} requests"
    )
    answers = agent.outcome.read_context_answers
    assert answers and all(a.strip() and not a.lower().startswith("error") for a in answers), answers
    assert any(word in a for a in answers for word in ("MARKER_", "ran ", "module_")), "no read-back of the work"
    side = [r for r in agent.records if r.kind == "side"]
    if name in SIDE_REQUESTS:
        assert side, f"{name} sent no {SIDE_REQUESTS[name]}"
    for record in side:  # a side request reaches the upstream as the client sent it
        assert any(body == record.request.body for _, body in sent), "side request changed"
    _assert_sides_apart(proxy_url, agent)


def _assert_sides_apart(proxy_url: str, agent: ScriptedAgent) -> None:
    """No session the proxy keeps mixes a side request's conversation into the agent's."""
    side_prompts = {_text_of(r.request.system)[:300] for r in agent.records if r.kind == "side"} - {""}
    agent_prompt = next(_text_of(r.request.system)[:300] for r in agent.records if r.kind == "agent")
    listed = json.loads(urllib.request.urlopen(f"{proxy_url}/v1/sessions?limit=1000", timeout=10).read())["data"]
    agent_sessions = 0
    for session in listed:
        quoted = urllib.parse.quote(session["session_id"], safe="")
        view = _text_of(
            json.loads(urllib.request.urlopen(f"{proxy_url}/v1/sessions/{quoted}/view", timeout=30).read())["messages"]
        )
        if agent_prompt[:200] in view:
            agent_sessions += 1
            mixed = [p[:60] for p in side_prompts if p[:200] in view]
            assert not mixed, f"session {session['session_id']} holds side requests: {mixed}"
    assert agent_sessions >= 1, f"no session holds the agent's conversation ({len(listed)} sessions)"


QWEN_COMPRESSING_WINDOW = 30_000
"""The window qwen-code is told in the compression test: its system prompt, tools and a few steps pass 70% of it."""


def test_qwen_codes_own_compression_goes_through_as_side_requests(
    bin_dir: Path, tmp_path: Path, proxy: Callable[[str, int], str]
) -> None:
    """qwen-code compresses its history (told a small window, behind a proxy window large enough not to
    compact first): each compression request is a conversation of its own for the proxy. The upstream
    receives it as qwen sent it, with the summarizer's own system prompt and the compression
    instruction last, and the agent's session never holds it."""
    steps = 16
    repo = make_repo(tmp_path / "repo")
    agent = ScriptedAgent(repo, steps=steps)
    with AgentServer(agent) as server:
        proxy_url = proxy(server.url, 128_000)
        with Tap(proxy_url) as tap:
            call = _clis.invocation(
                "qwen",
                bin_dir,
                f"{tap.url}/s/qwen-{tmp_path.name}",
                repo,
                tmp_path / "home",
                qwen_window=QWEN_COMPRESSING_WINDOW,
            )
            done = _clis.run(call, timeout=RUN_SECONDS)
    _assert_steps("qwen", agent, done, steps)
    side = [r for r in agent.records if r.kind == "side"]
    assert side, "qwen-code did not compress its history"
    agent_prompt = next(_text_of(r.request.system) for r in agent.records if r.kind == "agent")
    sent = client_requests(tap.sent)
    for record in side:
        body = record.request.body
        assert any(body == client for _, client in sent), "a compression request changed on its way upstream"
        assert body["messages"][0]["role"] == "system"
        assert _text_of(record.request.system) != agent_prompt  # the summarizer's own prompt
        assert body["messages"][-1]["role"] == "user"  # the compression instruction, last
        assert not body.get("tools")
    listed = json.loads(urllib.request.urlopen(f"{proxy_url}/v1/sessions?limit=1000", timeout=10).read())["data"]
    assert any("~" in s["session_id"] for s in listed), [s["session_id"] for s in listed]
    _assert_sides_apart(proxy_url, agent)

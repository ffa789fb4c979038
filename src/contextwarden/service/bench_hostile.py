"""``contextwarden bench proxy --hostile``: a soak of ordinary and hostile requests through a real ``serve``.

A real ``contextwarden serve`` process (two tenants with API keys, over the store under test) in front of
`ScriptedOpenAIServer` (the upstream, in this process), and this process as the load generator:
``concurrency`` agents at once, ``requests`` requests in all. Each agent holds a conversation
(a new session every ``turns_per_session`` turns, its whole history re-sent each time); instead of
its next turn it sends, with probability ``hostile_share``, one hostile request of a kind drawn
from `HOSTILE_KINDS`:

* ``other_tenant``: the second tenant writes into, or reads, the session an agent of the first is in;
* ``bad_json`` (a cut body), ``deep_json`` (a message nested 2,000 deep), ``wrong_content_type``
  (``text/plain``, as a cross-site form sends), ``huge_body`` (over ``max_body_bytes``),
  ``bad_session_id`` (too long, a control character, the tenant separator);
* ``hostile_upstream``: a valid request in a session of its own whose upstream reply is one of
  `UPSTREAM_KINDS`: an error quoting the upstream key, a negative usage count, a reply over
  ``max_reply_bytes``, a stream cut before its end, a stream event nested 3,000 deep, a body that
  is not JSON.

The report gives, per kind, the status codes answered and the raw errors (a 500 or a dropped
connection: there should be none); the replies the service acknowledged (a 200, or a stream that
ended with ``[DONE]``) that the store does not hold; the second tenant's answers that show
anything of the first tenant's conversations; every response and log line carrying the upstream
key or a tenant's API key; and the server process's resident memory, sampled over the soak.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from ..exceptions import SessionNotFound
from ..messages import Message
from ..stores import open_store
from ..stores.tenancy import locate
from ..testing import ScriptedError, ScriptedOpenAIServer, ScriptedReply, ScriptedStream
from .auth import hash_key
from .bench import drop_redis_prefix, free_port, rss_mb, running_process

__all__ = ["HOSTILE_KINDS", "UPSTREAM_KEY", "UPSTREAM_KINDS", "HostileSoakConfig", "run_hostile_soak"]

MODEL = "soak-model"
UPSTREAM_KEY = "sk-proj-SOAKUPSTREAMKEY0123456789abcdefXYZ"
"""The upstream key the server holds; hostile upstream replies quote it back."""
REPLY = "Checked the failing test: the cache key misses the model name; patching the accountant next."

HOSTILE_KINDS = (
    "bad_json",
    "deep_json",
    "wrong_content_type",
    "huge_body",
    "bad_session_id",
    "other_tenant",
    "hostile_upstream",
)
UPSTREAM_KINDS = ("key_in_error", "negative_usage", "huge_reply", "cut_stream", "deep_event", "not_json")
_MARK = "[[upstream:"
TENANT_KEYS = {"acme": "cw-soak-acme-0123456789abcdef", "globex": "cw-soak-globex-0123456789abcdef"}
"""The API keys of the service's two tenants: the agents are ``acme``'s, ``globex`` is the intruder."""
_AGENT_TEXT = b"the test printed 3 failures"
"""In every agent's user message: an answer to ``globex`` holding it shows another tenant's data."""
_SECRETS = (UPSTREAM_KEY, UPSTREAM_KEY[8:], *TENANT_KEYS.values())


@dataclass(kw_only=True)
class HostileSoakConfig:
    """What one `run_hostile_soak` sends."""

    stores: list[str] = field(default_factory=lambda: ["sqlite"])
    redis_url: str = "redis://127.0.0.1:6379/0"
    requests: int = 20_000
    concurrency: int = 50
    hostile_share: float = 0.1
    turns_per_session: int = 20
    """Turns of a conversation before its agent starts a new session (histories stay bounded)."""
    stream_share: float = 0.2
    """Share of ordinary requests sent streamed."""
    max_body_bytes: int = 1 << 20
    max_reply_bytes: int = 1 << 20
    samples: int = 10
    """Resident-memory samples of the server over the soak."""
    seed: int = 0
    workdir: Path | None = None


def _upstream_answer(body: dict[str, Any]) -> ScriptedReply | ScriptedError | ScriptedStream:
    """The scripted upstream: an ordinary reply, or the hostile one the request's last message names."""
    messages = body.get("messages") or [{}]
    last = messages[-1].get("content") if isinstance(messages[-1], dict) else None
    kind = last.split(_MARK, 1)[1].split("]]", 1)[0] if isinstance(last, str) and _MARK in last else None
    if kind == "key_in_error":
        return ScriptedError(status=401, message=f"Incorrect API key provided: Bearer {UPSTREAM_KEY}", type="auth")
    if kind == "negative_usage":
        return ScriptedReply(text=REPLY, prompt_tokens=-5000, completion_tokens=10**30)
    if kind == "huge_reply":
        return ScriptedReply(text="x" * (2 << 20))
    if kind == "cut_stream":
        delta = {"id": "c", "object": "chat.completion.chunk", "model": MODEL,
                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": "half a rep"}}]}  # fmt: skip
        return ScriptedStream(events=[delta], done=False)
    if kind == "deep_event":
        return ScriptedStream(events=['{"choices":' + "[" * 3000 + "]" * 3000 + "}"])
    if kind == "not_json":
        return ScriptedError(status=200, body=f"<html>upstream proxy error, key {UPSTREAM_KEY}</html>")
    return ScriptedReply(text=REPLY)


@dataclass
class _Kind:
    sent: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    transport_errors: Counter[str] = field(default_factory=Counter)

    def report(self) -> dict[str, Any]:
        raw = self.statuses.get("500", 0) + sum(self.transport_errors.values())
        return {
            "sent": self.sent,
            "statuses": dict(sorted(self.statuses.items())),
            "transport_errors": dict(self.transport_errors),
            "raw_errors": raw,
        }


class _Soak:
    """The agents, their request budget and what they observed."""

    def __init__(
        self, proxy: str, config: HostileSoakConfig, pid: int, tag: str, upstream: ScriptedOpenAIServer
    ) -> None:
        self.proxy, self.config, self.pid, self.tag, self.upstream = proxy, config, pid, tag, upstream
        self.remaining = config.requests
        self.done = 0
        self.kinds: dict[str, _Kind] = {}
        self.acknowledged: list[tuple[str, str]] = []
        """(session id, user text) of every turn the service acknowledged."""
        self.leaks = 0
        self.cross_tenant_reads = 0
        self.samples: list[tuple[int, float]] = []
        self._next_sample = 0

    def _kind(self, name: str) -> _Kind:
        return self.kinds.setdefault(name, _Kind())

    async def _send(
        self,
        client: aiohttp.ClientSession,
        kind: str,
        body: bytes | None,
        headers: dict[str, str],
        path: str,
        *,
        method: str = "POST",
        tenant: str = "acme",
    ) -> tuple[int, bytes] | None:
        record = self._kind(kind)
        record.sent += 1
        headers = {"authorization": f"Bearer {TENANT_KEYS[tenant]}", **headers}
        try:
            async with client.request(method, f"{self.proxy}{path}", data=body, headers=headers) as response:
                data = await response.read()
                status = response.status
                shown = data + json.dumps(dict(response.headers)).encode()
        except (aiohttp.ClientError, TimeoutError) as exc:
            record.transport_errors[type(exc).__name__] += 1
            return None
        finally:
            self.done += 1
            self._sample()
        record.statuses[str(status)] += 1
        if any(secret.encode() in shown for secret in _SECRETS):
            self.leaks += 1
        if tenant != "acme" and _AGENT_TEXT in data:
            self.cross_tenant_reads += 1
        return status, data

    def _sample(self) -> None:
        if self.done >= self._next_sample:
            self.samples.append((self.done, rss_mb(self.pid)))
            self.upstream.received.clear()  # the upstream keeps every request it got: not this soak's memory
            self._next_sample += max(1, self.config.requests // self.config.samples)

    async def agent(self, client: aiohttp.ClientSession, number: int) -> None:
        rng = random.Random(self.config.seed * 100_003 + number)
        history: list[dict[str, Any]] = []
        session, sessions, turn = "", 0, 0
        while self.remaining > 0:
            self.remaining -= 1
            if rng.random() < self.config.hostile_share:
                await self._hostile(client, rng, number, session)
                continue
            if turn % self.config.turns_per_session == 0:
                session, sessions = f"{self.tag}-a{number}-s{sessions}", sessions + 1
                history = [{"role": "system", "content": "You are a coding agent."}]
            turn += 1
            text = f"agent {number} turn {turn}: the test printed 3 failures; line {turn % 97} is the first. Fix it."
            history.append({"role": "user", "content": text})
            stream = rng.random() < self.config.stream_share
            if await self._turn(client, "ordinary", session, history, stream=stream):
                self.acknowledged.append((session, text))
                history.append({"role": "assistant", "content": REPLY})
            else:  # a refused turn leaves the conversation behind: start a new one
                history.pop()
                turn = 0

    async def _turn(
        self,
        client: aiohttp.ClientSession,
        kind: str,
        session: str,
        history: list[dict[str, Any]],
        *,
        stream: bool,
    ) -> bool:
        """Send one turn; whether the service acknowledged it (200, and a stream that ended with [DONE])."""
        body: dict[str, Any] = {"model": MODEL, "messages": history}
        if stream:
            body["stream"] = True
        headers = {"content-type": "application/json", "x-session-id": session}
        answer = await self._send(client, kind, json.dumps(body).encode(), headers, "/v1/chat/completions")
        if answer is None or answer[0] != 200:
            return False
        return not stream or b"data: [DONE]" in answer[1]

    async def _hostile(self, client: aiohttp.ClientSession, rng: random.Random, number: int, agents: str) -> None:
        """One hostile request; ``agents`` is the session the agent is in (``""`` before its first)."""
        kind = rng.choice(HOSTILE_KINDS)
        session = f"{self.tag}-a{number}-h{rng.randrange(1 << 30)}"
        json_type = {"content-type": "application/json", "x-session-id": session}
        chat = "/v1/chat/completions"
        if kind == "hostile_upstream":
            upstream = rng.choice(UPSTREAM_KINDS)
            text = f"one question {_MARK}{upstream}]]"
            history = [{"role": "user", "content": text}]
            stream = upstream in ("cut_stream", "deep_event")
            if await self._turn(client, f"upstream:{upstream}", session, history, stream=stream):
                self.acknowledged.append((session, text))
            return
        if kind == "other_tenant":
            target = agents or session
            variant = rng.randrange(3)
            if variant == 0:  # its own new session: the agent's is another tenant's
                body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "mine now"}]}).encode()
                await self._send(client, kind, body, {**json_type, "x-session-id": target}, chat, tenant="globex")
            else:
                path = f"/v1/sessions/{target}" + ("/view" if variant == 2 else "")
                await self._send(client, kind, None, {}, path, method="GET", tenant="globex")
        elif kind == "bad_json":
            await self._send(client, kind, b'{"model": "soak-model", "messages": [{"role": "us', json_type, chat)
        elif kind == "deep_json":
            deep = '{"model":"soak-model","messages":[{"role":"user","content":' + "[" * 2000 + "]" * 2000 + "}]}"
            await self._send(client, kind, deep.encode(), json_type, chat)
        elif kind == "wrong_content_type":
            body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}]}).encode()
            await self._send(client, kind, body, {**json_type, "content-type": "text/plain"}, chat)
        elif kind == "huge_body":
            big = "y" * (self.config.max_body_bytes + 4096)
            body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": big}]}).encode()
            await self._send(client, kind, body, json_type, chat)
        else:
            body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}]}).encode()
            variant = rng.randrange(3)
            if variant == 0:
                await self._send(client, kind, body, {**json_type, "x-session-id": "s" * 300}, chat)
            elif variant == 1:
                await self._send(client, kind, body, {"content-type": "application/json"}, "/s/bad%00id" + chat)
            else:
                await self._send(client, kind, body, {"content-type": "application/json"}, "/s/a%E2%90%9Fb" + chat)

    async def run(self) -> float:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2.0)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:
            started = time.perf_counter()
            await asyncio.gather(*(self.agent(client, n) for n in range(self.config.concurrency)))
            return time.perf_counter() - started


def _lost(store_url: str, acknowledged: list[tuple[str, str]]) -> int:
    """Acknowledged turns the store does not hold (the user message followed by a reply)."""
    by_session: dict[str, list[str]] = {}
    for session, text in acknowledged:
        by_session.setdefault(session, []).append(text)
    lost = 0
    store = open_store(store_url)
    try:
        for session, texts in by_session.items():
            try:
                key = locate(store, "acme", session).session_id
                messages: list[Message] = store.load_messages(key, tenant="acme")
            except SessionNotFound:  # each of its turns is lost
                lost += len(texts)
                continue
            answered = {
                messages[i].text
                for i in range(len(messages) - 1)
                if messages[i].role == "user" and messages[i + 1].role == "assistant"
            }
            lost += sum(1 for text in texts if text not in answered)
    finally:
        store.close()
    return lost


def _soak_store(
    store: str, store_url: str, config: HostileSoakConfig, workdir: Path, upstream: ScriptedOpenAIServer
) -> dict[str, Any]:
    port = free_port()
    proxy = f"http://127.0.0.1:{port}"
    settings = workdir / f"hostile-{store}.toml"
    settings.write_text(
        f'[store]\nurl = "{store_url}"\n'
        f'[service]\nupstream_url = "{upstream.base_url}"\nport = {port}\n'
        'upstream_api_key_env = "CW_SOAK_UPSTREAM_KEY"\n'
        f"max_concurrent_per_tenant = 1000\nmax_cached_sessions = {max(2 * config.concurrency, 100)}\n"
        f"max_body_bytes = {config.max_body_bytes}\nmax_reply_bytes = {config.max_reply_bytes}\n"
        f'[models."{MODEL}"]\ncontext_length = 128000\nmax_output = 4000\n'
        + "".join(
            f'[[service.api_keys]]\ntenant = "{tenant}"\nkey_sha256 = "{hash_key(key)}"\n'
            for tenant, key in TENANT_KEYS.items()
        )
    )
    env = {
        **os.environ,
        "CONTEXTWARDEN_HOME": str(workdir / f"home-{store}"),
        "CW_SOAK_UPSTREAM_KEY": UPSTREAM_KEY,
    }
    log = workdir / f"hostile-{store}.log"
    args = [sys.executable, "-m", "contextwarden", "serve", "--config", str(settings), "--log-level", "info"]
    load_average = os.getloadavg()[0]
    with running_process(args, f"{proxy}/healthz", log, env) as process:
        soak = _Soak(proxy, config, process.pid, f"soak-{uuid.uuid4().hex[:8]}", upstream)
        seconds = asyncio.run(soak.run())
        soak.samples.append((soak.done, rss_mb(process.pid)))
    lines = log.read_text(errors="replace").splitlines()
    rss = [mb for _, mb in soak.samples]
    half = len(rss) // 2
    by_kind = {name: soak.kinds[name].report() for name in sorted(soak.kinds)}
    return {
        "requests": soak.done,
        "seconds": round(seconds, 1),
        "requests_per_s": round(soak.done / seconds, 1) if seconds else float("nan"),
        "by_kind": by_kind,
        "hostile_requests": sum(k["sent"] for name, k in by_kind.items() if name != "ordinary"),
        "raw_errors": sum(k["raw_errors"] for k in by_kind.values()),
        "unexpected_errors_logged": sum(1 for line in lines if "unexpected error" in line),
        "acknowledged": len(soak.acknowledged),
        "acknowledged_lost": _lost(store_url, soak.acknowledged),
        "cross_tenant_reads": soak.cross_tenant_reads,
        "credentials_leaked": {
            "responses": soak.leaks,
            "log_lines": sum(1 for line in lines if any(secret in line for secret in _SECRETS)),
        },
        "rss_mb": [[done, round(mb, 1)] for done, mb in soak.samples],
        "rss_growth_mb": round(rss[-1] - rss[0], 1),
        "rss_growth_second_half_mb": round(rss[-1] - rss[half], 1),
        "load_average_1m": round(load_average, 2),
    }


def run_hostile_soak(config: HostileSoakConfig, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run the soak on each store; the JSON-ready result."""
    stores: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="cw-bench-hostile-") as tmp,
        ScriptedOpenAIServer(default=_upstream_answer, model=MODEL) as upstream,
    ):
        workdir = config.workdir or Path(tmp)
        for store in config.stores:
            progress(f"hostile soak on {store}: {config.requests:,} requests, {config.concurrency} at once")
            upstream.received.clear()
            if store == "sqlite":
                stores[store] = _soak_store(store, f"sqlite:///{workdir / 'hostile.db'}", config, workdir, upstream)
            elif store == "redis":
                prefix = f"ckhostile-{uuid.uuid4().hex[:8]}"
                try:
                    url = f"{config.redis_url}?prefix={prefix}"
                    stores[store] = _soak_store(store, url, config, workdir, upstream)
                finally:
                    drop_redis_prefix(config.redis_url, prefix)
            else:
                raise ValueError(f"unknown store {store!r}; use sqlite or redis")
    return {
        "workload": {
            "requests": config.requests,
            "concurrency": config.concurrency,
            "hostile_share": config.hostile_share,
            "hostile_kinds": list(HOSTILE_KINDS),
            "upstream_kinds": list(UPSTREAM_KINDS),
            "turns_per_session": config.turns_per_session,
            "stream_share": config.stream_share,
            "max_body_bytes": config.max_body_bytes,
            "max_reply_bytes": config.max_reply_bytes,
        },
        "stores": stores,
    }

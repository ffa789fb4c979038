"""``contextwarden bench proxy``: the latency the proxy adds, its throughput, and a bounded soak.

Three real processes on loopback: a fake upstream that answers at once (`fake_upstream`, run by
uvicorn), the proxy (``contextwarden serve``) over the store under test, and this process as the
load generator (aiohttp, every body serialised before the clock starts). ``sessions``
conversations run at once; each joins with a history of its own length (spread from 2 to
``max_messages``) and takes ``turns`` turns, re-sending its whole history every time, as agents do.

* latency: every turn is sent twice with the same body, straight to the upstream and through the
  proxy; the added latency is the difference of each pair (median and 99th percentile). A
  conversation pauses ``think_ms`` between turns, as an agent waiting for its model does: with an
  upstream that answers at once and no pause, 50 conversations would only measure the queue of a
  saturated machine. A conversation's first request, which stores its whole history, is reported
  apart (``first_request_ms_p50``);
* throughput: the same conversations through the proxy alone, without pauses: requests per second;
* soak: ``soak`` more proxied requests without pauses (5,000 by default: 50 agents sending one
  request every 12 s for 20 minutes); the proxy's resident memory is sampled ten times (flat memory:
  the last sample against the first).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx

__all__ = [
    "ProxyBenchConfig",
    "drop_redis_prefix",
    "fake_upstream",
    "free_port",
    "rss_mb",
    "run_proxy_bench",
    "running_process",
]

MODEL = "bench-model"

_REPLY = (
    "Done: I read the file, the failing assertion compares the cached count with the fresh one; "
    "next I will patch the accountant and rerun the unit tests."
)


async def fake_upstream(scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Any) -> None:
    """A minimal OpenAI-compatible server (raw ASGI) that answers every completion at once."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    size = 0
    more = True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    path = scope["path"].rstrip("/")
    if path.endswith("/models"):
        body = b'{"object":"list","data":[]}'
    else:
        body = json.dumps(_upstream_reply(path, max(1, size // 4))).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _upstream_reply(path: str, prompt_tokens: int) -> dict[str, Any]:
    """The fake upstream's answer in the dialect of ``path``."""
    if path.endswith("/messages"):
        return {
            "id": "msg_bench",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [{"type": "text", "text": _REPLY}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": 30},
        }
    if path.endswith("/responses"):
        return {
            "id": "resp_bench",
            "object": "response",
            "created_at": 0,
            "status": "completed",
            "model": MODEL,
            "output": [
                {
                    "type": "message",
                    "id": "msg_bench",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": _REPLY, "annotations": []}],
                }
            ],
            "usage": {"input_tokens": prompt_tokens, "output_tokens": 30, "total_tokens": prompt_tokens + 30},
        }
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": _REPLY}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 30, "total_tokens": prompt_tokens + 30},
    }


DIALECTS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}
"""The proxy route each dialect is measured on."""


@dataclass(kw_only=True)
class ProxyBenchConfig:
    """What one `run_proxy_bench` measures."""

    stores: list[str] = field(default_factory=lambda: ["sqlite", "redis"])
    dialects: list[str] = field(default_factory=lambda: list(DIALECTS))
    """Wire dialects measured, each on its own route (see `DIALECTS`); the soak runs on the first."""
    redis_url: str = "redis://127.0.0.1:6379/0"
    sessions: int = 50
    max_messages: int = 200
    turns: int = 6
    """Turns each conversation takes after joining with its history (the first one stores that history)."""
    think_ms: float = 1000.0
    """Pause between a conversation's turns in the latency phase (an agent waits for its model)."""
    soak: int = 5_000
    runs: int = 3
    workdir: Path | None = None


def free_port() -> int:
    """A free TCP port on loopback."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"a bench server exited: {log.read_text()[-2000:]}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"a bench server did not answer at {url}")


@contextmanager
def running_process(args: list[str], url: str, log: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """The process of ``args`` (stderr to ``log``), once ``url`` answers; terminated on exit."""
    with log.open("wb") as err:
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        _wait(url, process, log)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def rss_mb(pid: int) -> float:
    """The resident memory of process ``pid`` in MB (Linux; NaN elsewhere)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _cpu_seconds(pid: int) -> float:
    """User and system CPU the process has used (Linux; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def _user_text(session: int, turn: int) -> str:
    return (
        f"Turn {turn} of agent {session}: the test run printed 3 failures in tests/test_accountant.py; "
        f"the first is AssertionError at line {40 + turn % 60}: expected {turn * 7} tokens, got {turn * 7 + 3}. "
        "Look at the cache key and fix it."
    )


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _history(index: int, length: int) -> list[dict[str, Any]]:
    """A conversation that already has ``length`` messages (system, then user and assistant turns)."""
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    turn = 0
    while len(history) + 2 <= length:
        history += [{"role": "user", "content": _user_text(index, turn)}, {"role": "assistant", "content": _REPLY}]
        turn += 1
    return history


class _Load:
    """Conversations that re-send their history, against the direct upstream and/or the proxy.

    Every request body is serialised before the clock starts and sent with aiohttp: the load
    generator shares the machine with the proxy, so the less CPU it spends per request, the less
    it takes from what is measured.
    """

    def __init__(self, upstream: str, proxy: str, config: ProxyBenchConfig, dialect: str = "chat") -> None:
        self.upstream, self.proxy, self.config = upstream, proxy, config
        self.route = DIALECTS[dialect]
        self.errors: Counter[str] = Counter()
        self.added: list[float] = []
        self.direct: list[float] = []
        self.proxied: list[float] = []
        self.first: list[float] = []
        self.sent = 0
        self.bodies = [_bodies(index, config, dialect) for index in range(config.sessions)]

    async def _post(self, client: aiohttp.ClientSession, url: str, body: bytes, session: str | None) -> float | None:
        headers = _HEADERS if session is None else {**_HEADERS, "x-session-id": session}
        started = time.perf_counter()
        try:
            async with client.post(url, data=body, headers=headers) as response:
                await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.errors[type(exc).__name__] += 1
            return None
        elapsed = time.perf_counter() - started
        if status != 200:
            self.errors[f"HTTP {status}"] += 1
            return None
        return elapsed

    async def conversation(self, client: aiohttp.ClientSession, index: int, *, paired: bool, think: float) -> None:
        """One agent joining with a history of its own length, then taking ``turns`` turns (up to ``max_messages``)."""
        session = f"bench-{uuid.uuid4().hex[:12]}"
        direct_url, proxy_url = f"{self.upstream}{self.route}", f"{self.proxy}{self.route}"
        if think:  # agents join over one pause, not all in the same millisecond
            await asyncio.sleep(think * index / self.config.sessions)
        for turn, body in enumerate(self.bodies[index]):
            direct = await self._post(client, direct_url, body, None) if paired else None
            proxied = await self._post(client, proxy_url, body, session)
            self.sent += 1
            if proxied is not None and turn == 0:
                self.first.append(proxied)  # stores the whole history: reported apart from the steady turns
            elif paired and direct is not None and proxied is not None:
                self.direct.append(direct)
                self.proxied.append(proxied)
                self.added.append(proxied - direct)
            if think:
                await asyncio.sleep(think)

    async def run(self, *, paired: bool, think: float = 0.0, rounds: int = 1) -> float:
        """``rounds`` times ``sessions`` concurrent conversations; the seconds it took."""
        # idle connections are dropped below uvicorn's 5 s keep-alive timeout: a reused connection is
        # never one the server is closing
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2.0)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(
            connector=connector, timeout=timeout, skip_auto_headers=("User-Agent",)
        ) as client:
            started = time.perf_counter()
            for _ in range(rounds):
                await asyncio.gather(
                    *(self.conversation(client, i, paired=paired, think=think) for i in range(self.config.sessions))
                )
            return time.perf_counter() - started


_HEADERS = {"content-type": "application/json"}


def _bodies(index: int, config: ProxyBenchConfig, dialect: str = "chat") -> list[bytes]:
    """The request bodies of conversation ``index``, one per turn: its whole history each time."""
    room = max(2, config.max_messages - 2 * config.turns)
    history = _history(index, 2 + (index * 7919) % room)  # lengths spread over the sessions
    bodies: list[bytes] = []
    for _ in range(config.turns):
        history.append({"role": "user", "content": _user_text(index, len(history))})
        bodies.append(json.dumps(_request(dialect, history)).encode())
        history.append({"role": "assistant", "content": _REPLY})
    return bodies


def _request(dialect: str, history: list[dict[str, Any]]) -> dict[str, Any]:
    """A request body of ``dialect`` carrying the chat ``history`` (system first)."""
    system, turns = history[0]["content"], history[1:]
    if dialect == "messages":
        return {"model": MODEL, "max_tokens": 1024, "system": system, "messages": turns}
    if dialect == "responses":
        kinds = {"user": "input_text", "assistant": "output_text"}
        items = [
            {"type": "message", "role": m["role"], "content": [{"type": kinds[m["role"]], "text": m["content"]}]}
            for m in turns
        ]
        return {"model": MODEL, "instructions": system, "input": items, "store": False}
    return {"model": MODEL, "messages": history}


def _measure_store(
    store: str, store_url: str, config: ProxyBenchConfig, workdir: Path, upstream: str
) -> dict[str, dict[str, Any]]:
    """One proxy process over ``store_url``; each dialect measured in turn on it (the soak on the first)."""
    port = free_port()
    proxy = f"http://127.0.0.1:{port}"
    settings = workdir / f"proxy-{store}.toml"
    settings.write_text(
        f'[store]\nurl = "{store_url}"\n'
        f'[service]\nupstream_url = "{upstream}/v1"\nport = {port}\nmax_concurrent_per_tenant = 1000\n'
        f"max_cached_sessions = {max(config.sessions * 2 * len(config.dialects), 100)}\n"
        f'[models."{MODEL}"]\ncontext_length = 128000\nmax_output = 4000\n'
    )
    env = {**os.environ, "CONTEXTWARDEN_HOME": str(workdir / f"home-{store}")}
    args = [sys.executable, "-m", "contextwarden", "serve", "--config", str(settings), "--log-level", "warning"]
    measured: dict[str, dict[str, Any]] = {}
    with running_process(args, f"{proxy}/healthz", workdir / f"proxy-{store}.log", env) as process:
        for number, dialect in enumerate(config.dialects):
            soak = config.soak if number == 0 else 0
            measured[dialect] = _measure_dialect(dialect, config, upstream, proxy, process.pid, soak)
    return measured


def _measure_dialect(
    dialect: str, config: ProxyBenchConfig, upstream: str, proxy: str, pid: int, soak_requests: int
) -> dict[str, Any]:
    load_average = os.getloadavg()[0]
    load = _Load(upstream, proxy, config, dialect)
    asyncio.run(load.run(paired=True, think=config.think_ms / 1000))
    throughput = _Load(upstream, proxy, config, dialect)
    cpu = _cpu_seconds(pid)
    seconds = asyncio.run(throughput.run(paired=False))
    cpu = _cpu_seconds(pid) - cpu
    soak: dict[str, Any] = {"requests": 0, "errors": 0}
    errors = load.errors + throughput.errors
    if soak_requests:
        soak_load = _Load(upstream, proxy, config, dialect)
        per_round = config.sessions * config.turns
        rounds = max(1, -(-soak_requests // per_round))
        parts = min(10, rounds)
        samples: list[float] = []
        for part in range(parts):
            share = rounds // parts + (1 if part < rounds % parts else 0)
            asyncio.run(soak_load.run(paired=False, rounds=share))
            samples.append(rss_mb(pid))
        half = len(samples) // 2
        soak = {
            "requests": soak_load.sent,
            "errors": sum(soak_load.errors.values()),
            "rss_mb": [round(s, 1) for s in samples],
            "rss_growth_mb": round(samples[-1] - samples[0], 1),
            "rss_growth_second_half_mb": round(samples[-1] - samples[half], 1),
        }
        errors += soak_load.errors
    return {
        "added_ms_p50": round(statistics.median(load.added) * 1000, 3) if load.added else float("nan"),
        "added_ms_p99": round(_percentile(load.added, 0.99) * 1000, 3),
        "requests_per_s": round(throughput.sent / seconds, 1),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "direct_ms_p50": round(statistics.median(load.direct) * 1000, 3) if load.direct else float("nan"),
        "proxy_ms_p50": round(statistics.median(load.proxied) * 1000, 3) if load.proxied else float("nan"),
        "proxy_ms_p99": round(_percentile(load.proxied, 0.99) * 1000, 3),
        "first_request_ms_p50": round(statistics.median(load.first) * 1000, 3) if load.first else float("nan"),
        "pairs": len(load.added),
        # CPU the proxy spent per request of the throughput phase (a conversation's first request,
        # which stores its history, included): it depends less than latency on what else runs
        "proxy_cpu_ms_per_request": round(cpu / throughput.sent * 1000, 3) if throughput.sent else float("nan"),
        "load_average_1m": round(load_average, 2),
        "soak": soak,
    }


def drop_redis_prefix(url: str, prefix: str) -> None:
    """Delete every key of the store namespace ``prefix`` on the Redis server at ``url``."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        for pattern in (f"{{{prefix}:*", f"{prefix}:*"):
            keys = list(client.scan_iter(match=pattern, count=1000))
            for start in range(0, len(keys), 1000):
                client.delete(*keys[start : start + 1000])
    finally:
        client.close()


def run_proxy_bench(config: ProxyBenchConfig, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run the benchmark; the JSON-ready result (``stores`` holds the median run, ``runs`` every run)."""
    with tempfile.TemporaryDirectory(prefix="cw-bench-proxy-") as tmp:
        workdir = config.workdir or Path(tmp)
        port = free_port()
        upstream = f"http://127.0.0.1:{port}"
        args = [
            sys.executable, "-m", "uvicorn", "contextwarden.service.bench:fake_upstream", "--host", "127.0.0.1",
            "--port", str(port), "--log-level", "warning", "--no-access-log",
        ]  # fmt: skip
        unknown = sorted(set(config.dialects) - set(DIALECTS))
        if unknown or not config.dialects:
            raise ValueError(f"dialects {unknown or config.dialects}: choose from {', '.join(DIALECTS)}")
        per_run: dict[str, list[dict[str, dict[str, Any]]]] = {store: [] for store in config.stores}
        with running_process(args, f"{upstream}/v1/models", workdir / "upstream.log", dict(os.environ)):
            for run in range(config.runs):
                for store in config.stores:
                    progress(f"run {run + 1}/{config.runs}: {store}")
                    if store == "sqlite":
                        url = f"sqlite:///{workdir / f'bench-{run}.db'}"
                        per_run[store].append(_measure_store(store, url, config, workdir, upstream))
                    elif store == "redis":
                        prefix = f"ckbench-{uuid.uuid4().hex[:8]}"
                        try:
                            url = f"{config.redis_url}?prefix={prefix}"
                            per_run[store].append(_measure_store(store, url, config, workdir, upstream))
                        finally:
                            drop_redis_prefix(config.redis_url, prefix)
                    else:
                        raise ValueError(f"unknown store {store!r}; use sqlite or redis")
    result: dict[str, Any] = {
        "workload": {
            "sessions": config.sessions,
            "max_messages": config.max_messages,
            "turns": config.turns,
            "think_ms": config.think_ms,
            "soak_requests": config.soak,
            "runs": config.runs,
            "dialects": list(config.dialects),
        },
        "stores": {},
        "runs": {},
    }
    for store, store_runs in per_run.items():
        result["stores"][store] = {}
        result["runs"][store] = {}
        for dialect in config.dialects:
            measured = [run[dialect] for run in store_runs]
            result["runs"][store][dialect] = measured
            result["stores"][store][dialect] = _summary(measured)
    return result


def _summary(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run's figures (by added p50), the error count and each figure's range over the runs."""
    middle = sorted(measured, key=lambda r: r["added_ms_p50"])[len(measured) // 2]
    summary = {k: middle[k] for k in ("added_ms_p50", "added_ms_p99", "requests_per_s")}
    summary["errors"] = sum(r["errors"] for r in measured)
    summary["ranges"] = {
        key: [min(r[key] for r in measured), max(r[key] for r in measured)]
        for key in (
            "added_ms_p50",
            "added_ms_p99",
            "requests_per_s",
            "direct_ms_p50",
            "proxy_ms_p50",
            "proxy_cpu_ms_per_request",
            "load_average_1m",
        )
    }
    return summary

"""Fixtures of the service tests: the scripted upstream, a real uvicorn server in a thread, an HTTP client.

Every test talks HTTP to a real server on a free loopback port: the service (uvicorn, in a thread
of the test process) in front of `ScriptedOpenAIServer` (the upstream), over a real store.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from _services import POSTGRES_URL, REDIS_URL, unavailable
from contextwarden.service import create_app
from contextwarden.settings import Settings
from contextwarden.testing import ScriptedOpenAIServer

MODEL = "scripted-model"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def make_settings(store_url: str, upstream: str, *, window: int = 4000, **service: Any) -> Settings:
    """Settings for a test service: the scripted model with a small window, no summarizer LLM."""
    return Settings(
        store={"url": store_url},
        models={MODEL: {"context_length": window, "max_output": 200}},
        service={"upstream_url": upstream, "upstream_api_key_env": "CW_TEST_UPSTREAM_KEY", **service},
    )


class Running:
    """A service running in a thread: its base URL and a client."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, port: int) -> None:
        self.server, self.thread, self.port = server, thread, port
        self.url = f"http://127.0.0.1:{port}"
        self.client = httpx.Client(base_url=self.url, timeout=30)

    @property
    def app(self) -> Any:
        return self.server.config.app

    def stop(self) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(timeout=15)


def start_service(settings: Settings, **app_options: Any) -> Running:
    """The service of ``settings`` on a free port (``app_options`` go to `create_app`, e.g. ``store=``)."""
    app = create_app(settings, **app_options)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the service did not start")
        time.sleep(0.02)
    return Running(server, thread, port)


@pytest.fixture
def upstream() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(default="ok", model=MODEL) as server:
        yield server


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sessions.db'}"


@pytest.fixture
def service_factory() -> Iterator[Callable[[Settings], Running]]:
    running: list[Running] = []

    def start(settings: Settings) -> Running:
        service = start_service(settings)
        running.append(service)
        return service

    yield start
    for service in running:
        service.stop()


@pytest.fixture
def service(service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, sqlite_url: str) -> Running:
    return service_factory(make_settings(sqlite_url, upstream.base_url))


def chat(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": list(messages), **extra}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


SYSTEM = {"role": "system", "content": "You are a careful agent."}


@pytest.fixture
def redis_store_url() -> Iterator[str]:
    """A Redis store URL with a key prefix of its own (removed afterwards); skips, or fails in CI, without Redis."""
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        message = (
            f"Redis at {REDIS_URL} is not reachable ({exc}); start it, or point CONTEXTWARDEN_TEST_REDIS_URL at one. "
            "Set CONTEXTWARDEN_REQUIRE_SERVICES=1 to make this a failure."
        )
        client.close()
        unavailable(message)
    prefix = f"ckt-{uuid.uuid4().hex[:12]}"
    yield f"{REDIS_URL}?prefix={prefix}"
    try:
        for pattern in (f"{{{prefix}:*", f"{prefix}:*"):
            keys = list(client.scan_iter(match=pattern, count=1000))
            if keys:
                client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def postgres_store_url() -> Iterator[str]:
    """A Postgres store URL with a schema of its own (dropped afterwards); skips, or fails in CI, without Postgres."""
    import psycopg

    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        message = (
            f"Postgres at {POSTGRES_URL} is not reachable ({exc}); start it, or point "
            "CONTEXTWARDEN_TEST_POSTGRES_URL at one. Set CONTEXTWARDEN_REQUIRE_SERVICES=1 to make this a failure."
        )
        unavailable(message)
    schema = f"ckt_{uuid.uuid4().hex[:12]}"
    yield f"{POSTGRES_URL}?schema={schema}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

"""On a Redis store a proxied request costs one round trip to the session's keys: its messages and the
reply are written in one conditional append after the reply (counted with MONITOR on the real server)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from contextwarden.settings import Settings
from contextwarden.stores import open_store
from contextwarden.testing import ScriptedOpenAIServer

from .conftest import SYSTEM, Running, assistant, chat, make_settings, user

pytestmark = pytest.mark.services


@contextmanager
def commands(url: str, prefix: str) -> Iterator[list[str]]:
    """The commands clients send that name the store's keys (``prefix``), as MONITOR sees them."""
    seen: list[str] = []
    client = redis.Redis.from_url(url.split("?")[0])
    ready, done = threading.Event(), threading.Event()

    def watch() -> None:
        with client.monitor() as monitor:
            ready.set()
            for command in monitor.listen():
                if done.is_set():
                    return
                # calls made inside a script are the script's own work, not round trips
                if command.get("client_address") != "lua" and prefix in command["command"]:
                    seen.append(command["command"])

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    ready.wait(5)
    try:
        yield seen
    finally:
        time.sleep(0.3)  # MONITOR's feed trails the commands a little
        done.set()
        client.set(f"{prefix}:monitor-stop", 1, px=100)  # wakes the listener so it sees `done`
        thread.join(5)
        client.close()


def _session_commands(seen: list[str], prefix: str) -> list[str]:
    """Commands on the session's keys (``{prefix:<id>}:...``); the event log (``prefix:ev:...``) is apart."""
    return [c for c in seen if "{" + prefix + ":" in c]


@pytest.fixture
def redis_service(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, redis_store_url: str
) -> Running:
    return service_factory(make_settings(redis_store_url, upstream.base_url, window=100_000))


def _turns(service: Running, session_id: str, count: int, **extra: Any) -> list[dict[str, Any]]:
    history = [SYSTEM, user("first")]
    for i in range(count):
        r = service.client.post(
            "/v1/chat/completions", json=chat(*history, **extra), headers={"X-Session-Id": session_id}
        )
        assert r.status_code == 200, r.text
        history += [assistant(r.json()["choices"][0]["message"]["content"]), user(f"next {i}")]
    return history


def test_a_request_on_a_known_session_is_one_round_trip(redis_service: Running, redis_store_url: str) -> None:
    prefix = redis_store_url.split("prefix=")[1]
    history = _turns(redis_service, "rt", 2)  # the session is open in this process
    with commands(redis_store_url, prefix) as seen:
        for i in range(5):
            r = redis_service.client.post("/v1/chat/completions", json=chat(*history), headers={"X-Session-Id": "rt"})
            assert r.status_code == 200, r.text
            history += [assistant("ok"), user(f"more {i}")]
    session = _session_commands(seen, prefix)
    assert len(session) == 5, session
    assert all(c.upper().startswith("EVALSHA") for c in session)
    # everything else is the event publisher's: it sends the status events off the request's path, in
    # its own time (events of the turns before the measured ones may land among them)
    others = [c for c in seen if c not in session]
    assert all(f"{prefix}:ev:" in c for c in others), others
    with open_store(redis_store_url) as store:
        texts = [m.text for m in store.load_messages("rt", tenant="default")]
    assert texts[-2:] == ["more 3", "ok"] and texts.count("ok") == 7


def test_a_failed_upstream_call_writes_nothing_and_the_retry_stores_the_turn_once(
    redis_service: Running, upstream: ScriptedOpenAIServer, redis_store_url: str
) -> None:
    from contextwarden.testing import ScriptedError

    history = _turns(redis_service, "fail", 1)
    upstream.push(ScriptedError.server_error(500))
    r = redis_service.client.post("/v1/chat/completions", json=chat(*history), headers={"X-Session-Id": "fail"})
    assert r.status_code == 500
    with open_store(redis_store_url) as store:
        assert [m.text for m in store.load_messages("fail", tenant="default")][-1] == "ok"  # nothing of it written
    r = redis_service.client.post("/v1/chat/completions", json=chat(*history), headers={"X-Session-Id": "fail"})
    assert r.status_code == 200
    with open_store(redis_store_url) as store:
        texts = [m.text for m in store.load_messages("fail", tenant="default")]
    assert texts[1:] == ["first", "ok", "next 0", "ok"]


def test_another_replica_wrote_meanwhile_the_turn_is_appended_to_what_it_wrote(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, redis_store_url: str
) -> None:
    settings = make_settings(redis_store_url, upstream.base_url, window=100_000)
    first, second = service_factory(settings), service_factory(settings)
    history = [SYSTEM, user("one")]
    for service, question in ((first, "two"), (second, "three"), (first, "four")):
        r = service.client.post("/v1/chat/completions", json=chat(*history), headers={"X-Session-Id": "two"})
        assert r.status_code == 200 and r.headers["x-session-id"] == "two"
        history += [assistant("ok"), user(question)]
    with open_store(redis_store_url) as store:
        texts = [m.text for m in store.load_messages("two", tenant="default")]
    assert texts == ["You are a careful agent.", "one", "ok", "two", "ok", "three", "ok"]

"""Two real service processes over one Redis store serve one session alternately; events cross over."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextwarden.stores import open_store
from contextwarden.testing import ScriptedOpenAIServer

from ._serving import wait_ready
from .conftest import MODEL, SYSTEM, chat, free_port, user
from .sse import SSEReader

pytestmark = pytest.mark.services


def _replica(tmp_path: Path, name: str, store_url: str, upstream: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    config = tmp_path / f"{name}.toml"
    config.write_text(
        f'[store]\nurl = "{store_url}"\n[service]\nupstream_url = "{upstream}"\nport = {port}\n'
        f'keepalive_seconds = 1.0\n[models."{MODEL}"]\ncontext_length = 4000\nmax_output = 200\n'
    )
    log = tmp_path / f"{name}.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "contextwarden", "serve", "--config", str(config), "--log-level", "warning"],
            env={**os.environ, "CONTEXTWARDEN_HOME": str(tmp_path / name)},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    return process, f"http://127.0.0.1:{port}", log


@pytest.fixture
def replicas(tmp_path: Path, redis_store_url: str, upstream: ScriptedOpenAIServer) -> Iterator[list[str]]:
    started = [_replica(tmp_path, name, redis_store_url, upstream.base_url) for name in ("a", "b")]
    try:
        for process, url, log in started:
            wait_ready(url, process, log)
        yield [url for _, url, _ in started]
    finally:
        for process, _, _ in started:
            process.terminate()
        for process, _, _ in started:
            process.wait(timeout=15)


def test_two_replicas_serve_one_session_alternately_and_share_its_events(
    replicas: list[str], upstream: ScriptedOpenAIServer, redis_store_url: str
) -> None:
    import httpx

    a, b = replicas
    headers = {"X-Session-Id": "shared"}
    history = [SYSTEM]
    turns = 6
    with httpx.Client(timeout=20) as client:
        for turn in range(turns):
            history.append(user(f"turn {turn}: " + "context " * 40))
            replica = (a, b)[turn % 2]
            r = client.post(f"{replica}/v1/chat/completions", json=chat(*history), headers=headers)
            assert r.status_code == 200, r.text
            history.append(r.json()["choices"][0]["message"])
            if turn == 0:
                reader = SSEReader(f"{b}/v1/sessions/shared/events")
                reader.wait_for(lambda r: r.status == 200)
                reader.wait_for(lambda r: any(f.get("data") is not None or "comment" in f for f in r.frames))
        try:
            seen = len(reader.events("context.status"))
            # a request served by replica A reaches the SSE client of replica B through Redis pub/sub
            history.append(user("last turn, on A"))
            r = client.post(f"{a}/v1/chat/completions", json=chat(*history), headers=headers)
            assert r.status_code == 200
            history.append(r.json()["choices"][0]["message"])
            reader.wait_for(lambda r: len(r.events("context.status")) > seen)
            ids = [int(f["id"]) for f in reader.events()]
            assert ids == sorted(ids) and len(ids) == len(set(ids))
        finally:
            reader.close()
        listed_a = client.get(f"{a}/v1/sessions").json()["data"]
        listed_b = client.get(f"{b}/v1/sessions").json()["data"]
        assert [s["message_count"] for s in listed_a] == [s["message_count"] for s in listed_b] == [len(history)]
    # nothing lost, nothing doubled: the stored transcript is the conversation, in order
    with open_store(redis_store_url) as store:
        transcript = store.load_messages("shared", tenant="default")
    assert [(m.role, m.text) for m in transcript] == [(m["role"], m["content"]) for m in history]
    # every upstream request after the first carried the turns served by the other replica
    assert [m["content"] for m in upstream.requests[-1]["messages"]][-1] == "last turn, on A"

"""The proxy in front of the real server, driven by the OpenAI SDK, window configured at 4× the served one."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from contextwarden.service import create_app
from contextwarden.settings import Settings

from .conftest import N_CTX, full_size_only, note, record, turns

pytestmark = pytest.mark.llama_server

TURNS = turns(40)
REPLY_TOKENS = 48


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize("stream", [pytest.param(False, marks=full_size_only), True], ids=["plain", "streamed"])
def test_the_proxy_keeps_a_growing_conversation_inside_the_served_window(
    llama_server: str, stream: bool, tmp_path: Path
) -> None:
    from openai import OpenAI

    started = time.monotonic()
    settings = Settings(
        store={"url": f"sqlite:///{tmp_path / 'sessions.db'}"},
        models={"smollm2": {"context_length": 4 * N_CTX, "max_output": REPLY_TOKENS}},
        service={"upstream_url": llama_server, "upstream_api_key_env": None},
    )
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=300)
    history: list[dict[str, str]] = [{"role": "system", "content": "You are a terse assistant."}]
    ok, failures = 0, []
    try:
        for turn in range(TURNS):
            history.append({"role": "user", "content": note(turn)})
            try:
                if stream:
                    chunks = client.chat.completions.create(
                        model="smollm2",
                        messages=history,  # type: ignore[arg-type]
                        stream=True,
                        max_tokens=REPLY_TOKENS,
                        extra_headers={"x-session-id": f"real-{stream}"},
                    )
                    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                else:
                    reply = client.chat.completions.create(
                        model="smollm2",
                        messages=history,  # type: ignore[arg-type]
                        max_tokens=REPLY_TOKENS,
                        extra_headers={"x-session-id": f"real-{stream}"},
                    )
                    text = reply.choices[0].message.content or ""
                history.append({"role": "assistant", "content": text})
                ok += 1
            except Exception as exc:
                history.append({"role": "assistant", "content": "(no reply)"})
                failures.append(f"turn {turn}: {type(exc).__name__}: {exc}"[:300])
    finally:
        client.close()
        server.should_exit = True
        thread.join(timeout=15)
    record(
        f"proxy.{'streamed' if stream else 'plain'}",
        ok,
        TURNS,
        seconds=time.monotonic() - started,
        window=4 * N_CTX,
        failures=failures[:3],
    )
    assert ok == TURNS, failures[:3]

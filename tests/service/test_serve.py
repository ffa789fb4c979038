"""`contextwarden serve` as a real process: embedded defaults, a config file, the key helper."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from contextwarden.testing import ScriptedOpenAIServer

from ._serving import wait_ready
from .conftest import MODEL, free_port


def test_serve_runs_on_embedded_defaults_and_a_config_file(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "contextwarden.toml"
    with ScriptedOpenAIServer(default="from upstream", model=MODEL) as upstream:
        config.write_text(
            f'[service]\nupstream_url = "{upstream.base_url}"\nport = {port}\n'
            f'[models."{MODEL}"]\ncontext_length = 8000\n'
        )
        env = {**os.environ, "CONTEXTWARDEN_HOME": str(tmp_path / "home")}
        log = tmp_path / "serve.log"
        with log.open("wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "contextwarden", "serve", "--config", str(config), "--log-level", "warning"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, process, log)
            r = httpx.post(
                f"{url}/v1/chat/completions",
                json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
                headers={"X-Session-Id": "cli"},
                timeout=10,
            )
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "from upstream"
            # the embedded default store: SQLite in the user directory
            assert (tmp_path / "home" / "sessions.db").exists()
        finally:
            process.terminate()
            process.wait(timeout=15)


def test_hash_key_prints_the_sha256_for_the_config() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "contextwarden", "serve", "--hash-key", "sk-test"], capture_output=True, check=True
    )
    assert out.stdout.decode().strip() == hashlib.sha256(b"sk-test").hexdigest()


def test_serve_prints_the_dashboard_url_and_the_window_the_upstream_serves(tmp_path: Path) -> None:
    props = {"default_generation_settings": {"n_ctx": 8192}, "model_path": "/m/small.gguf", "total_slots": 1}
    with ScriptedOpenAIServer(default="ok", model=MODEL, routes={"GET /props": props}) as upstream:
        env = {**os.environ, "CONTEXTWARDEN_HOME": str(tmp_path / "home")}
        argv = [sys.executable, "-m", "contextwarden", "serve", "--port", "0", "--upstream", upstream.base_url]
        process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            assert process.stdout is not None
            window = process.stdout.readline().decode()
            banner = process.stdout.readline().decode()
            assert window.startswith("contextwarden: window 8,192 tokens, as llama.cpp serves it (GET /props)")
            url = banner.split("dashboard ", 1)[1].split()[0]
            assert url.startswith("http://127.0.0.1:") and not url.startswith("http://127.0.0.1:0/")
            assert f"clients use {url}v1" in banner
            wait_ready(url.rstrip("/"), process, tmp_path / "none.log")
            assert httpx.get(url, timeout=5).status_code == 200
        finally:
            process.terminate()
            process.wait(timeout=15)
            assert process.stdout is not None
            process.stdout.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("scheme", ["postgresql", "redis"])
def test_serve_refuses_to_start_on_a_store_it_cannot_reach(tmp_path: Path, scheme: str) -> None:
    port = _closed_port()
    store = (
        f"{scheme}://cw:hunter2@127.0.0.1:{port}/0"
        if scheme == "redis"
        else f"{scheme}://cw:hunter2@127.0.0.1:{port}/test"
    )
    env = {**os.environ, "CONTEXTWARDEN_HOME": str(tmp_path / "home")}
    argv = [sys.executable, "-m", "contextwarden", "serve", "--port", "0", "--no-detect-window", "--store", store]
    out = subprocess.run(argv, env=env, capture_output=True, timeout=60)
    assert out.returncode != 0
    lines = out.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines  # one line, no traceback
    line = lines[0]
    assert line.startswith("error: ") and f"127.0.0.1:{port}" in line and "hunter2" not in line
    assert "fix: " in line and "--store" in line and "--no-store-check" in line
    assert b"dashboard" not in out.stdout  # it never listened


def test_serve_starts_on_an_unreachable_store_when_told_to(tmp_path: Path) -> None:
    store = f"postgresql://cw@127.0.0.1:{_closed_port()}/test"
    with ScriptedOpenAIServer(default="ok", model=MODEL) as upstream:
        env = {**os.environ, "CONTEXTWARDEN_HOME": str(tmp_path / "home")}
        argv = [sys.executable, "-m", "contextwarden", "serve", "--port", "0", "--no-detect-window"]
        argv += ["--upstream", upstream.base_url, "--store", store, "--no-store-check"]
        process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            assert process.stdout is not None
            banner = process.stdout.readline().decode()
            url = banner.split("dashboard ", 1)[1].split()[0].rstrip("/")
            wait_ready(url, process, tmp_path / "none.log")
            assert httpx.get(f"{url}/readyz", timeout=30).status_code == 503  # the store is still down
        finally:
            process.terminate()
            process.wait(timeout=15)
            assert process.stdout is not None
            process.stdout.close()

"""``contextwarden doctor`` against real local servers: a llama.cpp-like upstream, nothing, a down Redis."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from typer.testing import CliRunner

from contextwarden.cli import app
from contextwarden.testing import ScriptedOpenAIServer

PROPS = {"default_generation_settings": {"n_ctx": 8192}, "model_path": "/models/small.gguf", "total_slots": 1}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _doctor(runner: CliRunner, *args: str) -> tuple[int, dict[str, object]]:
    result = runner.invoke(app, ["doctor", "--json", *args])
    return result.exit_code, json.loads(result.stdout)


def test_a_healthy_setup_reports_the_served_window(runner: CliRunner, tmp_path: Path) -> None:
    with ScriptedOpenAIServer([], routes={"GET /props": PROPS}) as server:
        code, report = _doctor(runner, "--upstream", server.base_url, "--store", f"sqlite:///{tmp_path / 's.db'}")
    assert code == 0, report
    checks = {c["name"]: c for c in report["checks"]}  # type: ignore[attr-defined]
    assert [c["outcome"] for c in checks.values()] == ["ok", "ok", "ok", "ok"]
    assert "llama.cpp serves 8,192 tokens" in checks["window"]["detail"]


def test_a_window_larger_than_served_fails_with_its_fix(runner: CliRunner, tmp_path: Path) -> None:
    config = tmp_path / "cw.toml"
    config.write_text("[agent_context]\nmax_context_tokens = 32000\n")
    with ScriptedOpenAIServer([], routes={"GET /props": PROPS}) as server:
        result = runner.invoke(app, ["doctor", "-c", str(config), "--upstream", server.base_url])
    assert result.exit_code == 1
    assert "fail  window    configured window 32,000 tokens, but llama.cpp serves 8,192" in result.stdout
    assert "fix: set `[agent_context] max_context_tokens = 8192`" in result.stdout


def test_an_unreachable_upstream_and_store_each_print_a_fix(runner: CliRunner) -> None:
    port = _closed_port()
    code, report = _doctor(
        runner, "--upstream", f"http://127.0.0.1:{port}/v1", "--store", f"redis://127.0.0.1:{port}/0"
    )
    assert code == 1 and report["ok"] is False
    failed = {c["name"]: c for c in report["checks"] if c["outcome"] == "fail"}  # type: ignore[attr-defined]
    assert set(failed) == {"upstream", "store"}
    assert all(c["fix"] for c in failed.values())
    assert "cannot be reached" in failed["upstream"]["detail"]


def test_a_bad_setting_fails_the_config_check(runner: CliRunner, tmp_path: Path) -> None:
    code, report = _doctor(runner, "--store", "nosuch://x")
    assert code == 1
    assert report["checks"][0]["name"] == "config" and report["checks"][0]["outcome"] == "fail"  # type: ignore[index]

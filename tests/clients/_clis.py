"""The four agent command lines: where they are installed and how each runs headless against a base URL.

They are installed from npm, at pinned versions that run on Node 20, into a cache directory outside
the repository (``CONTEXTWARDEN_CLIENTS_DIR``, default ``~/.cache/contextwarden-clients``). Each run
gets its own home directory, so no user configuration leaks in, with telemetry, update checks and
every other background call switched off: the only network they reach is the base URL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PACKAGES: Mapping[str, str] = {
    "claude": "@anthropic-ai/claude-code@2.1.197",
    "codex": "@openai/codex@0.171.0",
    "opencode": "opencode-ai@1.18.33",
    "qwen": "@qwen-code/qwen-code@0.15.10",
}
"""Pinned versions: the newest releases of Claude Code and qwen-code need Node 22."""

DIALECT: Mapping[str, str] = {"claude": "messages", "codex": "responses", "opencode": "chat", "qwen": "chat"}

QWEN_WINDOW = 36_000
"""The window qwen-code is told its model has: it compresses its own history past 70% of it."""

CACHE = Path(os.environ.get("CONTEXTWARDEN_CLIENTS_DIR", Path.home() / ".cache" / "contextwarden-clients"))

PROMPT = (
    "Work through the scratch repository in this directory one tool call at a time, as the tools you are given "
    "lead you, until you say that all steps are done."
)


def install() -> Path:
    """Install the pinned CLIs into `CACHE` (once; later calls reuse it). Raises when npm fails."""
    marker = CACHE / "installed.json"
    wanted = json.dumps(dict(PACKAGES), sort_keys=True)
    bin_dir = CACHE / "node_modules" / ".bin"
    if marker.exists() and marker.read_text() == wanted and all((bin_dir / n).exists() for n in PACKAGES):
        return bin_dir
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not on PATH: install Node.js 20 or newer to run the client tests.")
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / "package.json").write_text('{"name": "contextwarden-clients", "private": true}\n')
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", *PACKAGES.values()],
        cwd=CACHE,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"npm install of {', '.join(PACKAGES.values())} failed: {done.stderr[-2000:]}")
    marker.write_text(wanted)
    return CACHE / "node_modules" / ".bin"


@dataclass(frozen=True)
class Invocation:
    """A command line, its environment and directory."""

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path


def _base_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    keep = {k: os.environ[k] for k in ("PATH", "LANG", "TERM") if k in os.environ}
    return {
        **keep,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        # opencode keeps the provider packages it installs here: shared between runs
        "XDG_CACHE_HOME": str(CACHE / "xdg-cache"),
        "NO_COLOR": "1",
        "CI": "1",
    }


def invocation(
    name: str, bin_dir: Path, base_url: str, repo: Path, home: Path, *, qwen_window: int = QWEN_WINDOW
) -> Invocation:
    """How to run CLI ``name`` headless in ``repo`` against ``base_url`` (an API root without ``/v1``);
    qwen-code is told its model's window is ``qwen_window``."""
    env = _base_env(home)
    if name == "claude":
        env |= {
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": "sk-ant-dummy",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "IS_SANDBOX": "1",  # lets --dangerously-skip-permissions run as root in a container
            "DISABLE_AUTO_COMPACT": "1",  # the proxy keeps the history (docs/guides/clients.md)
        }
        argv = [
            str(bin_dir / "claude"),
            "-p",
            PROMPT,
            "--model",
            "claude-sonnet-4-5",
            "--dangerously-skip-permissions",
            "--max-turns",
            "200",
        ]
        return Invocation(argv, env, repo)
    if name == "codex":
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(
            "\n".join(
                [
                    'model = "scripted-agent"',
                    'model_provider = "scripted"',
                    "check_for_update_on_startup = false",
                    "model_auto_compact_token_limit = 1000000000",  # the proxy keeps the history
                    "[analytics]",
                    "enabled = false",
                    "[model_providers.scripted]",
                    'name = "scripted"',
                    f'base_url = "{base_url}/v1"',
                    'wire_api = "responses"',
                    'env_key = "SCRIPTED_API_KEY"',
                    "",
                ]
            )
        )
        env |= {"CODEX_HOME": str(codex_home), "SCRIPTED_API_KEY": "dummy"}
        argv = [
            str(bin_dir / "codex"),
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            PROMPT,
        ]
        return Invocation(argv, env, repo)
    if name == "opencode":
        config = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                "scripted": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Scripted",
                    "options": {"baseURL": f"{base_url}/v1", "apiKey": "dummy"},
                    "models": {"scripted-agent": {"name": "Scripted agent"}},
                }
            },
            "model": "scripted/scripted-agent",
            "small_model": "scripted/scripted-agent",
            "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
            "autoupdate": False,
            "share": "disabled",
        }
        path = home / "opencode.json"
        path.write_text(json.dumps(config))
        env |= {
            "OPENCODE_CONFIG": str(path),
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
            "OPENCODE_DISABLE_AUTOCOMPACT": "1",  # the proxy keeps the history
        }
        argv = [str(bin_dir / "opencode"), "run", "--model", "scripted/scripted-agent", PROMPT]
        return Invocation(argv, env, repo)
    if name == "qwen":
        settings = home / ".qwen"
        settings.mkdir(parents=True, exist_ok=True)
        (settings / "settings.json").write_text(
            json.dumps(
                {
                    "usageStatisticsEnabled": False,
                    "disableAutoUpdate": True,
                    "telemetry": {"enabled": False},
                    "selectedAuthType": "openai",
                    # a window small enough that qwen compresses its own history during the run
                    "model": {"generationConfig": {"contextWindowSize": qwen_window}},
                }
            )
        )
        env |= {"OPENAI_BASE_URL": f"{base_url}/v1", "OPENAI_API_KEY": "dummy", "OPENAI_MODEL": "scripted-agent"}
        argv = [str(bin_dir / "qwen"), "-p", PROMPT, "--yolo", "--max-session-turns", "200"]
        return Invocation(argv, env, repo)
    raise ValueError(f"unknown client {name!r}: choose from {', '.join(PACKAGES)}")


def run(call: Invocation, *, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``call`` to its end (raises `subprocess.TimeoutExpired` after ``timeout`` seconds)."""
    return subprocess.run(
        list(call.argv),
        env=dict(call.env),
        cwd=call.cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )

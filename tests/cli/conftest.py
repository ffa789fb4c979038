"""CLI test fixtures: a private user directory, a clean environment, sample transcripts."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from contextwarden.demo import generate_session


@pytest.fixture(autouse=True)
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Redirect the user directory to tmp_path and run in it, with no CONTEXTWARDEN_* settings leaking in."""
    for key in list(os.environ):
        if key.startswith("CONTEXTWARDEN_") and key != "CONTEXTWARDEN_REQUIRE_SERVICES":
            monkeypatch.delenv(key)
    home = tmp_path / "home"
    monkeypatch.setenv("CONTEXTWARDEN_HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    yield home


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture(scope="session")
def chat_messages() -> list[dict[str, Any]]:
    """A 60-turn generated coding-agent transcript as OpenAI chat messages (~60k tokens)."""
    demo = generate_session(seed=3, turns=60)
    return [demo.system] + [m for turn in demo.turns for m in turn]


@pytest.fixture
def chat_file(tmp_path: Path, chat_messages: list[dict[str, Any]]) -> Path:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(chat_messages), encoding="utf-8")
    return path

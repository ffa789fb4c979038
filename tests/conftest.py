"""Suite-wide test settings: no paid model requests, asyncio for anyio tests, a private user dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import contextkeeper.llm

# No test may reach a paid API; local test servers stay reachable.
contextkeeper.llm.ALLOW_MODEL_REQUESTS = False


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _private_user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Settings and the CLI read CONTEXTKEEPER_HOME; tests never touch the real user directory."""
    monkeypatch.setenv("CONTEXTKEEPER_HOME", str(tmp_path / "ck-home"))
    yield

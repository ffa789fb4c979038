"""Suite-wide test settings: no paid model requests, asyncio for anyio tests, a private user dir."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

import contextwarden.llm

# CI runs a fixed sequence of examples (.ci/run sets HYPOTHESIS_PROFILE=ci) so that a landing is
# judged on the same inputs every time; local runs keep exploring new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# No test may reach a paid API; local test servers stay reachable.
contextwarden.llm.ALLOW_MODEL_REQUESTS = False


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _private_user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Settings and the CLI read CONTEXTWARDEN_HOME; tests never touch the real user directory."""
    monkeypatch.setenv("CONTEXTWARDEN_HOME", str(tmp_path / "cw-home"))
    yield

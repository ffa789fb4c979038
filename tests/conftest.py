"""Suite-wide test settings: no paid model requests, asyncio for anyio tests, a private user dir."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

import contextwarden.llm

# Every run of the suite (`make test`, CI) tries the same examples, so a correct tree passes every
# time; derandomize also means no example database. `make fuzz` (HYPOTHESIS_PROFILE=fuzz) explores
# with random seeds and a larger budget, and keeps what it finds in .hypothesis/ to replay first;
# each failure it finds becomes a fixed @example or regression test in the suite.
settings.register_profile("deterministic", derandomize=True, print_blob=True)
settings.register_profile("ci", settings.get_profile("deterministic"))
settings.register_profile("fuzz", derandomize=False, print_blob=True, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

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

"""Fixtures for the memory tests: one long-term memory per backend (in process, SQLite file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _memory_helpers import Clock

from contextkeeper.memory import InMemoryBackend, MemoryBackend, SQLiteMemoryBackend


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryBackend]:
    made: MemoryBackend = InMemoryBackend() if request.param == "memory" else SQLiteMemoryBackend(tmp_path / "m.db")
    yield made
    made.close()

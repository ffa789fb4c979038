"""Memory backends: in this process, SQLite (FTS5), and the `MemoryBackend` contract."""

from __future__ import annotations

from .base import MemoryBackend
from .memory import InMemoryBackend
from .sqlite import SQLiteMemoryBackend

__all__ = ["InMemoryBackend", "MemoryBackend", "SQLiteMemoryBackend"]

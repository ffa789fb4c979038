"""Memory backends: in this process, SQLite (FTS5), Postgres (full-text search; lazily, extra ``postgres``)."""

from __future__ import annotations

from .base import MemoryBackend
from .memory import InMemoryBackend
from .sqlite import SQLiteMemoryBackend

__all__ = ["InMemoryBackend", "MemoryBackend", "PostgresMemoryBackend", "SQLiteMemoryBackend"]


def __getattr__(name: str) -> object:
    if name == "PostgresMemoryBackend":
        from .postgres import PostgresMemoryBackend

        return PostgresMemoryBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

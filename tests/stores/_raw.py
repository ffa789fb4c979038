"""Raw writes under a store's API, to corrupt one stored field on every backend the way a disk, an
operator's hand edit or another program could."""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Literal
from urllib.parse import quote

import psycopg
import redis

from .conftest import Backend, cluster_client

Field = Literal["message", "state", "state-version", "window", "audit", "message-count", "message-position"]

POSTGRES_TYPED = frozenset({"state-version", "window"})
"""Fields Postgres's column types protect (it also refuses invalid UTF-8 in any text column)."""

NOT_STORED: dict[str, frozenset[str]] = {
    "message-count": frozenset({"memory", "redis", "redis-cluster"}),
    "message-position": frozenset({"memory"}),
}
"""Fields a backend does not store apart: the count is the length of a list (memory, Redis), and the
memory store keeps positions in the process, where no other program writes them."""


def corrupt(backend: Backend, store: Any, session_id: str, field: Field, value: bytes | str | int) -> None:
    """Overwrite one stored field of ``session_id`` (message 0, the view state, audit event 0...) with ``value``.

    ``message-count`` is the session's count of messages (SQL backends), ``message-position`` the
    stored position of message 0 (what `get_message` reads).
    """
    if backend.name == "memory":
        _memory(store, session_id, field, value)
    elif backend.name == "sqlite":
        _sqlite(backend, session_id, field, value)
    elif backend.name in ("redis", "redis-cluster"):
        _redis(backend, session_id, field, value)
    else:
        _postgres(backend, session_id, field, value)


def _memory(store: Any, session_id: str, field: Field, value: bytes | str | int) -> None:
    inner = getattr(store, "inner", store)
    session = inner._ops._sessions[session_id]
    text = value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
    if field == "message":
        session.messages[0] = text
    elif field == "state":
        session.states["view"] = (text, session.states["view"][1])
    elif field == "state-version":
        session.states["view"] = (session.states["view"][0], text)
    elif field == "window":
        session.window = text
    else:
        session.audit[0] = text


_SQL = {
    "message": "UPDATE {t}messages SET body = CAST(? AS TEXT) WHERE session_id = ? AND seq = 0",
    "state": "UPDATE {t}state SET body = CAST(? AS TEXT) WHERE session_id = ? AND slot = 'view'",
    "state-version": "UPDATE {t}state SET version = CAST(? AS TEXT) WHERE session_id = ? AND slot = 'view'",
    "window": "UPDATE {t}sessions SET context_window = CAST(? AS TEXT) WHERE session_id = ?",
    "audit": "UPDATE {t}audit SET event = CAST(? AS TEXT) WHERE session_id = ? AND seq = 0",
    "message-count": "UPDATE {t}sessions SET message_count = ? WHERE session_id = ?",
    "message-position": "UPDATE {t}messages SET seq = ? WHERE session_id = ? AND seq = 0",
}


def _sqlite(backend: Backend, session_id: str, field: Field, value: bytes | str | int) -> None:
    raw = sqlite3.connect(backend.path)
    try:
        raw.execute(_SQL[field].format(t="cw_"), (value, session_id))
        raw.commit()
    finally:
        raw.close()


def _postgres(backend: Backend, session_id: str, field: Field, value: bytes | str | int) -> None:
    text = value.decode() if isinstance(value, bytes) else value
    statement = _SQL[field].format(t=f'"{backend.schema}".cw_').replace("?", "%s")
    with psycopg.connect(backend.url, autocommit=True) as conn:
        conn.execute(statement, (text, session_id))


def _redis(backend: Backend, session_id: str, field: Field, value: bytes | str | int) -> None:
    client: Any = cluster_client(backend.url) if backend.name == "redis-cluster" else redis.Redis.from_url(backend.url)
    tag = "{" + backend.prefix + ":" + quote(session_id, safe="") + "}"
    try:
        if field == "message-position":
            first = client.lindex(tag + ":msgs", 0)
            client.hset(tag + ":ids", json.loads(first)["message_id"], value)
        elif field == "message":
            client.lset(tag + ":msgs", 0, value)
        elif field == "state":
            client.hset(tag + ":state", "view", value)
        elif field == "state-version":
            client.hset(tag + ":statever", "v:view", value)
        elif field == "window":
            client.hset(tag + ":meta", "window", value)
        else:
            client.lset(tag + ":audit", 0, value)
    finally:
        client.close()

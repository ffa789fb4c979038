"""Which session a proxied request belongs to.

In order: a session in the path (``/s/{id}/v1/...``, for clients that cannot set a header), the
``X-Session-Id`` header, the headers the main agents send on their own (Claude Code's
``X-Claude-Code-Session-Id``, Codex's ``session-id``; opencode sends ``x-session-id``), a session
the body carries (OpenAI's ``user``, the ``session_id`` inside Anthropic's ``metadata.user_id``),
and, when ``[service] session_fingerprint`` is on, a fingerprint of the conversation's first
messages (system prompt and first user message), which stays the same for every request of one
conversation. A request with none of these is passed through unmanaged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request

from .history import message_key

__all__ = ["PATH_SESSION", "SESSION_HEADERS", "fingerprint", "session_of", "split_session_path"]

SESSION_HEADERS = ("x-session-id", "x-claude-code-session-id", "session-id")
"""Headers naming the session, in the order they are read."""

PATH_SESSION = "contextwarden.session"
"""ASGI scope key of the session named in the path."""


def split_session_path(path: str) -> tuple[str, str] | None:
    """``("abc", "/v1/messages")`` for ``/s/abc/v1/messages``; None for a path without a session."""
    if not path.startswith("/s/"):
        return None
    session, slash, rest = path[3:].partition("/")
    if not session or not slash:
        return None
    return session, "/" + rest


def fingerprint(keyed: Sequence[Mapping[str, Any]]) -> str | None:
    """A session id made of the conversation's system prompts and first user message (None without one)."""
    head = []
    for message in keyed[:4]:
        head.append(message_key(message))
        if message.get("role") == "user":
            return "fp_" + hashlib.sha256(json.dumps(head).encode()).hexdigest()[:24]
    return None


def session_of(request: Request, hint: str | None) -> str | None:
    """The session a request names (path, headers, then ``hint`` from its body); None when it names none."""
    named = request.scope.get(PATH_SESSION)
    if isinstance(named, str) and named:
        return named
    headers = request.headers
    for header in SESSION_HEADERS:
        value = headers.get(header)
        if value and value.strip():
            return value.strip()
    return hint

"""The contextwarden service: an OpenAI-compatible proxy that manages each session's context.

``contextwarden serve`` runs `create_app` with uvicorn. Point an agent's OpenAI base URL at
``http://HOST:PORT/v1`` and name its session with the ``X-Session-Id`` header (or the ``user``
field): every request then gets the session's managed view. `ServiceThread` runs the app in a
thread of a script (and stops it cleanly). Needs ``contextwarden[service]``.
"""

from __future__ import annotations

from .app import create_app
from .auth import hash_key
from .thread import ServiceThread

__all__ = ["ServiceThread", "create_app", "hash_key"]

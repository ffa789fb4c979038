"""API keys and tenants: a key's SHA-256 names its tenant; the key itself is never stored.

Without configured keys the service is open and every request belongs to tenant ``default``
(for a proxy on loopback in front of one agent). With keys, a request without a known key gets
401, and everything it touches (sessions, events) is its tenant's: session ids are scoped per
tenant (`contextwarden.stores.tenancy`), so an id another tenant uses is simply another session.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from starlette.requests import HTTPConnection

from ..settings import ServiceKey
from .errors import ServiceError

__all__ = ["DEFAULT_TENANT", "Tenants", "hash_key"]

DEFAULT_TENANT = "default"


def hash_key(key: str) -> str:
    """The hex SHA-256 of an API key, as ``[service] api_keys`` stores it."""
    return hashlib.sha256(key.encode()).hexdigest()


def presented_key(conn: HTTPConnection) -> str | None:
    """The key a request carries: ``Authorization: Bearer KEY`` (OpenAI's clients) or ``X-Api-Key``."""
    auth = conn.headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    return conn.headers.get("x-api-key") or None


class Tenants:
    """Resolves a request's tenant from its API key."""

    def __init__(self, keys: Sequence[ServiceKey]) -> None:
        self._by_hash = {k.key_sha256.lower(): k.tenant for k in keys}

    @property
    def open(self) -> bool:
        """No keys configured: every request is tenant ``default``."""
        return not self._by_hash

    def tenant(self, conn: HTTPConnection) -> str:
        """The request's tenant.

        Raises:
            ServiceError: 401 when keys are configured and the request has none of them.
        """
        if self.open:
            return DEFAULT_TENANT
        key = presented_key(conn)
        tenant = self._by_hash.get(hash_key(key)) if key else None
        if tenant is None:
            problem = "no API key" if key is None else "an unknown API key"
            raise ServiceError(
                401,
                f"The request carries {problem}; send `Authorization: Bearer <key>` with a key configured in "
                "`[service] api_keys` (stored as its SHA-256).",
                code="invalid_api_key",
            )
        return tenant

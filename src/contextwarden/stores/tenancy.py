"""Session ids scoped per tenant: where the service keeps tenant T's session S in a store.

Store ids are unique per store, while the service's clients choose their session ids freely: two
tenants may both call a session ``r1``. So the service stores tenant T's session S under the key
``T␟S`` (U+241F, SYMBOL FOR UNIT SEPARATOR, between them) and the same id under another tenant is
simply another session: no answer tells a tenant that an id is used elsewhere.

The tenant of an open service (no API keys), `OPEN_TENANT`, keeps its ids as given, so the
sessions of a single-tenant deployment keep the ids they were stored under. Sessions stored before
ids were scoped (their key is the bare id, owned by their tenant) are found second, so they keep
serving their tenant. When the first key is held by a session of another tenant (in practice a
bare id `OPEN_TENANT` would use, held by another tenant's session stored before ids were scoped),
the session is created under the second key, so the answer is still that of an unused id.
"""

from __future__ import annotations

import dataclasses

from ..exceptions import SessionNotFound, UsageError
from .protocols import AsyncSessionStore, SessionInfo, SessionStore
from .values import MAX_ID_LENGTH, check_id

__all__ = [
    "OPEN_TENANT",
    "SEPARATOR",
    "acreate_scoped",
    "alocate",
    "client_info",
    "client_session_id",
    "creatable_keys",
    "locate",
    "session_keys",
]

OPEN_TENANT = "default"
"""The tenant of every request to an open service; its session ids are stored as given."""
SEPARATOR = "\u241f"
"""Between the tenant and the session id in a scoped key (printable, and in no id a person types)."""


def session_keys(tenant: str, session_id: str) -> tuple[str, ...]:
    """The store keys of ``tenant``'s session ``session_id``, in the order they are looked up.

    The first is where a new session is created; the second is taken when a session of another
    tenant holds the first. A scoped key longer than the store allows is left out: such an id is
    found only under its bare key (a session stored before ids were scoped).

    Raises:
        UsageError: the id is not usable (empty, control characters, too long, or holding `SEPARATOR`).
    """
    check_id(session_id)
    if SEPARATOR in session_id:
        raise UsageError(
            f"`session_id` {session_id[:60]!r} contains {SEPARATOR!r} (U+241F), which separates tenant and id in "
            "stored keys; choose an id without it."
        )
    scoped = f"{tenant}{SEPARATOR}{session_id}"
    if tenant == OPEN_TENANT:
        return (session_id, scoped) if len(scoped) <= MAX_ID_LENGTH else (session_id,)
    if len(scoped) > MAX_ID_LENGTH:
        return (session_id,)
    return scoped, session_id


def creatable_keys(tenant: str, session_id: str) -> tuple[str, ...]:
    """The keys a new session of ``tenant`` may be created under, in order (those of `session_keys`).

    Raises:
        UsageError: as `session_keys`, and when the id is too long for this tenant.
    """
    keys = session_keys(tenant, session_id)
    if tenant != OPEN_TENANT and keys == (session_id,):
        limit = MAX_ID_LENGTH - len(tenant) - len(SEPARATOR)
        raise UsageError(
            f"`session_id` {session_id[:40]!r}... is {len(session_id)} characters long; tenant {tenant!r} may use ids "
            f"of up to {limit} characters (the stored key also holds the tenant); use a shorter id or hash it."
        )
    return keys


def client_session_id(tenant: str, key: str) -> str:
    """The session id the clients of ``tenant`` use for the session stored under ``key``."""
    head = f"{tenant}{SEPARATOR}"
    return key[len(head) :] if key.startswith(head) and len(key) > len(head) else key


def client_info(info: SessionInfo) -> SessionInfo:
    """``info`` as its tenant's clients see it: the session id they use, not the store key."""
    shown = client_session_id(info.tenant, info.session_id)
    return info if shown == info.session_id else dataclasses.replace(info, session_id=shown)


def _not_found(session_id: str) -> SessionNotFound:
    return SessionNotFound(f"No session {session_id!r} in this store.", session_id=session_id)


def locate(store: SessionStore, tenant: str, session_id: str) -> SessionInfo:
    """The stored session ``tenant`` calls ``session_id`` (its `SessionInfo` names the store key).

    Raises:
        SessionNotFound: the tenant has no such session (another tenant's is no different).
        UsageError: the id is not usable (see `session_keys`).
    """
    for key in session_keys(tenant, session_id):
        try:
            return store.get_session(key, tenant=tenant)
        except SessionNotFound:
            continue
    raise _not_found(session_id)


async def alocate(store: AsyncSessionStore, tenant: str, session_id: str) -> SessionInfo:
    """`locate` on an async store."""
    for key in session_keys(tenant, session_id):
        try:
            return await store.get_session(key, tenant=tenant)
        except SessionNotFound:
            continue
    raise _not_found(session_id)


async def acreate_scoped(
    store: AsyncSessionStore, tenant: str, session_id: str, *, model: str | None, window: int | None
) -> SessionInfo:
    """Create ``tenant``'s session ``session_id`` (or get it, when a concurrent request just created it).

    Raises:
        SessionNotFound: every key the session may take is held by other tenants' sessions (only
            possible with sessions stored before ids were scoped).
        UsageError: the id is not usable, or too long for this tenant.
    """
    for key in creatable_keys(tenant, session_id):
        try:
            return await store.create_session(key, tenant=tenant, model=model, window=window)
        except SessionNotFound:  # the key is another tenant's: the next one is this tenant's to take
            continue
    raise _not_found(session_id)

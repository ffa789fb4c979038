"""What a proxied session's store holds: the (role, text) pairs the service kept for a session."""

from __future__ import annotations

from contextwarden.stores import open_store

from .conftest import Running


def stored(service: Running, session_id: str) -> list[tuple[str, str]]:
    url = service.app.state.service.settings.store_url
    with open_store(url) as store:
        return [(m.role, m.text) for m in store.load_messages(session_id, tenant="default")]

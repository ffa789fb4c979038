"""The proxy over each shared store: a conversation through real HTTP lands whole in Redis and Postgres."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from contextwarden.settings import Settings
from contextwarden.stores import open_store
from contextwarden.testing import ScriptedOpenAIServer

from .conftest import SYSTEM, Running, chat, make_settings, user

pytestmark = pytest.mark.services


@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_a_conversation_through_the_proxy_lands_in_the_store(
    backend: str,
    request: pytest.FixtureRequest,
    service_factory: Callable[[Settings], Running],
    upstream: ScriptedOpenAIServer,
) -> None:
    store_url = request.getfixturevalue(f"{backend}_store_url")
    service = service_factory(make_settings(store_url, upstream.base_url))
    headers = {"X-Session-Id": f"on-{backend}"}
    history = [SYSTEM]
    for i in range(3):
        history.append(user(f"question {i}"))
        r = service.client.post("/v1/chat/completions", json=chat(*history), headers=headers)
        assert r.status_code == 200, r.text
        history.append(r.json()["choices"][0]["message"])
    assert service.client.get("/readyz").json()["checks"] == {"store": "ok", "events": "ok", "upstream": "ok"}
    detail = service.client.get(f"/v1/sessions/on-{backend}").json()
    assert detail["status"]["transcript_messages"] == 7
    with open_store(store_url) as store:
        stored = store.load_messages(f"on-{backend}", tenant="default")
    assert [(m.role, m.text) for m in stored] == [(m["role"], m["content"]) for m in history]

"""A session that other writers keep appending to while a request is added gets 503 ``session_busy``.

Each append of the proxy expects the transcript at the length this replica last read. Here another
writer (a second connection to the same SQLite file, as another replica would be) appends one
message right before every such append, so every attempt finds the transcript moved: the service
reads the session again and retries, and after its last attempt answers 503 with nothing of the
request written. When the other writer stops, the same request succeeds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from contextwarden.adapters import to_messages
from contextwarden.messages import Message
from contextwarden.stores import AsyncSessionStore, open_async_store, open_store
from contextwarden.testing import ScriptedOpenAIServer

from .conftest import SYSTEM, Running, chat, make_settings, start_service, user


class _ContendedStore:
    """A real async SQLite store; while ``contending``, another writer appends before each checked append."""

    def __init__(self, url: str) -> None:
        self._store: AsyncSessionStore = open_async_store(url)
        self._url = url
        self.contending = False
        self.interruptions = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        tenant: str | None = None,
        expected_count: int | None = None,
    ) -> int:
        if self.contending and expected_count is not None:
            self.interruptions += 1
            with open_store(self._url) as other:
                other.append_messages(
                    session_id,
                    to_messages([user(f"another writer's message {self.interruptions}")], format="openai"),
                    tenant=tenant,
                )
        return await self._store.append_messages(session_id, messages, tenant=tenant, expected_count=expected_count)


@pytest.fixture
def contended(sqlite_url: str, upstream: ScriptedOpenAIServer) -> Iterator[tuple[Running, _ContendedStore, str]]:
    store = _ContendedStore(sqlite_url)
    service = start_service(make_settings(sqlite_url, upstream.base_url), store=store)
    yield service, store, sqlite_url
    service.stop()


def _stored(url: str) -> list[str]:
    with open_store(url) as store:
        return [m.text for m in store.load_messages("busy", tenant="default")]


def test_a_session_that_keeps_changing_under_a_request_gets_503_session_busy_and_nothing_is_lost(
    contended: tuple[Running, _ContendedStore, str], upstream: ScriptedOpenAIServer
) -> None:
    service, store, url = contended
    upstream.push("first answer", "second answer")
    headers = {"X-Session-Id": "busy"}
    r = service.client.post("/v1/chat/completions", json=chat(SYSTEM, user("one")), headers=headers)
    assert r.status_code == 200, r.text
    calls = len(upstream.requests)

    store.contending = True
    body = chat(SYSTEM, user("one"), {"role": "assistant", "content": "first answer"}, user("two"))
    r = service.client.post("/v1/chat/completions", json=body, headers=headers)
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "session_busy"
    assert "retry" in r.json()["error"]["message"]
    assert store.interruptions == 3  # one per attempt: the service gave up after its last one
    assert len(upstream.requests) == calls  # the model was not called
    stored = _stored(url)
    assert "two" not in stored  # nothing of the refused request was written
    assert stored[-3:] == [f"another writer's message {i}" for i in (1, 2, 3)]  # the other writer's all kept

    store.contending = False
    history = [SYSTEM, user("one"), {"role": "assistant", "content": "first answer"}]
    history += [user(text) for text in stored[3:]] + [user("two")]
    r = service.client.post("/v1/chat/completions", json=chat(*history), headers=headers)
    assert r.status_code == 200, r.text
    assert _stored(url)[-2:] == ["two", "second answer"]

"""A session another writer appends to while a request is added: nothing of the request is merged.

A request's new messages and its reply are written in one append after the reply, which expects the
transcript at the length this replica last read. Here another writer (a second connection to the
same SQLite file, as another replica would be) appends a message right before that append, so it
finds the transcript moved: the service reads the session again, and since the client's history and
the reply do not continue what the store now holds, nothing of the request is written (the client
still gets its reply). A request whose history continues the stored transcript is managed again.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from contextwarden.adapters import to_messages
from contextwarden.messages import Message
from contextwarden.stores import AsyncSessionStore, StateWrite, open_async_store, open_store
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
        state: StateWrite | None = None,
    ) -> int:
        if self.contending and expected_count is not None:
            self.interruptions += 1
            with open_store(self._url) as other:
                other.append_messages(
                    session_id,
                    to_messages([user(f"another writer's message {self.interruptions}")], format="openai"),
                    tenant=tenant,
                )
        return await self._store.append_messages(
            session_id, messages, tenant=tenant, expected_count=expected_count, state=state
        )


@pytest.fixture
def contended(sqlite_url: str, upstream: ScriptedOpenAIServer) -> Iterator[tuple[Running, _ContendedStore, str]]:
    store = _ContendedStore(sqlite_url)
    service = start_service(make_settings(sqlite_url, upstream.base_url), store=store)
    yield service, store, sqlite_url
    service.stop()


def _stored(url: str) -> list[str]:
    with open_store(url) as store:
        return [m.text for m in store.load_messages("busy", tenant="default")]


def test_a_session_changed_under_a_request_is_not_merged_with_it(
    contended: tuple[Running, _ContendedStore, str], upstream: ScriptedOpenAIServer
) -> None:
    service, store, url = contended
    upstream.push("first answer", "unmanaged answer", "second answer")
    headers = {"X-Session-Id": "busy"}
    r = service.client.post("/v1/chat/completions", json=chat(SYSTEM, user("one")), headers=headers)
    assert r.status_code == 200, r.text
    calls = len(upstream.requests)

    store.contending = True
    body = chat(SYSTEM, user("one"), {"role": "assistant", "content": "first answer"}, user("two"))
    r = service.client.post("/v1/chat/completions", json=body, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "unmanaged answer"
    assert store.interruptions == 1
    assert upstream.requests[-1]["messages"] == body["messages"]
    assert len(upstream.requests) == calls + 1
    stored = _stored(url)
    assert "two" not in stored  # nothing of the request was written
    assert stored[-1:] == ["another writer's message 1"]  # the other writer's kept

    store.contending = False
    history = [SYSTEM, user("one"), {"role": "assistant", "content": "first answer"}]
    history += [user(text) for text in stored[3:]] + [user("two")]
    r = service.client.post("/v1/chat/completions", json=chat(*history), headers=headers)
    assert r.status_code == 200, r.text
    assert _stored(url)[-2:] == ["two", "second answer"]

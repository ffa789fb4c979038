"""A session the service keeps in memory is read again when another writer added to its transcript."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from contextwarden.adapters import from_messages, to_messages
from contextwarden.service.history import message_key
from contextwarden.settings import Settings
from contextwarden.stores import open_store
from contextwarden.testing import ScriptedOpenAIServer

from .conftest import SYSTEM, Running, assistant, chat, make_settings, user


def _texts(store_url: str, session_id: str) -> list[str]:
    with open_store(store_url) as store:
        return [m.text for m in store.load_messages(session_id, tenant="default")]


class _Turned:
    """A service on SQLite or Redis and the history its session "c" is sent; `post` sends it."""

    def __init__(self, url: str, service: Running, upstream: ScriptedOpenAIServer) -> None:
        self.url, self.service, self.upstream = url, service, upstream
        self.history = [SYSTEM, user("one")]

    def post(self) -> None:
        r = self.service.client.post("/v1/chat/completions", json=chat(*self.history), headers={"X-Session-Id": "c"})
        assert r.status_code == 200, r.text


@pytest.fixture(params=["sqlite", "redis"])
def turned(
    request: pytest.FixtureRequest,
    service_factory: Callable[[Settings], Running],
    upstream: ScriptedOpenAIServer,
) -> _Turned:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "redis_store_url")
    return _Turned(url, service_factory(make_settings(url, upstream.base_url)), upstream)


def test_a_cached_session_notices_messages_another_writer_appended(turned: _Turned) -> None:
    url, upstream, history = turned.url, turned.upstream, turned.history
    upstream.push("first answer", "third answer")
    turned.post()
    history.append(assistant("first answer"))
    # another replica serves a turn of the session meanwhile: it writes to the store, not to this process
    with open_store(url) as other:
        other.append_messages(
            "c", to_messages([user("two"), assistant("second answer")], format="openai"), tenant="default"
        )
    history += [user("two"), assistant("second answer"), user("three")]
    turned.post()
    # the view sent upstream has the other writer's turn, and nothing is stored twice
    assert [m["content"] for m in upstream.requests[-1]["messages"][1:]] == [
        "one",
        "first answer",
        "two",
        "second answer",
        "three",
    ]
    assert _texts(url, "c") == [
        "You are a careful agent.",
        "one",
        "first answer",
        "two",
        "second answer",
        "three",
        "third answer",
    ]


def test_a_retry_checks_what_another_writer_appended_and_is_not_merged_with_it(turned: _Turned) -> None:
    url, upstream = turned.url, turned.upstream
    upstream.push("first answer", "answer again")
    turned.post()
    with open_store(url) as other:
        other.append_messages(
            "c", to_messages([user("two"), assistant("second answer")], format="openai"), tenant="default"
        )
    # the same request again: no message is new, so the store is asked; its history no longer continues the
    # stored one, so it goes upstream as the client sent it and nothing of it is stored
    turned.post()
    assert [m["content"] for m in upstream.requests[-1]["messages"][1:]] == ["one"]
    assert _texts(url, "c") == ["You are a careful agent.", "one", "first answer", "two", "second answer"]


def test_a_cached_session_another_writer_deleted_starts_again_from_the_clients_history(turned: _Turned) -> None:
    url, upstream, history = turned.url, turned.upstream, turned.history
    upstream.push("first answer", "second answer")
    turned.post()
    with open_store(url) as other:
        other.delete_session("c", tenant="default")
    history += [assistant("first answer"), user("two")]
    turned.post()
    assert [m["content"] for m in upstream.requests[-1]["messages"][1:]] == ["one", "first answer", "two"]
    assert _texts(url, "c") == ["You are a careful agent.", "one", "first answer", "two", "second answer"]


def test_the_keys_of_a_cached_session_are_those_of_its_transcript_rendered_back(turned: _Turned) -> None:
    # keyed from the client's dicts and the upstream's reply as they are added, not by rendering
    history, upstream = turned.history, turned.upstream
    upstream.push("first answer", "second answer")
    turned.post()
    history += [assistant("first answer"), user("two"), {"role": "user", "content": [{"type": "text", "text": "x"}]}]
    turned.post()
    entry = turned.service.app.state.service.pool._open[("default", "c")]
    rendered = from_messages(entry.session.state.messages(), format="openai")
    assert entry.keys == [message_key(m) for m in rendered]
    assert len(entry.keys) == 6

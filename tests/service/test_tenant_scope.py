"""Session ids are scoped per tenant: an id another tenant uses answers exactly like an unused one.

Over real HTTP, on SQLite, Redis and Postgres: tenant ``globex`` naming acme's session gets, on
every route, the status, body and headers it gets for an id nobody uses (a new session for a
write, 404 for a read), and acme's session is untouched. An open service and sessions stored
before ids were scoped keep their ids.
"""

from __future__ import annotations

import itertools
import json
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from typer.testing import CliRunner

from contextwarden.cli import app
from contextwarden.messages import Message
from contextwarden.service import hash_key
from contextwarden.service.headers import header_value
from contextwarden.settings import Settings
from contextwarden.stores import open_store
from contextwarden.stores.tenancy import SEPARATOR
from contextwarden.testing import ScriptedOpenAIServer

from .conftest import MODEL, Running, chat, make_settings, start_service, user

TENANTS = ("acme", "globex", "initech", "default")
"""``default`` is a keyed tenant here: the one whose ids are stored as given."""


def _headers(tenant: str, session_id: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer key-{tenant}"}
    if session_id is not None:
        headers["X-Session-Id"] = session_id
    return headers


def _keyed_settings(store_url: str, upstream: ScriptedOpenAIServer) -> Settings:
    keys = [{"tenant": t, "key_sha256": hash_key(f"key-{t}")} for t in TENANTS]
    return make_settings(store_url, upstream.base_url, api_keys=keys)


_VOLATILE_HEADERS = {"date", "content-length", "server", "x-request-id"}
_VOLATILE_FIELDS = {"id", "created", "created_at", "last_active"}


def _shape(value: Any) -> Any:
    """A JSON value with its volatile fields (ids, clocks) reduced to their type."""
    if isinstance(value, dict):
        return {k: type(v).__name__ if k in _VOLATILE_FIELDS else _shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return value


def answer(response: httpx.Response, session_id: str) -> tuple[int, Any, dict[str, str]]:
    """What a client can observe of an answer, with the session id it named replaced by a placeholder."""

    def plain(text: str) -> str:
        return _placeholder(text, session_id)

    content_type = response.headers.get("content-type", "")
    body: Any = plain(response.text)
    if content_type.startswith("application/json"):
        body = _shape(_swap(response.json(), session_id))
    headers = {k: plain(v) for k, v in response.headers.items() if k not in _VOLATILE_HEADERS}
    return response.status_code, body, headers


def _placeholder(text: str, session_id: str) -> str:
    """``text`` with the id as given, trimmed, quoted in a message or percent-encoded in a header, as ``<id>``."""
    spellings = {session_id, session_id.strip(), repr(session_id)[1:-1], header_value(session_id.strip())}
    for spelling in sorted(spellings - {""}, key=len, reverse=True):
        text = text.replace(spelling, "<id>")
    return text


def _swap(value: Any, session_id: str) -> Any:
    if isinstance(value, str):
        return _placeholder(value, session_id)
    if isinstance(value, dict):
        return {k: _swap(v, session_id) for k, v in value.items()}
    if isinstance(value, list):
        return [_swap(v, session_id) for v in value]
    return value


def _reads(client: httpx.Client, tenant: str, sid: str, *, missing: bool) -> dict[str, httpx.Response]:
    """The sessions-API routes that read a session (the event stream only of a missing one: it would not end)."""
    path, h = f"/v1/sessions/{sid}", _headers(tenant)
    reads = {
        "get": client.get(path, headers=h),
        "view": client.get(f"{path}/view", headers=h),
        "snapshot": client.get(f"{path}/snapshots/snap-1", headers=h),
    }
    if missing:
        reads["events"] = client.get(f"{path}/events", headers=h)
        reads["compact"] = client.post(f"{path}/compact", headers=h)
        reads["delete"] = client.delete(path, headers=h)
    return reads


def _write(client: httpx.Client, tenant: str, sid: str, text: str) -> httpx.Response:
    return client.post("/v1/chat/completions", json=chat(user(text)), headers=_headers(tenant, sid))


def _acme_state(client: httpx.Client, store_url: str, sid: str) -> tuple[int, list[tuple[str, str]]]:
    described = client.get(f"/v1/sessions/{sid}", headers=_headers("acme")).json()
    with open_store(store_url) as store:
        key = f"acme{SEPARATOR}{sid}"
        messages = [(m.role, m.text) for m in store.load_messages(key, tenant="acme")]
    return described["session"]["message_count"], messages


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def scoped(
    request: pytest.FixtureRequest, upstream: ScriptedOpenAIServer, service_factory: Callable[[Settings], Running]
) -> tuple[Running, str]:
    if request.param == "sqlite":
        store_url = str(request.getfixturevalue("sqlite_url"))
    else:
        request.applymarker(pytest.mark.services)
        store_url = str(request.getfixturevalue(f"{request.param}_store_url"))
    return service_factory(_keyed_settings(store_url, upstream)), store_url


def test_every_route_answers_another_tenants_id_like_an_unused_one(scoped: tuple[Running, str]) -> None:
    service, store_url = scoped
    client = service.client
    history = [user("my account number is 4417-1234")]
    assert _write(client, "acme", "shared", history[0]["content"]).status_code == 200
    history += [{"role": "assistant", "content": "ok"}, user("and the PIN is 0000")]
    assert client.post("/v1/chat/completions", json=chat(*history), headers=_headers("acme", "shared")).is_success
    before = _acme_state(client, store_url, "shared")
    assert before[0] == 4

    # reads of a session globex does not have: 404 either way
    taken, unused = _reads(client, "globex", "shared", missing=True), _reads(client, "globex", "nobody", missing=True)
    for route in taken:
        assert taken[route].status_code == 404, (route, taken[route].text)
        assert answer(taken[route], "shared") == answer(unused[route], "nobody"), route
    # a write: a new session of globex's either way
    wrote_taken, wrote_unused = _write(client, "globex", "shared", "hello"), _write(client, "globex", "nobody", "hello")
    assert wrote_taken.status_code == 200, wrote_taken.text
    assert answer(wrote_taken, "shared") == answer(wrote_unused, "nobody")
    assert wrote_taken.headers["x-session-id"] == "shared"
    # the path form of the session and the Anthropic dialect too
    for path in ("/s/{}/v1/chat/completions",):
        a = client.post(path.format("shared"), json=chat(user("again")), headers=_headers("globex"))
        b = client.post(path.format("nobody"), json=chat(user("again")), headers=_headers("globex"))
        assert a.status_code == 200 and answer(a, "shared") == answer(b, "nobody")
    messages = {"model": MODEL, "max_tokens": 50, "messages": [user("claude")]}
    a = client.post("/v1/messages", json=messages, headers=_headers("globex", "shared"))
    b = client.post("/v1/messages", json=messages, headers=_headers("globex", "nobody"))
    assert a.status_code == 200 and answer(a, "shared") == answer(b, "nobody")
    # now globex has both sessions: every read route answers alike, and describes globex's own session
    taken, unused = _reads(client, "globex", "shared", missing=False), _reads(client, "globex", "nobody", missing=False)
    for route in ("get", "view", "snapshot"):
        assert taken[route].status_code == (404 if route == "snapshot" else 200), (route, taken[route].text)
        assert answer(taken[route], "shared") == answer(unused[route], "nobody"), route
    assert taken["get"].json()["session"]["session_id"] == "shared"
    assert taken["get"].json()["session"]["tenant"] == "globex"
    assert "4417" not in taken["view"].text and "4417" not in taken["get"].text
    compacted = [client.post(f"/v1/sessions/{s}/compact", headers=_headers("globex")) for s in ("shared", "nobody")]
    assert compacted[0].status_code == 200 and answer(compacted[0], "shared") == answer(compacted[1], "nobody")
    listed = client.get("/v1/sessions", headers=_headers("globex")).json()["data"]
    # (the Anthropic conversation did not continue the chat one: it is a branch, ``<id>~<hash>``)
    assert {s["session_id"].split("~")[0] for s in listed} == {"nobody", "shared"}
    deleted = [client.delete(f"/v1/sessions/{s}", headers=_headers("globex")) for s in ("shared", "nobody")]
    assert deleted[0].status_code == 200 and answer(deleted[0], "shared") == answer(deleted[1], "nobody")

    # acme's session: untouched by all of it
    assert _acme_state(client, store_url, "shared") == before
    assert [s["session_id"] for s in client.get("/v1/sessions", headers=_headers("acme")).json()["data"]] == ["shared"]


def _responses_reply(body: Any) -> dict[str, Any]:
    """A Responses API reply of the scripted upstream (ids of its own each time, as a provider's)."""
    text = {"type": "output_text", "text": "ok", "annotations": []}
    item = {"type": "message", "id": f"msg_{uuid.uuid4().hex}", "role": "assistant", "status": "completed"}
    usage = {"input_tokens": 20, "output_tokens": 1, "total_tokens": 21, "input_tokens_details": {"cached_tokens": 0}}
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "model": body.get("model"),
        "output": [{**item, "content": [text]}],
        "usage": usage,
    }


def test_the_responses_route_answers_another_tenants_id_like_an_unused_one(
    scoped: tuple[Running, str], upstream: ScriptedOpenAIServer
) -> None:
    service, store_url = scoped
    client = service.client
    upstream.routes["POST /v1/responses"] = _responses_reply

    def respond(tenant: str, sid: str, items: list[dict[str, Any]]) -> httpx.Response:
        body = {"model": MODEL, "input": items, "store": False}
        return client.post("/v1/responses", json=body, headers=_headers(tenant, sid))

    history = [user("my account number is 4417-1234")]
    assert respond("acme", "shared", history).status_code == 200
    history += [{"role": "assistant", "content": "ok"}, user("and the PIN is 0000")]
    assert respond("acme", "shared", history).status_code == 200
    before = _acme_state(client, store_url, "shared")
    assert before[0] == 4

    # globex writes under acme's id and under an unused one: the same answer, a new session of its own each
    taken, unused = respond("globex", "shared", [user("hello")]), respond("globex", "nobody", [user("hello")])
    assert taken.status_code == 200, taken.text
    assert answer(taken, "shared") == answer(unused, "nobody")
    assert taken.headers["x-session-id"] == "shared"
    assert "4417" not in taken.text
    # continuing it carries globex's own history, never acme's
    again = [user("hello"), {"role": "assistant", "content": "ok"}, user("what did I say first?")]
    taken, unused = respond("globex", "shared", again), respond("globex", "nobody", again)
    assert taken.status_code == 200 and answer(taken, "shared") == answer(unused, "nobody")
    sent = [r.body for r in upstream.requests if r.path == "/v1/responses"][-2:]
    assert all("4417" not in json.dumps(b) for b in sent)
    described = [client.get(f"/v1/sessions/{s}", headers=_headers("globex")) for s in ("shared", "nobody")]
    assert answer(described[0], "shared") == answer(described[1], "nobody")
    assert described[0].json()["session"]["message_count"] == 4

    # acme's session: untouched by all of it
    assert _acme_state(client, store_url, "shared") == before


def test_an_open_service_keeps_ids_as_given(service: Running) -> None:
    assert service.client.post("/v1/chat/completions", json=chat(user("x")), headers={"X-Session-Id": "r1"}).is_success
    with open_store(service.app.state.service.settings.store_url) as store:
        assert store.get_session("r1", tenant="default").message_count == 2
        assert [s.session_id for s in store.list_sessions()[0]] == ["r1"]
    assert service.client.get("/v1/sessions").json()["data"][0]["session_id"] == "r1"


def test_sessions_stored_before_ids_were_scoped_keep_serving_their_tenant(
    sqlite_url: str, upstream: ScriptedOpenAIServer, service_factory: Callable[[Settings], Running]
) -> None:
    # what a keyed deployment stored before: acme's session under its bare id
    with open_store(sqlite_url) as store:
        store.create_session("legacy", tenant="acme", model=MODEL, window=4000)
        store.append_messages("legacy", [Message.user("old question"), Message.assistant("old answer")], tenant="acme")
    service = service_factory(_keyed_settings(sqlite_url, upstream))
    client = service.client
    history = [user("old question"), {"role": "assistant", "content": "old answer"}, user("new question")]
    assert client.post("/v1/chat/completions", json=chat(*history), headers=_headers("acme", "legacy")).is_success
    listed = client.get("/v1/sessions", headers=_headers("acme")).json()["data"]
    assert [(s["session_id"], s["message_count"]) for s in listed] == [("legacy", 4)]
    # globex's "legacy" is globex's own, new session
    assert _write(client, "globex", "legacy", "mine").is_success
    assert client.get("/v1/sessions/legacy", headers=_headers("globex")).json()["session"]["message_count"] == 2
    with open_store(sqlite_url) as store:
        assert store.count_messages("legacy", tenant="acme") == 4
        assert store.count_messages(f"globex{SEPARATOR}legacy", tenant="globex") == 2


def test_the_operator_sees_every_tenants_sessions(scoped: tuple[Running, str], tmp_path: Any) -> None:
    service, store_url = scoped
    for tenant in ("acme", "globex", "default"):
        assert _write(service.client, tenant, "r1", f"from {tenant}").is_success
    runner = CliRunner()
    listed = runner.invoke(app, ["sessions", "list", "--store", store_url, "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)["sessions"]
    assert sorted((r["tenant"], r["session_id"]) for r in rows) == [("acme", "r1"), ("default", "r1"), ("globex", "r1")]
    shown = runner.invoke(app, ["sessions", "show", "r1", "--tenant", "globex", "--store", store_url, "--json"])
    assert shown.exit_code == 0, shown.output
    assert "from globex" in shown.stdout and "from acme" not in shown.stdout
    deleted = runner.invoke(app, ["sessions", "delete", "r1", "--tenant", "acme", "--yes", "--store", store_url])
    assert deleted.exit_code == 0, deleted.output
    assert client_ids(service.client, "acme") == [] and client_ids(service.client, "globex") == ["r1"]


def client_ids(client: httpx.Client, tenant: str) -> list[str]:
    return [s["session_id"] for s in client.get("/v1/sessions", headers=_headers(tenant)).json()["data"]]


@pytest.fixture(scope="module")
def shared_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with ScriptedOpenAIServer(default="ok", model=MODEL) as upstream:
        store_url = f"sqlite:///{tmp_path_factory.mktemp('scope') / 'sessions.db'}"
        service = start_service(_keyed_settings(store_url, upstream))
        try:
            yield service
        finally:
            service.stop()


_fresh = itertools.count()
ids = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=ids, owner=st.sampled_from(TENANTS), intruder=st.sampled_from(TENANTS))
def test_any_id_of_another_tenant_answers_like_an_unused_one(
    shared_service: Running, raw: str, owner: str, intruder: str
) -> None:
    if owner == intruder:
        intruder = TENANTS[(TENANTS.index(owner) + 1) % len(TENANTS)]
    client = shared_service.client
    # ids of earlier examples do not count as used: each gets a fresh suffix
    sid, unused_sid = f"{raw}~{next(_fresh)}", f"{raw}~{next(_fresh)}"

    def write(tenant: str, session_id: str, text: str) -> httpx.Response:
        if re.fullmatch(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?", session_id):
            return _write(client, tenant, session_id, text)
        # a header carries trimmed ASCII only; the path form carries any id
        path = f"/s/{quote(session_id, safe='')}/v1/chat/completions"
        return client.post(path, json=chat(user(text)), headers=_headers(tenant))

    write(owner, sid, "the owner's secret 4417")
    before = owned_sessions(client, owner)
    taken = write(intruder, sid, "intruder")
    unused = write(intruder, unused_sid, "intruder")
    assert answer(taken, sid) == answer(unused, unused_sid)
    assert "4417" not in taken.text
    assert owned_sessions(client, owner) == before


def owned_sessions(client: httpx.Client, tenant: str) -> list[tuple[str, int]]:
    listed = client.get("/v1/sessions", headers=_headers(tenant), params={"limit": 1000}).json()["data"]
    return sorted((s["session_id"], s["message_count"]) for s in listed)

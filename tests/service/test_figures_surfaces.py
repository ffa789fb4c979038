"""One session, every surface, the same figures: library, store record, CLI, sessions API, metrics."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from contextwarden import Session
from contextwarden.cli import app
from contextwarden.settings import Settings
from contextwarden.stores import open_store
from contextwarden.testing import ScriptedError, ScriptedOpenAIServer

from .conftest import SYSTEM, Running, chat, make_settings, user

KEYS = ("window", "reserved_output", "tool_schemas", "effective", "used", "used_raw", "ratio", "state", "last_layer")
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}}}]


def _same(*shown: dict[str, Any]) -> None:
    first = {k: shown[0][k] for k in KEYS} | {"rule": shown[0]["rule"]["mode"]}
    for other in shown[1:]:
        assert {k: other[k] for k in KEYS} | {"rule": other["rule"]["mode"]} == first
    assert sum(shown[0]["components"].values()) == shown[0]["used"]
    assert shown[0]["effective"] == shown[0]["window"] - shown[0]["reserved_output"] - shown[0]["tool_schemas"]


def _cli(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    if request.param == "sqlite":
        return sqlite_url
    url: str = request.getfixturevalue("redis_store_url")
    return url


def _library_session(url: str) -> dict[str, Any]:
    with open_store(url) as store:
        session = Session("lib", window=6000, reserved_output=500, tools=TOOLS, store=store)
        session.add([{"role": "system", "content": "You are careful."}])
        for i in range(40):
            session.add([user(f"step {i}: " + "log line with words " * 80), {"role": "assistant", "content": "ok"}])
            session.prepare()
        session.save_status()
        return session.status().figures()


def test_a_library_session_shows_the_same_figures_everywhere(
    store_url: str, service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer
) -> None:
    library = _library_session(store_url)
    assert library["last_layer"] is not None and library["tool_schemas"] > 0
    inspected = _cli("inspect", "lib", "--store", store_url, "--json")["figures"]
    listed = _cli("sessions", "list", "--store", store_url, "--json")["sessions"][0]["figures"]
    service = service_factory(make_settings(store_url, upstream.base_url))
    api = service.client.get("/v1/sessions/lib").json()
    api_listed = service.client.get("/v1/sessions").json()["data"][0]
    _same(library, inspected, listed, api["figures"], api_listed["figures"])
    assert api["timeline"]["points"][-1][1] == library["used"]
    assert [c["layer"] for c in api["timeline"]["compactions"]]


def test_a_demo_session_shows_the_same_figures_everywhere(
    store_url: str, service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, tmp_path: Any
) -> None:
    demo = _cli(
        "demo", "--turns", "40", "--no-live", "--json", "--store", store_url, "--report", str(tmp_path / "r.html")
    )
    inspected = _cli("inspect", "demo-7", "--store", store_url, "--json")["figures"]
    listed = _cli("sessions", "list", "--store", store_url, "--json")["sessions"][0]["figures"]
    service = service_factory(make_settings(store_url, upstream.base_url))
    api = service.client.get("/v1/sessions/demo-7").json()["figures"]
    _same(inspected, listed, api)
    assert (inspected["window"], inspected["effective"]) == (demo["window"], demo["budget"])
    assert inspected["tool_schemas"] == demo["tool_schemas"]


def test_a_proxied_session_shows_the_same_figures_everywhere(
    store_url: str, service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer
) -> None:
    service = service_factory(make_settings(store_url, upstream.base_url, metrics_sessions=10))
    headers = {"X-Session-Id": "prox"}
    history = [SYSTEM]
    for i in range(12):
        history.append(user(f"question {i}: " + "words of the question " * 40))
        r = service.client.post("/v1/chat/completions", json=chat(*history), headers=headers)
        assert r.status_code == 200, r.text
        history.append(r.json()["choices"][0]["message"])
    # the metrics gauge takes the ratio of the last prepared view: prepare one, nothing appended after it
    view = service.client.get("/v1/sessions/prox/view").json()
    api = service.client.get("/v1/sessions/prox").json()
    assert view["status"]["ratio"] == api["figures"]["ratio"]
    listed = service.client.get("/v1/sessions").json()["data"][0]["figures"]
    _same(api["figures"], listed)
    assert api["status"]["used"] == api["figures"]["used"] and api["status"]["budget"] == api["figures"]["effective"]
    metrics = service.client.get("/metrics").text
    line = next(x for x in metrics.splitlines() if x.startswith("contextwarden_context_utilization{") and "prox" in x)
    assert float(line.rsplit(" ", 1)[1]) == api["figures"]["ratio"]


def test_a_proxied_session_saves_the_figures_of_its_latest_turn(
    store_url: str, service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer
) -> None:
    service = service_factory(make_settings(store_url, upstream.base_url))
    headers = {"X-Session-Id": "turns"}
    history = [SYSTEM]
    for i in range(13):
        history.append(user(f"question {i}: " + "words of the question " * 40))
        r = service.client.post("/v1/chat/completions", json=chat(*history), headers=headers)
        assert r.status_code == 200, r.text
        history.append(r.json()["choices"][0]["message"])
        if i < 3 or i > 10:  # right after a turn, what the store holds is what the service shows
            api = service.client.get("/v1/sessions/turns").json()
            inspected = _cli("inspect", "turns", "--store", store_url, "--json")["figures"]
            listed = _cli("sessions", "list", "--store", store_url, "--json")["sessions"][0]["figures"]
            _same(api["figures"], inspected, listed)
            assert api["figures"]["turn"] == inspected["turn"] == i + 1
            assert api["timeline"]["points"][-1] == inspected_points(store_url, "turns")[-1]


def inspected_points(store_url: str, session_id: str) -> list[list[Any]]:
    from contextwarden.timeline import STATUS_SLOT

    with open_store(store_url) as store:
        record, _ = store.load_state(session_id, slot=STATUS_SLOT, tenant="default")
    assert record is not None
    points: list[list[Any]] = record["timeline"]["points"]
    return points


def test_a_request_for_an_unknown_model_leaves_no_session(service: Running) -> None:
    r = service.client.post(
        "/v1/chat/completions", json={"model": "no-such-model", "messages": [user("hi")]}, headers={"X-Session-Id": "x"}
    )
    assert r.status_code == 400
    assert service.client.get("/v1/sessions").json()["data"] == []


def test_a_request_the_upstream_refuses_leaves_no_new_session(
    service_factory: Callable[[Settings], Running], sqlite_url: str
) -> None:
    refusal = ScriptedError(status=400, message="model not found", type="invalid_request_error")
    with ScriptedOpenAIServer(script=[refusal], default="ok", model="scripted-model") as refusing:
        service = service_factory(make_settings(sqlite_url, refusing.base_url))
        refused = service.client.post("/v1/chat/completions", json=chat(user("hi")), headers={"X-Session-Id": "new"})
        assert refused.status_code == 400
        assert service.client.get("/v1/sessions").json()["data"] == []
        # a session that existed before keeps its history when a later request is refused
        ok = service.client.post("/v1/chat/completions", json=chat(user("hi")), headers={"X-Session-Id": "new"})
        assert ok.status_code == 200
        assert [s["session_id"] for s in service.client.get("/v1/sessions").json()["data"]] == ["new"]

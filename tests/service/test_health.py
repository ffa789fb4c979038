"""/healthz, /readyz and /metrics over real HTTP."""

from __future__ import annotations

import re
from collections.abc import Callable

from contextwarden.settings import Settings
from contextwarden.testing import ScriptedOpenAIServer

from .conftest import SYSTEM, Running, chat, make_settings, user


def _value(metrics: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name + (f"{{{wanted}}}" if labels else "")) + r" ([0-9.e+-]+)"
    match = re.search(pattern, metrics)
    assert match is not None, f"{name} {labels} not in /metrics"
    return float(match.group(1))


def test_metrics_count_requests_tokens_compactions_and_bound_the_session_gauges(
    service_factory: Callable[[Settings], Running], upstream: ScriptedOpenAIServer, sqlite_url: str
) -> None:
    service = service_factory(make_settings(sqlite_url, upstream.base_url, metrics_sessions=2))
    for name in ("m1", "m2", "m3"):
        r = service.client.post("/v1/chat/completions", json=chat(user("hi")), headers={"X-Session-Id": name})
        assert r.status_code == 200
    history = [SYSTEM]
    for i in range(30):
        history.append(user(f"step {i} " + "verbose output line " * 25))
        r = service.client.post("/v1/chat/completions", json=chat(*history), headers={"X-Session-Id": "big"})
        history.append(r.json()["choices"][0]["message"])
    service.client.get("/v1/sessions/nope")
    text = service.client.get("/metrics").text
    assert _value(text, "contextwarden_requests_total", route="chat.completions", status="200") == 33
    assert _value(text, "contextwarden_requests_total", route="sessions", status="404") == 1
    assert _value(text, "contextwarden_request_seconds_count", route="chat.completions") == 33
    assert _value(text, "contextwarden_tokens_total", kind="input") > 0
    assert _value(text, "contextwarden_tokens_total", kind="output") > 0
    assert _value(text, "contextwarden_tokens_total", kind="saved") > 0
    assert _value(text, "contextwarden_compaction_runs_total") >= 1
    assert _value(text, "contextwarden_turns_total") >= 33
    assert _value(text, "contextwarden_requests_in_flight") == 0
    gauges = re.findall(r'contextwarden_context_utilization\{session="([^"]+)"\}', text)
    assert sorted(gauges) == ["default/big", "default/m3"]  # the two most recently active


def test_healthz_and_readyz(service: Running, upstream: ScriptedOpenAIServer) -> None:
    assert service.client.get("/healthz").json() == {"status": "ok"}
    ready = service.client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"store": "ok", "events": "ok", "upstream": "ok"}
    upstream.stop()
    down = service.client.get("/readyz")
    assert down.status_code == 503
    assert down.json()["checks"]["upstream"].startswith("cannot connect to http://127.0.0.1:")
    assert down.json()["checks"]["store"] == "ok"

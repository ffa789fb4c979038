"""The upstream's proxy comes from the environment, read once when the service starts."""

from __future__ import annotations

import pytest

from contextwarden.service.upstream import Upstream, env_proxy


def _clear(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def test_the_proxy_for_the_upstreams_scheme_is_used_unless_no_proxy_exempts_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _clear(monkeypatch)
    assert env_proxy("https://api.example.com/v1/chat/completions") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://user:pw@proxy.internal:3128")
    monkeypatch.setenv("HTTP_PROXY", "http://plain.internal:8080")
    assert env_proxy("https://api.example.com/v1") == "http://user:pw@proxy.internal:3128"
    assert env_proxy("http://models.internal:8000/v1") == "http://plain.internal:8080"
    monkeypatch.setenv("NO_PROXY", "models.internal,localhost")
    assert env_proxy("http://models.internal:8000/v1") is None
    assert env_proxy("http://localhost:8000/v1") is None
    assert env_proxy("https://api.example.com/v1") == "http://user:pw@proxy.internal:3128"


def test_an_upstream_reads_its_proxy_when_it_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    upstream = Upstream(
        "https://api.example.com/v1", api_key=None, forward_client_key=False, timeout=5, connect_timeout=1
    )
    monkeypatch.delenv("HTTPS_PROXY")  # later changes to the environment do not matter: it was read once
    assert upstream.proxy == "http://proxy.internal:3128"
    direct = Upstream("http://127.0.0.1:9/v1", api_key=None, forward_client_key=False, timeout=5, connect_timeout=1)
    assert direct.proxy is None

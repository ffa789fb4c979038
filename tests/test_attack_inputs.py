"""Bad input to the library and the configuration gets a typed error that names it, never a raw one."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from contextwarden.cli import app
from contextwarden.exceptions import ConfigError, UsageError
from contextwarden.settings import Settings, load_settings, validate_config_file
from contextwarden.stores import open_store


def test_a_lone_surrogate_in_a_session_s_model_is_a_usage_error() -> None:
    store = open_store("memory://")
    with pytest.raises(UsageError, match="lone surrogate"):
        store.create_session("x", model="m\ud800")


def test_an_unknown_redis_url_option_is_refused_before_any_request() -> None:
    with pytest.raises(ConfigError, match="unknown option 'bogus'"):
        open_store("redis://127.0.0.1:6379/0?prefix=p&bogus=1")
    with pytest.raises((ValueError, ConfigError), match="unknown option .bogus."):
        Settings(store={"url": "redis://127.0.0.1:6379/0?bogus=1"}).check()


def test_a_malformed_upstream_url_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="not a valid URL"):
        Settings(service={"upstream_url": "http://[::1"})
    result = CliRunner().invoke(app, ["serve", "--upstream", "http://[::1"])
    assert result.exit_code != 0 and "Traceback" not in result.output and "--upstream" in result.output


def test_a_deep_json_variable_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTWARDEN_COMPACTION__CASCADE", "[" * 5000 + "]" * 5000)
    with pytest.raises(ConfigError, match="CONTEXTWARDEN_COMPACTION__CASCADE"):
        load_settings()
    problems = validate_config_file(None)
    assert problems and "deeper than" in problems[0].message
    result = CliRunner().invoke(app, ["config", "show"])
    assert "RecursionError" not in result.output and "unexpected" not in result.output


@pytest.mark.parametrize("url", ["bogus://", "redis://127.0.0.1:6379/0?bogus=1"])
def test_bench_stores_refuses_a_bad_redis_url_cleanly(url: str) -> None:
    result = CliRunner().invoke(app, ["bench", "stores", "--redis-url", url])
    assert result.exit_code == 2 and "--redis-url" in result.output and "unexpected" not in result.output


def test_bench_proxy_against_an_unreachable_redis_is_a_clean_error() -> None:
    result = CliRunner().invoke(app, ["bench", "proxy", "--stores", "redis", "--redis-url", "redis://127.0.0.1:1/0"])
    assert result.exit_code == 2 and "does not answer" in result.output and "unexpected" not in result.output


def test_the_service_binds_to_loopback_by_default_and_serve_knows_a_loopback_host() -> None:
    from contextwarden.cli.serve import _loopback

    assert Settings().service.host == "127.0.0.1"
    assert _loopback("127.0.0.1") and _loopback("::1") and _loopback("localhost")
    assert not _loopback("0.0.0.0") and not _loopback("192.168.1.4")

from __future__ import annotations

from contextwarden.usage import RequestUsage, SessionUsage


def test_request_usage_adds_up() -> None:
    a = RequestUsage(input_tokens=100, output_tokens=10, cache_read_tokens=80, details={"reasoning_tokens": 4})
    b = RequestUsage(
        input_tokens=50, output_tokens=5, cache_write_tokens=50, details={"reasoning_tokens": 1, "audio": 2}
    )
    total = a + b
    assert (total.input_tokens, total.output_tokens, total.cache_read_tokens, total.cache_write_tokens) == (
        150,
        15,
        80,
        50,
    )
    assert total.details == {"reasoning_tokens": 5, "audio": 2}
    assert total.total_tokens == 165


def test_session_usage_accumulates_requests() -> None:
    session = SessionUsage()
    session.incr(RequestUsage(input_tokens=100, output_tokens=10, cache_read_tokens=60))
    session.incr(RequestUsage(input_tokens=120, output_tokens=12, details={"reasoning_tokens": 3}))
    assert (session.requests, session.input_tokens, session.output_tokens, session.cache_read_tokens) == (
        2,
        220,
        22,
        60,
    )
    assert session.details == {"reasoning_tokens": 3} and session.total_tokens == 242
    merged = session + SessionUsage(requests=1, input_tokens=1)
    assert merged.requests == 3 and merged.input_tokens == 221 and session.requests == 2


def test_unreported_usage_is_its_own_state() -> None:
    missing = RequestUsage.unreported()
    assert missing.reported is False and missing.total_tokens == 0
    assert RequestUsage().reported is True  # a request that really used nothing
    assert (RequestUsage(input_tokens=5) + missing).reported is False  # a sum with a gap says so
    session = SessionUsage()
    session.incr(RequestUsage(input_tokens=100, output_tokens=10))
    session.incr(missing)
    assert (session.requests, session.unreported, session.input_tokens) == (1, 1, 100)
    assert (session + session).unreported == 2


def test_clients_tell_missing_usage_from_zero_usage() -> None:
    from contextwarden.llm.anthropic import parse_usage as anthropic_usage
    from contextwarden.llm.openai import parse_usage as openai_usage

    for parse in (openai_usage, anthropic_usage):
        assert parse(None).reported is False and parse({}).reported is False
        assert parse({"note": "n/a"}).reported is False
    assert openai_usage({"prompt_tokens": 0, "completion_tokens": 0}).reported is True
    assert openai_usage({"prompt_tokens": 12, "completion_tokens": 3}).input_tokens == 12
    assert anthropic_usage({"input_tokens": 7, "output_tokens": 1}).input_tokens == 7

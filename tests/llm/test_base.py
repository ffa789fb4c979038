"""RetryPolicy decisions and the response/stream value types."""

from __future__ import annotations

import email.utils
import time

import pytest

from contextwarden.exceptions import ConfigError
from contextwarden.llm import ModelResponse, RetryPolicy
from contextwarden.messages import Message, ToolCall


def test_backoff_doubles_and_is_capped() -> None:
    policy = RetryPolicy(max_retries=10, initial_delay=0.5, max_delay=3.0, jitter=0)
    assert [policy.wait_before(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_jitter_stays_within_its_share() -> None:
    policy = RetryPolicy(max_retries=3, initial_delay=1.0, jitter=0.25)
    waits = [policy.backoff(1) for _ in range(200)]
    assert all(0.75 <= w <= 1.0 for w in waits)
    assert len(set(waits)) > 1


def test_no_retry_past_max_retries() -> None:
    policy = RetryPolicy(max_retries=2)
    assert policy.wait_before(2) is not None
    assert policy.wait_before(3) is None
    assert RetryPolicy(max_retries=0).wait_before(1) is None


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "-3"}, 0.0),
    ],
)
def test_retry_after_replaces_backoff(headers: dict[str, str], expected: float) -> None:
    assert RetryPolicy(initial_delay=100).wait_before(1, headers) == expected


def test_retry_after_as_an_http_date() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    wait = RetryPolicy().wait_before(1, {"retry-after": when})
    assert wait is not None and 27 <= wait <= 31


def test_retry_after_beyond_the_cap_and_x_should_retry() -> None:
    policy = RetryPolicy(max_retry_after=60)
    assert policy.wait_before(1, {"retry-after": "61"}) is None
    assert policy.wait_before(1, {"x-should-retry": "false"}) is None
    assert policy.wait_before(1, {"retry-after": "garbage"}) is not None


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (400, False),
        (401, False),
        (404, False),
        (408, True),
        (409, True),
        (429, True),
        (500, True),
        (503, True),
        (529, True),
    ],
)
def test_retryable_statuses(status: int, retryable: bool) -> None:
    assert RetryPolicy.is_retryable_status(status) is retryable


@pytest.mark.parametrize("kwargs", [{"max_retries": -1}, {"initial_delay": -1.0}, {"jitter": 1.5}])
def test_invalid_policy(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="RetryPolicy"):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_model_response_shortcuts() -> None:
    call = ToolCall(call_id="c", name="f", arguments="{}")
    response = ModelResponse(message=Message.assistant("hi", tool_calls=[call]))
    assert response.text == "hi" and response.tool_calls == (call,)

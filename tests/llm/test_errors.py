"""Every provider's "prompt too long" reply becomes ContextOverflowError; everything else an UpstreamError."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextwarden.exceptions import ContextOverflowError, UpstreamError
from contextwarden.llm import OpenAIChatModel, RetryPolicy, classify_error, is_context_overflow
from contextwarden.llm.errors import transport_error
from contextwarden.messages import Message
from contextwarden.testing import ScriptedError, ScriptedOpenAIServer

URL = "http://localhost:8000/v1/chat/completions"


def _openai(message: str, code: str | None = "context_length_exceeded", type_: str = "invalid_request_error") -> str:
    return json.dumps({"error": {"message": message, "type": type_, "param": "messages", "code": code}})


# (id, status, body, limit, requested): bodies as the servers send them.
OVERFLOWS: list[tuple[str, int, Any, int | None, int | None]] = [
    (
        "openai-chat",
        400,
        _openai(
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens "
            "(including 212 in the functions). Please reduce the length of the messages or functions."
        ),
        128000,
        130412,
    ),
    (
        "openai-configured-limit",
        400,
        _openai(
            "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 509178 tokens. "
            "Please reduce the length of the messages."
        ),
        272000,
        509178,
    ),
    (
        "openai-responses-code-only",
        400,
        _openai("Your input exceeds the context window of this model. Please adjust your input and try again."),
        None,
        None,
    ),
    (
        "openai-code-without-wording",
        400,
        _openai("Request rejected.", code="context_length_exceeded"),
        None,
        None,
    ),
    (
        "anthropic",
        400,
        {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "prompt is too long: 209303 tokens > 200000 maximum"},
        },
        200000,
        209303,
    ),
    (
        "anthropic-with-max-tokens",
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "input length and `max_tokens` exceed context limit: 179413 + 32768 > 200000, "
                "decrease input length or `max_tokens` and try again",
            },
        },
        200000,
        212181,
    ),
    (
        "gemini-2.0",
        400,
        {
            "error": {
                "code": 400,
                "message": "The input token count (2800010) exceeds the maximum number of tokens allowed (1048575).",
                "status": "INVALID_ARGUMENT",
            }
        },
        1048575,
        2800010,
    ),
    (
        "gemini-2.5-in-a-list",
        400,
        [
            {
                "error": {
                    "code": 400,
                    "message": "The input token count exceeds the maximum number of tokens allowed (1048576).",
                    "status": "INVALID_ARGUMENT",
                }
            }
        ],
        1048576,
        None,
    ),
    (
        "vllm-classic",
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
            "(4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        4096,
        5000,
    ),
    (
        "vllm-max-tokens",
        400,
        {
            "error": {
                "message": "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context "
                "length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        },
        4096,
        10778,
    ),
    (
        "vllm-decoder-prompt",
        400,
        {
            "object": "error",
            "message": "The decoder prompt (length 5000) is longer than the maximum model length of 4096. Make sure "
            "that `max_model_len` is no smaller than the number of text tokens.",
            "type": "BadRequestError",
            "code": 400,
        },
        4096,
        5000,
    ),
    (
        "vllm-input-prompt",
        400,
        {"error": {"message": "Input prompt (35247 tokens) is too long and exceeds limit of 32768", "code": 400}},
        32768,
        35247,
    ),
    (
        "vllm-prompt-longer",
        400,
        {
            "error": {
                "message": "The prompt (40014 tokens) is longer than the model's context length (32768).",
                "code": 400,
            }
        },
        32768,
        40014,
    ),
    ("ollama-native", 400, {"error": "the input length exceeds the context length"}, None, None),
    (
        "ollama-openai-compat",
        500,
        {
            "error": {
                "message": "input length exceeds the context length",
                "type": "api_error",
                "param": None,
                "code": None,
            }
        },
        None,
        None,
    ),
    ("ollama-short", 400, {"error": "context length exceeded"}, None, None),
    (
        "llamacpp-old",
        400,
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
            }
        },
        None,
        None,
    ),
    (
        "llamacpp-new",
        400,
        {
            "error": {
                "code": 400,
                "message": "request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 4476,
                "n_ctx": 4096,
            }
        },
        4096,
        4476,
    ),
    (
        "litellm-wrapping-anthropic",
        400,
        {
            "error": {
                "message": 'litellm.BadRequestError: litellm.ContextWindowExceededError: AnthropicError - {"type":'
                '"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210543 tokens > '
                '200000 maximum"}}\nReceived Model Group=anthropic/claude-3-5-sonnet',
                "type": None,
                "param": None,
                "code": "400",
            }
        },
        200000,
        210543,
    ),
    (
        "litellm-plain",
        400,
        {
            "error": {
                "message": "litellm.ContextWindowExceededError: ContextWindowExceededError: OpenAIException - context"
                " window is full",
                "type": None,
                "param": None,
                "code": "400",
            }
        },
        None,
        None,
    ),
    (
        "mistral",
        400,
        {
            "object": "error",
            "message": "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum "
            "context length",
            "type": "invalid_request_error",
            "code": 3051,
        },
        32768,
        40000,
    ),
    ("bedrock", 400, {"message": "Input is too long for requested model."}, None, None),
]


@pytest.mark.parametrize(
    ("status", "body", "limit", "requested"), [o[1:] for o in OVERFLOWS], ids=[o[0] for o in OVERFLOWS]
)
def test_each_providers_overflow_becomes_context_overflow_error(
    status: int, body: Any, limit: int | None, requested: int | None
) -> None:
    error = classify_error(status, body, url=URL)
    assert isinstance(error, ContextOverflowError)
    assert (error.limit, error.requested) == (limit, requested)
    assert error.status_code == status and error.url == URL
    text = str(error)
    assert URL in text and "compact the conversation" in text
    if requested is not None:
        assert f"requested={requested}" in text


@pytest.mark.parametrize("as_type", ["str", "bytes", "decoded"])
def test_body_may_be_text_bytes_or_decoded_json(as_type: str) -> None:
    decoded = {"error": {"message": "prompt is too long: 300 tokens > 200 maximum"}}
    body: Any = {"str": json.dumps(decoded), "bytes": json.dumps(decoded).encode(), "decoded": decoded}[as_type]
    error = classify_error(400, body, url=URL)
    assert isinstance(error, ContextOverflowError) and (error.limit, error.requested) == (200, 300)


@pytest.mark.parametrize(
    ("status", "body", "hint"),
    [
        # A TPM rate limit talks about "Requested" tokens but is not a window overflow.
        (
            429,
            _openai(
                "Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, "
                "Requested 50000. The input or output tokens must be reduced in order to run successfully.",
                code="rate_limit_exceeded",
                type_="tokens",
            ),
            "max_retries",
        ),
        (
            400,
            _openai(
                "max_tokens is too large: 50000. This model supports at most 16384 completion tokens.",
                code=None,
            ),
            "request parameters",
        ),
        (401, _openai("Incorrect API key provided: sk-abc.", code="invalid_api_key"), "api_key"),
        (404, _openai("The model `gpt-9` does not exist", code="model_not_found"), "base_url"),
        (500, "Internal Server Error", "server's logs"),
        (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "retry later"),
        (413, {"type": "error", "error": {"type": "request_too_large", "message": "Request exceeds size"}}, "shrink"),
    ],
)
def test_other_errors_are_upstream_errors_with_a_hint(status: int, body: Any, hint: str) -> None:
    error = classify_error(status, body, url=URL)
    assert type(error) is UpstreamError
    assert error.status_code == status and error.url == URL
    assert f"HTTP {status}" in str(error) and hint in str(error)


def test_the_provider_message_is_quoted_and_bounded() -> None:
    error = classify_error(500, {"error": {"message": "x" * 5000}}, url=URL)
    assert len(str(error)) < 900 and "xxx..." in str(error)


def test_an_empty_body() -> None:
    error = classify_error(502, None, url=None)
    assert type(error) is UpstreamError and "the model server returned HTTP 502" in str(error)


def test_is_context_overflow() -> None:
    assert is_context_overflow("Error: prompt is too long: 5 tokens > 4 maximum")
    assert not is_context_overflow("rate limit exceeded, Limit 30000, Requested 50000")


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("connect", "Cannot reach"), ("timeout", "did not answer within 2.5s"), ("disconnect", "closed the connection")],
)
def test_transport_errors(kind: Any, expected: str) -> None:
    error = transport_error(URL, kind, "detail", timeout=2.5)
    assert expected in str(error) and error.url == URL and error.status_code is None


@pytest.mark.parametrize(
    ("status", "body", "limit", "requested"), [o[1:] for o in OVERFLOWS], ids=[o[0] for o in OVERFLOWS]
)
def test_overflow_bodies_over_http(
    server: ScriptedOpenAIServer, status: int, body: Any, limit: int | None, requested: int | None
) -> None:
    """The same bodies sent by a real server reach the caller as ContextOverflowError, not retried."""
    server.push(ScriptedError(status=status, body=body if isinstance(body, str) else json.dumps(body)), "not reached")
    with OpenAIChatModel("m", base_url=server.base_url, retry=RetryPolicy(initial_delay=0.001)) as model:
        with pytest.raises(ContextOverflowError) as info:
            model.request([Message.user("long")])
    assert (info.value.limit, info.value.requested, info.value.status_code) == (limit, requested, status)
    assert len(server.requests) == 1

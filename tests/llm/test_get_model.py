"""`get_model` / `get_async_model` resolve spec strings without reading the environment."""

from __future__ import annotations

import pytest

import contextwarden.llm
from contextwarden.exceptions import ConfigError
from contextwarden.llm import (
    AnthropicModel,
    AsyncAnthropicModel,
    AsyncOpenAIChatModel,
    AsyncTestModel,
    OpenAIChatModel,
    TestModel,
    get_async_model,
    get_model,
)
from contextwarden.messages import Message
from contextwarden.testing import ScriptedOpenAIServer

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("spec", "cls", "model_name", "base_url"),
    [
        ("openai:gpt-4o", OpenAIChatModel, "gpt-4o", "https://api.openai.com/v1"),
        ("anthropic:claude-sonnet-4-5", AnthropicModel, "claude-sonnet-4-5", "https://api.anthropic.com"),
        ("ollama:llama3.1:8b", OpenAIChatModel, "llama3.1:8b", "http://localhost:11434/v1"),
        ("ollama:qwen3:8b@http://gpu-box:11434/v1", OpenAIChatModel, "qwen3:8b", "http://gpu-box:11434/v1"),
        (
            "openai-compatible:Qwen/Qwen2.5-7B-Instruct@http://localhost:8000/v1",
            OpenAIChatModel,
            "Qwen/Qwen2.5-7B-Instruct",
            "http://localhost:8000/v1",
        ),
        (
            "openai-compatible:gpt-4o@https://litellm.internal:4000",
            OpenAIChatModel,
            "gpt-4o",
            "https://litellm.internal:4000",
        ),
    ],
)
def test_specs(spec: str, cls: type, model_name: str, base_url: str) -> None:
    model = get_model(spec)
    try:
        assert type(model) is cls
        assert model.model_name == model_name
        assert model.base_url == base_url  # type: ignore[attr-defined]
    finally:
        model.close()  # type: ignore[attr-defined]


def test_test_spec() -> None:
    assert isinstance(get_model("test"), TestModel)
    assert get_model("test").request([Message.user("x")]).text == "ok"


async def test_async_specs() -> None:
    assert isinstance(get_async_model("test"), AsyncTestModel)
    for spec, cls in [
        ("openai:gpt-4o", AsyncOpenAIChatModel),
        ("anthropic:claude-sonnet-4-5", AsyncAnthropicModel),
        ("ollama:llama3.1", AsyncOpenAIChatModel),
    ]:
        model = get_async_model(spec)
        assert type(model) is cls
        await model.aclose()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("gpt-4o", "no provider prefix"),
        ("openai:", "no provider prefix"),
        ("openai-compatible:llama3", "names no server"),
        ("mystery:model", "unknown model provider 'mystery'"),
    ],
)
def test_bad_specs(spec: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        get_model(spec)
    assert info.value.key == "model"


def test_options_reach_the_server(server: ScriptedOpenAIServer) -> None:
    server.push("hi")
    model = get_model(
        f"openai-compatible:local-model@{server.base_url}", api_key="sk-local", headers={"x-run": "7"}, max_retries=0
    )
    try:
        assert model.request([Message.user("x")], max_tokens=5).text == "hi"
    finally:
        model.close()  # type: ignore[attr-defined]
    assert server.received[0].headers["authorization"] == "Bearer sk-local"
    assert server.received[0].headers["x-run"] == "7"
    assert server.requests[0]["model"] == "local-model" and server.requests[0]["max_tokens"] == 5


def test_openai_uses_max_completion_tokens(server: ScriptedOpenAIServer) -> None:
    server.push("hi")
    model = get_model("openai:o3-mini", base_url=server.base_url)
    try:
        model.request([Message.user("x")], max_tokens=5)
    finally:
        model.close()  # type: ignore[attr-defined]
    assert server.requests[0]["max_completion_tokens"] == 5 and "max_tokens" not in server.requests[0]


def test_the_flag_is_read_at_request_time(server: ScriptedOpenAIServer) -> None:
    model = get_model("openai:gpt-4o")
    try:
        assert contextwarden.llm.ALLOW_MODEL_REQUESTS is False
        with pytest.raises(contextwarden.UsageError, match="ALLOW_MODEL_REQUESTS"):
            model.request([Message.user("x")])
    finally:
        model.close()  # type: ignore[attr-defined]


def test_unknown_attribute() -> None:
    with pytest.raises(AttributeError):
        contextwarden.llm.NoSuchModel  # noqa: B018

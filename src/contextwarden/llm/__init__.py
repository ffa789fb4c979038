"""Model clients: the `Model` / `AsyncModel` contract, HTTP clients, test doubles and `get_model`.

The HTTP clients (`OpenAIChatModel`, `AnthropicModel` and their async twins) need the ``llm``
extra (httpx) and are imported on first use; the contract and the test models need nothing.

Set ``contextwarden.llm.ALLOW_MODEL_REQUESTS = False`` in a test suite's ``conftest.py`` to make
every HTTP client refuse to send to anything but this machine, so no test makes a paid call.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..exceptions import ConfigError
from .base import (
    ANTHROPIC_BASE_URL,
    OLLAMA_BASE_URL,
    OPENAI_BASE_URL,
    AsyncModel,
    FinishReason,
    InvalidToolCall,
    Model,
    ModelResponse,
    ResponseDone,
    RetryPolicy,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolSchema,
)
from .errors import classify_error, is_context_overflow
from .test import AsyncFunctionModel, AsyncTestModel, FunctionModel, RecordedRequest, TestModel

if TYPE_CHECKING:
    from .anthropic import AnthropicModel, AsyncAnthropicModel
    from .openai import AsyncOpenAIChatModel, OpenAIChatModel

__all__ = [
    "ALLOW_MODEL_REQUESTS",
    "AnthropicModel",
    "AsyncAnthropicModel",
    "AsyncFunctionModel",
    "AsyncModel",
    "AsyncOpenAIChatModel",
    "AsyncTestModel",
    "FinishReason",
    "FunctionModel",
    "InvalidToolCall",
    "Model",
    "ModelResponse",
    "OpenAIChatModel",
    "RecordedRequest",
    "ResponseDone",
    "RetryPolicy",
    "StreamEvent",
    "TestModel",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallDelta",
    "ToolSchema",
    "classify_error",
    "get_async_model",
    "get_model",
    "is_context_overflow",
]

ALLOW_MODEL_REQUESTS: bool = True
"""When False, the HTTP clients refuse to send requests anywhere but localhost (tests set it)."""

_LAZY_EXPORTS = {
    "OpenAIChatModel": ".openai",
    "AsyncOpenAIChatModel": ".openai",
    "AnthropicModel": ".anthropic",
    "AsyncAnthropicModel": ".anthropic",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY_EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(module_name, __name__)
    except ModuleNotFoundError as exc:
        if exc.name != "httpx":
            raise
        raise ImportError(
            f"`contextwarden.llm.{name}` needs httpx; install the extra: pip install 'contextwarden[llm]'"
        ) from exc
    return getattr(module, name)


_SPEC_HELP = (
    "use 'openai:<model>', 'anthropic:<model>', 'ollama:<model>[@<base_url>]', "
    "'openai-compatible:<model>@<base_url>' or 'test'"
)
_AT_URL = re.compile(r"^(?P<model>.+?)@(?P<url>https?://\S+)$")


def _parse_spec(spec: str) -> tuple[str, str, str | None]:
    """``(provider, model, base_url)`` of a model spec."""
    if spec == "test":
        return "test", "test", None
    provider, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ConfigError(f"model spec {spec!r} has no provider prefix; {_SPEC_HELP}.", key="model")
    match = _AT_URL.match(rest)
    model, url = (match["model"], match["url"]) if match else (rest, None)
    if provider == "openai":
        return provider, model, url or OPENAI_BASE_URL
    if provider == "anthropic":
        return provider, model, url or ANTHROPIC_BASE_URL
    if provider == "ollama":
        return "openai-compatible", model, url or OLLAMA_BASE_URL
    if provider == "openai-compatible":
        if url is None:
            raise ConfigError(
                f"model spec {spec!r} names no server; write 'openai-compatible:<model>@<base_url>', "
                "e.g. 'openai-compatible:qwen2.5-7b@http://localhost:8000/v1'.",
                key="model",
            )
        return provider, model, url
    raise ConfigError(f"unknown model provider {provider!r} in {spec!r}; {_SPEC_HELP}.", key="model")


def _options(
    provider: str,
    model: str,
    url: str | None,
    *,
    api_key: str | None,
    base_url: str | None,
    timeout: float | None,
    max_retries: int | None,
    headers: Mapping[str, str] | None,
) -> dict[str, Any]:
    options: dict[str, Any] = {
        "base_url": base_url or url,
        "api_key": api_key,
        "timeout": timeout,
        "max_retries": max_retries,
        "headers": headers,
    }
    if provider == "openai":
        # OpenAI's reasoning models reject `max_tokens`; every current OpenAI model takes this one.
        # Other servers keep `max_tokens` (use the openai-compatible prefix for them).
        options["max_tokens_field"] = "max_completion_tokens"
    return options


def get_model(
    spec: str,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    timeout: float | None = None,
    max_retries: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> Model:
    """A synchronous model from a spec string.

    The library reads no environment variables: pass ``api_key`` yourself.

    Args:
        spec: ``"openai:gpt-4o"``, ``"anthropic:claude-sonnet-4-5"``, ``"ollama:llama3.1:8b"``,
            ``"openai-compatible:<model>@<base_url>"`` or ``"test"`` (a `TestModel` answering "ok").
        api_key: The provider's API key, if it needs one.
        base_url: Overrides the provider's default URL.
        timeout: Request timeout in seconds.
        max_retries: Retries on rate limits, server errors and connection failures.
        headers: Extra headers for every request.

    Raises:
        ConfigError: The spec is not one of the forms above.
    """
    provider, model, url = _parse_spec(spec)
    if provider == "test":
        return TestModel()
    options = _options(
        provider,
        model,
        url,
        api_key=api_key,
        base_url=base_url,
        timeout=timeout,
        max_retries=max_retries,
        headers=headers,
    )
    if provider == "anthropic":
        from .anthropic import AnthropicModel

        return AnthropicModel(model, **options)
    from .openai import OpenAIChatModel

    return OpenAIChatModel(model, **options)


def get_async_model(
    spec: str,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    timeout: float | None = None,
    max_retries: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> AsyncModel:
    """The async twin of `get_model` (same specs and arguments)."""
    provider, model, url = _parse_spec(spec)
    if provider == "test":
        return AsyncTestModel()
    options = _options(
        provider,
        model,
        url,
        api_key=api_key,
        base_url=base_url,
        timeout=timeout,
        max_retries=max_retries,
        headers=headers,
    )
    if provider == "anthropic":
        from .anthropic import AsyncAnthropicModel

        return AsyncAnthropicModel(model, **options)
    from .openai import AsyncOpenAIChatModel

    return AsyncOpenAIChatModel(model, **options)

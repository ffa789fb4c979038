from __future__ import annotations

import pytest

from contextwarden.exceptions import ConfigError, UnknownModelError
from contextwarden.models import ModelInfo, list_models, lookup_model, register_model


@pytest.mark.parametrize(
    ("query", "name", "window", "max_output"),
    [
        ("gpt-4o", "gpt-4o", 128_000, 16_384),
        ("gpt-4o-2024-08-06", "gpt-4o", 128_000, 16_384),
        ("openai/gpt-4o", "gpt-4o", 128_000, 16_384),
        ("GPT-4o-mini-2024-07-18", "gpt-4o-mini", 128_000, 16_384),
        ("gpt-4.1-2025-04-14", "gpt-4.1", 1_047_576, 32_768),
        ("gpt-4.1-nano", "gpt-4.1-nano", 1_047_576, 32_768),
        ("gpt-4-0613", "gpt-4", 8_192, 8_192),
        ("o1-2024-12-17", "o1", 200_000, 100_000),
        ("o3-mini-2025-01-31", "o3-mini", 200_000, 100_000),
        ("o4-mini", "o4-mini", 200_000, 100_000),
        ("gpt-5-mini", "gpt-5-mini", 400_000, 128_000),
        ("claude-3-5-sonnet-20241022", "claude-3-5-sonnet", 200_000, 8_192),
        ("anthropic/claude-3.5-sonnet", "claude-3-5-sonnet", 200_000, 8_192),
        ("claude-3-7-sonnet-20250219", "claude-3-7-sonnet", 200_000, 64_000),
        ("claude-sonnet-4-20250514", "claude-sonnet-4", 200_000, 64_000),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5", 200_000, 64_000),
        ("claude-opus-4-1-20250805", "claude-opus-4-1", 200_000, 32_000),
        ("claude-haiku-4-5", "claude-haiku-4-5", 200_000, 64_000),
        ("us.anthropic.claude-3-7-sonnet-20250219-v1:0", "claude-3-7-sonnet", 200_000, 64_000),
        ("claude-3-5-sonnet@20240620", "claude-3-5-sonnet", 200_000, 8_192),
        ("models/gemini-2.5-pro", "gemini-2.5-pro", 1_048_576, 65_536),
        ("gemini-1.5-pro-002", "gemini-1.5-pro", 2_097_152, 8_192),
        ("gemini-2.0-flash-001", "gemini-2.0-flash", 1_048_576, 8_192),
        ("gemini-2.5-flash-lite", "gemini-2.5-flash-lite", 1_048_576, 65_536),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5", 32_768, 8_192),
        ("qwen3:8b", "qwen3", 32_768, 8_192),
        ("qwen3-235b-a22b-instruct-2507", "qwen3-235b-a22b-instruct-2507", 262_144, 16_384),
        ("deepseek-ai/DeepSeek-V3", "deepseek-v3", 131_072, 8_192),
        ("deepseek-chat", "deepseek-v3", 131_072, 8_192),
        ("deepseek-reasoner", "deepseek-reasoner", 131_072, 65_536),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1", 131_072, 8_192),
        ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.3", 131_072, 8_192),
        ("llama3.1:8b", "llama-3.1", 131_072, 8_192),
        ("meta.llama3-1-70b-instruct-v1:0", "llama-3.1", 131_072, 8_192),
        ("llama-4-scout-17b-16e-instruct", "llama-4-scout", 10_000_000, 8_192),
        ("mistral-large-latest", "mistral-large", 131_072, 8_192),
        ("mistralai/Mistral-Small-3.1-24B-Instruct-2503", "mistral-small", 131_072, 8_192),
        ("codestral-2501", "codestral", 262_144, 8_192),
        ("codestral-2405", "codestral-2405", 32_768, 8_192),
    ],
)
def test_lookup_known_models(query, name, window, max_output):
    info = lookup_model(query)
    assert (info.name, info.context_window, info.max_output) == (name, window, max_output)


def test_openai_models_have_exact_tokenizers_others_proxies():
    assert lookup_model("gpt-4o").tokenizer == "tiktoken:o200k_base"
    assert lookup_model("gpt-4o").tokenizer_exact
    assert lookup_model("gpt-4").tokenizer == "tiktoken:cl100k_base"
    assert not lookup_model("claude-sonnet-4").tokenizer_exact


def test_every_provider_is_covered():
    providers = {m.provider for m in list_models()}
    assert {"openai", "anthropic", "google", "qwen", "deepseek", "meta", "mistral"} <= providers
    assert all(m.max_output <= m.context_window for m in list_models())


def test_a_different_version_is_not_matched_to_an_older_one():
    # "claude-sonnet-4-7" must not silently resolve to claude-sonnet-4.
    with pytest.raises(UnknownModelError):
        lookup_model("claude-sonnet-4-7")
    # and a size variant is not its base model
    with pytest.raises(UnknownModelError):
        lookup_model("gemini-9.0-flash")


def test_unknown_model_error_names_model_close_matches_and_fix():
    with pytest.raises(UnknownModelError) as info:
        lookup_model("gpt-4p")
    msg = str(info.value)
    assert "'gpt-4p'" in msg
    assert "gpt-4" in msg.split("Close matches:")[1]
    assert "window=" in msg
    assert info.value.model == "gpt-4p"


def test_unknown_model_with_window_is_accepted():
    info = lookup_model("my-local-model", window=16_000)
    assert info.context_window == 16_000
    assert info.provider == "other"
    assert info.max_output == 4_000
    assert lookup_model("my-local-model", window=16_000, max_output=1_000).max_output == 1_000


def test_window_and_max_output_override_known_models():
    info = lookup_model("qwen2.5-72b-instruct", window=131_072)
    assert info.context_window == 131_072
    assert info.max_output == 8_192
    small = lookup_model("gpt-4o", window=4_000)
    assert small.max_output == 4_000  # never above the window
    assert lookup_model("gpt-4o").context_window == 128_000  # the registry is unchanged


@pytest.mark.parametrize("kwargs", [{"window": 0}, {"window": -5}, {"max_output": 0}])
def test_bad_overrides(kwargs):
    with pytest.raises(ConfigError):
        lookup_model("gpt-4o", **kwargs)


def test_register_model_overrides_and_adds():
    original = lookup_model("mistral-medium")
    try:
        register_model(ModelInfo(name="Mistral-Medium", provider="mistral", context_window=64_000, max_output=4_000))
        assert lookup_model("mistral-medium-2505").context_window == 64_000
    finally:
        register_model(original)
    assert lookup_model("mistral-medium").context_window == original.context_window

    register_model(
        ModelInfo(name="acme-1", provider="other", context_window=50_000, max_output=2_000, aliases=("acme-one",))
    )
    assert lookup_model("acme/acme-one").name == "acme-1"
    assert lookup_model("acme-1-20250101").context_window == 50_000


def test_model_info_validation():
    with pytest.raises(ConfigError):
        ModelInfo(name="x", provider="other", context_window=0, max_output=10)

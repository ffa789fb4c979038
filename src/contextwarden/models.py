"""Model registry: context window, maximum output and tokenizer of common models.

Figures are the providers' published limits (input window including the output, and the largest
``max_tokens`` accepted). Where a provider serves a model with a smaller window than the weights
support (open-weight models), the registry gives the common serving default; pass ``window=`` to
`lookup_model` or `register_model` your own `ModelInfo` when your deployment differs.

The ``tokenizer`` of a model is a `contextwarden.tokens.get_counter` spec. Only OpenAI models have
an exact public tokenizer; for the others the nearest public BPE is used as a proxy
(``tokenizer_exact=False``) and `contextwarden.tokens.Calibration` corrects it from reported usage.
"""

from __future__ import annotations

import difflib
import re
import threading
from dataclasses import dataclass, replace
from typing import Literal

from .exceptions import ConfigError, UnknownModelError

__all__ = ["ModelInfo", "Provider", "list_models", "lookup_model", "register_model"]

Provider = Literal["openai", "anthropic", "google", "qwen", "deepseek", "meta", "mistral", "other"]


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    """What the budget needs to know about a model."""

    name: str
    """Canonical model name (lower case)."""
    provider: Provider
    context_window: int
    """Total tokens per request (prompt + output)."""
    max_output: int
    """Largest output the provider accepts (``max_tokens``)."""
    tokenizer: str = "tiktoken:cl100k_base"
    """`get_counter` spec of the tokenizer used to count for this model."""
    tokenizer_exact: bool = False
    """True when ``tokenizer`` is the model's own tokenizer, not a proxy."""
    aliases: tuple[str, ...] = ()
    """Other names that resolve to this entry (lower case)."""

    def __post_init__(self) -> None:
        if self.context_window <= 0 or self.max_output <= 0:
            raise ConfigError(
                f"model {self.name!r}: context_window ({self.context_window}) and max_output "
                f"({self.max_output}) must be positive; pass the provider's published limits.",
                key="context_window",
            )


_O200K = "tiktoken:o200k_base"
_CL100K = "tiktoken:cl100k_base"


def _openai(name: str, window: int, out: int, tok: str = _O200K, *aliases: str) -> ModelInfo:
    return ModelInfo(
        name=name, provider="openai", context_window=window, max_output=out, tokenizer=tok, tokenizer_exact=True,
        aliases=aliases,
    )  # fmt: skip


def _m(provider: Provider, name: str, window: int, out: int, *aliases: str, tok: str = _CL100K) -> ModelInfo:
    return ModelInfo(
        name=name, provider=provider, context_window=window, max_output=out, tokenizer=tok, aliases=aliases
    )  # fmt: skip


_BUILTIN: tuple[ModelInfo, ...] = (
    # --- OpenAI ----------------------------------------------------------------------------
    _openai("gpt-3.5-turbo", 16_385, 4_096, _CL100K),
    _openai("gpt-4", 8_192, 8_192, _CL100K),
    _openai("gpt-4-32k", 32_768, 8_192, _CL100K),
    _openai("gpt-4-turbo", 128_000, 4_096, _CL100K, "gpt-4-turbo-preview", "gpt-4-1106-preview", "gpt-4-0125-preview"),
    _openai("gpt-4o", 128_000, 16_384, _O200K, "chatgpt-4o-latest"),
    _openai("gpt-4o-mini", 128_000, 16_384),
    _openai("gpt-4.1", 1_047_576, 32_768),
    _openai("gpt-4.1-mini", 1_047_576, 32_768),
    _openai("gpt-4.1-nano", 1_047_576, 32_768),
    _openai("gpt-4.5-preview", 128_000, 16_384),
    _openai("o1", 200_000, 100_000),
    _openai("o1-mini", 128_000, 65_536),
    _openai("o1-preview", 128_000, 32_768),
    _openai("o1-pro", 200_000, 100_000),
    _openai("o3", 200_000, 100_000),
    _openai("o3-mini", 200_000, 100_000),
    _openai("o3-pro", 200_000, 100_000),
    _openai("o4-mini", 200_000, 100_000),
    _openai("gpt-5", 400_000, 128_000),
    _openai("gpt-5-mini", 400_000, 128_000),
    _openai("gpt-5-nano", 400_000, 128_000),
    _openai("gpt-5-chat", 128_000, 16_384, _O200K, "gpt-5-chat-latest"),
    _openai("gpt-5.1", 400_000, 128_000),
    # --- Anthropic (tokenizer not public: cl100k proxy) ------------------------------------------
    _m("anthropic", "claude-3-haiku", 200_000, 4_096, "claude-3-haiku-20240307"),
    _m("anthropic", "claude-3-sonnet", 200_000, 4_096),
    _m("anthropic", "claude-3-opus", 200_000, 4_096, "claude-3-opus-latest"),
    _m("anthropic", "claude-3-5-haiku", 200_000, 8_192, "claude-3.5-haiku", "claude-3-5-haiku-latest"),
    _m("anthropic", "claude-3-5-sonnet", 200_000, 8_192, "claude-3.5-sonnet", "claude-3-5-sonnet-latest"),
    _m("anthropic", "claude-3-7-sonnet", 200_000, 64_000, "claude-3.7-sonnet", "claude-3-7-sonnet-latest"),
    _m("anthropic", "claude-sonnet-4", 200_000, 64_000, "claude-4-sonnet", "claude-sonnet-4-0"),
    _m("anthropic", "claude-opus-4", 200_000, 32_000, "claude-4-opus", "claude-opus-4-0"),
    _m("anthropic", "claude-opus-4-1", 200_000, 32_000, "claude-opus-4.1"),
    _m("anthropic", "claude-sonnet-4-5", 200_000, 64_000, "claude-sonnet-4.5"),
    _m("anthropic", "claude-haiku-4-5", 200_000, 64_000, "claude-haiku-4.5"),
    _m("anthropic", "claude-opus-4-5", 200_000, 64_000, "claude-opus-4.5"),
    # --- Google (SentencePiece, not public as a BPE: cl100k proxy) -------------------------------
    _m("google", "gemini-1.5-pro", 2_097_152, 8_192),
    _m("google", "gemini-1.5-flash", 1_048_576, 8_192),
    _m("google", "gemini-1.5-flash-8b", 1_048_576, 8_192),
    _m("google", "gemini-2.0-flash", 1_048_576, 8_192),
    _m("google", "gemini-2.0-flash-lite", 1_048_576, 8_192),
    _m("google", "gemini-2.0-pro", 2_097_152, 8_192),
    _m("google", "gemini-2.5-pro", 1_048_576, 65_536),
    _m("google", "gemini-2.5-flash", 1_048_576, 65_536),
    _m("google", "gemini-2.5-flash-lite", 1_048_576, 65_536),
    _m("google", "gemini-3-pro", 1_048_576, 65_536),
    # --- Qwen (open weights: native windows; YaRN extensions need window=) -----------------------
    _m("qwen", "qwen2.5", 32_768, 8_192, "qwen-2.5"),
    _m("qwen", "qwen2.5-coder", 32_768, 8_192, "qwen-2.5-coder"),
    _m("qwen", "qwen2.5-max", 32_768, 8_192, "qwen-max"),
    _m("qwen", "qwen-plus", 131_072, 8_192),
    _m("qwen", "qwen-turbo", 1_000_000, 8_192),
    _m("qwen", "qwen3", 32_768, 8_192, "qwen-3"),
    _m("qwen", "qwen3-235b-a22b-instruct-2507", 262_144, 16_384),
    _m("qwen", "qwen3-235b-a22b-thinking-2507", 262_144, 32_768),
    _m("qwen", "qwen3-30b-a3b-instruct-2507", 262_144, 16_384),
    _m("qwen", "qwen3-coder", 262_144, 65_536),
    # --- DeepSeek ----------------------------------------------------------------------------------
    _m("deepseek", "deepseek-v3", 131_072, 8_192, "deepseek-chat", "deepseek-v3.1", "deepseek-v3.2"),
    _m("deepseek", "deepseek-r1", 131_072, 32_768),
    _m("deepseek", "deepseek-reasoner", 131_072, 65_536),
    # --- Meta Llama (served output caps vary by host; 8k is a common default) ----------------------
    _m("meta", "llama-3", 8_192, 4_096, "llama3", "meta-llama-3"),
    _m("meta", "llama-3.1", 131_072, 8_192, "llama3.1", "llama3-1", "meta-llama-3.1"),
    _m("meta", "llama-3.2", 131_072, 8_192, "llama3.2", "llama3-2", "meta-llama-3.2"),
    _m("meta", "llama-3.3", 131_072, 8_192, "llama3.3", "llama3-3", "meta-llama-3.3"),
    _m("meta", "llama-4-scout", 10_000_000, 8_192, "llama4-scout", tok=_O200K),
    _m("meta", "llama-4-maverick", 1_048_576, 8_192, "llama4-maverick", tok=_O200K),
    # --- Mistral -----------------------------------------------------------------------------------
    _m("mistral", "mistral-large", 131_072, 8_192),
    _m("mistral", "mistral-medium", 131_072, 8_192),
    _m("mistral", "mistral-small", 131_072, 8_192, "mistral-small-3.1", "mistral-small-3.2"),
    _m("mistral", "mistral-small-2501", 32_768, 8_192),
    _m("mistral", "codestral", 262_144, 8_192),
    _m("mistral", "codestral-2405", 32_768, 8_192),
    _m("mistral", "ministral-8b", 131_072, 8_192),
    _m("mistral", "mistral-nemo", 131_072, 8_192, "open-mistral-nemo"),
    _m("mistral", "mixtral-8x7b", 32_768, 8_192, "open-mixtral-8x7b"),
    _m("mistral", "mixtral-8x22b", 65_536, 8_192, "open-mixtral-8x22b"),
)

_lock = threading.Lock()
_registry: dict[str, ModelInfo] = {}
_aliases: dict[str, str] = {}


def register_model(info: ModelInfo) -> ModelInfo:
    """Add a model, or replace the entry of the same name (and claim its aliases).

    Returns:
        The registered info.
    """
    name = info.name.strip().lower()
    if name != info.name:
        info = replace(info, name=name)
    with _lock:
        _registry[name] = info
        for alias in info.aliases:
            _aliases[alias.strip().lower()] = name
        _aliases.pop(name, None)
    return info


for _info in _BUILTIN:
    register_model(_info)


def list_models() -> list[ModelInfo]:
    """Every registered model, sorted by provider then name."""
    with _lock:
        return sorted(_registry.values(), key=lambda m: (m.provider, m.name))


# Namespaces that routers and hubs put before a model name: provider slugs (OpenRouter, LiteLLM,
# Vertex, Bedrock), Hugging Face organisations, Gemini's "models/".
_PREFIX_RE = re.compile(r"^(?:[\w.-]+/)+")
_BEDROCK_RE = re.compile(r"^(?:[a-z]{2}\.)?(?:anthropic|meta|mistral|deepseek|qwen|amazon|cohere)\.")
_BEDROCK_VERSION_RE = re.compile(r"-v\d+(?::\d+)?$")
# A suffix after a known name that does NOT name the same model: a small version number
# ("claude-sonnet-4" + "-5") or a size variant.
_OTHER_MODEL_SUFFIX = re.compile(r"^[-._](?:\d{1,2}(?:[-._]|$)|mini|nano|micro|turbo|lite)")


def _normalize(model: str) -> str:
    name = model.strip().lower()
    name = _PREFIX_RE.sub("", name)
    bedrock = _BEDROCK_RE.sub("", name)
    if bedrock != name:
        # Bedrock ids end in a model-version tag ("-v1:0") only after a provider prefix.
        name = _BEDROCK_VERSION_RE.sub("", bedrock)
    # OpenRouter variants (":free", ":thinking") and Vertex dates ("@20240620").
    name = re.sub(r":(?:free|beta|extended|thinking|online|nitro|floor)$", "", name)
    return name.replace("@", "-")


def _find(name: str) -> ModelInfo | None:
    with _lock:
        hit = _registry.get(name)
        if hit is None and name in _aliases:
            hit = _registry[_aliases[name]]
        if hit is not None:
            return hit
        # Longest registered name (or alias) that prefixes the query at a separator: dated and
        # tagged variants ("gpt-4o-2024-08-06", "llama3.1:70b", "qwen2.5-72b-instruct").
        best: str | None = None
        for key in (*_registry, *_aliases):
            if len(key) < len(name) and name.startswith(key) and name[len(key)] in "-:._":
                rest = name[len(key) :]
                if _OTHER_MODEL_SUFFIX.match(rest):
                    continue
                if best is None or len(key) > len(best):
                    best = key
        if best is None:
            return None
        return _registry.get(best) or _registry[_aliases[best]]


def lookup_model(model: str, *, window: int | None = None, max_output: int | None = None) -> ModelInfo:
    """The registry entry for ``model``, with ``window``/``max_output`` overriding its figures.

    Names are matched case-insensitively after removing router and hub prefixes
    (``openai/gpt-4o``, ``models/gemini-2.5-pro``, ``meta-llama/Llama-3.3-70B-Instruct``, Bedrock ids),
    then exactly, by alias, or by the longest known name followed by a dated or tagged suffix
    (``gpt-4o-2024-08-06``, ``claude-3-5-sonnet-20241022``, ``llama3.1:8b``).

    Args:
        model: the model name as the provider or router spells it.
        window: the context window of your deployment; required for models the registry does not know.
        max_output: the output limit of your deployment.

    Raises:
        UnknownModelError: the model is unknown and ``window`` was not given.
        ConfigError: ``window`` or ``max_output`` is not positive.
    """
    for key, value in (("window", window), ("max_output", max_output)):
        if value is not None and value <= 0:
            raise ConfigError(f"`{key}` must be a positive token count, got {value}; pass the model's limit.", key=key)
    info = _find(_normalize(model))
    if info is None:
        if window is None:
            known = [*_registry, *_aliases]
            close = difflib.get_close_matches(_normalize(model), known, n=3, cutoff=0.6)
            hint = f" Close matches: {', '.join(close)}." if close else ""
            raise UnknownModelError(
                f"unknown model {model!r}: the registry has no context window for it.{hint} "
                "Pass `window=` (and `max_output=`) with your deployment's limits, "
                "or `register_model(ModelInfo(...))`.",
                model=model,
            )
        out = max_output if max_output is not None else min(window // 4, 8_192) or 1
        return ModelInfo(
            name=model.strip().lower(), provider="other", context_window=window, max_output=min(out, window)
        )
    if window is None and max_output is None:
        return info
    new_window = window if window is not None else info.context_window
    new_out = max_output if max_output is not None else min(info.max_output, new_window)
    return replace(info, context_window=new_window, max_output=new_out)

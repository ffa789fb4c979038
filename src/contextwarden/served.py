"""What a session assumes before the server has told it anything: reply room, counting margin, window.

A session that knows only a window, or names a model the registry does not know, starts out with
guesses. Three rules keep its first turn from overflowing:

* **Room for the reply.** A session without a registry entry reserves `default_reply_reserve`
  tokens for the reply (1,024, at most a quarter of the window), so ``max_tokens="reserved"``
  always sends a limit.
* **A counting margin.** Until usage reports have calibrated it, a session for a model the
  registry does not know counts every message `UNKNOWN_MODEL_MARGIN` times larger (its counter
  is not the model's tokenizer, and undercounts by up to a third on small local models). When
  the server has a token-count endpoint (``served_window="probe"`` found one), the margin is
  measured instead: the server's count of a sample text over the session's count, plus 5%.
* **The served window.** ``served_window=`` gives the session the window the server serves:
  a number, a `ServedWindow`, or ``"probe"`` to ask the server at ``base_url``
  (`contextwarden.llm.served_window.probe`). A window smaller than the configured one replaces it.
"""

from __future__ import annotations

import logging
from typing import Literal

from .exceptions import ConfigError, UnknownModelError, UpstreamError
from .llm.served_window import ServedWindow
from .models import lookup_model
from .tokens import TokenCounter

__all__ = [
    "DEFAULT_REPLY_RESERVE",
    "UNKNOWN_MODEL_MARGIN",
    "default_reply_reserve",
    "registry_knows",
    "resolve_served_window",
    "unknown_model_margin",
]

logger = logging.getLogger("contextwarden.session")

DEFAULT_REPLY_RESERVE = 1024
"""Tokens a session without a registry entry keeps for the reply (at most a quarter of the window)."""

UNKNOWN_MODEL_MARGIN = 1.25
"""Factor on every count of a session whose model the registry does not know, until calibrated."""

_MEASURED_MARGIN = 1.05
"""Extra on a margin measured with the server's tokenizer: the chat template adds tokens of its own."""

# Prose, code, JSON and numbers: the kinds of text whose token counts differ most between tokenizers.
_SAMPLE = (
    "The agent read src/parser/tokens.py, ran `pytest -q tests/test_parser.py::test_nested` and got "
    "AssertionError: expected 42 nodes, found 41 (line 318). Next step: fix the off-by-one in "
    'build_tree(). {"id": "call_7f3a9", "status": "failed", "elapsed_ms": 1834, "files": ["a.py", "b.py"]}\n'
    "def build_tree(tokens: list[Token]) -> Node:\n    stack = [Node('root')]\n    for i, tok in enumerate(tokens):\n"
    "        if tok.kind == 'open':\n            stack.append(Node(tok.text, parent=stack[-1]))\n"
    "Décisions: garder l'API; 日本語のテキストも数える。 2024-11-05T13:37:00Z 0x7f3a 3.14159 -1e-9"
)


def default_reply_reserve(window: int) -> int:
    """Tokens reserved for the reply by a session that knows only its window."""
    return min(DEFAULT_REPLY_RESERVE, window // 4)


def registry_knows(model: str) -> bool:
    """Whether the model registry has an entry for ``model``."""
    try:
        lookup_model(model)
    except UnknownModelError:
        return False
    return True


def unknown_model_margin(counter: TokenCounter, served: ServedWindow | None) -> float:
    """The counting margin of a session whose model the registry does not know (see the module)."""
    if served is None or served.token_count_url is None:
        return UNKNOWN_MODEL_MARGIN
    from .llm.served_window import count_tokens

    try:
        theirs = count_tokens(served, _SAMPLE)
    except UpstreamError as exc:
        logger.info("counting a sample with %s failed (%s); default margin", served.token_count_url, exc)
        return UNKNOWN_MODEL_MARGIN
    ours = counter.count_text(_SAMPLE)
    if theirs is None or ours <= 0:
        return UNKNOWN_MODEL_MARGIN
    return min(2.0, max(1.0, theirs / ours * _MEASURED_MARGIN))


def resolve_served_window(
    value: int | ServedWindow | Literal["probe"] | None, *, base_url: str | None, model: str | None
) -> ServedWindow | None:
    """The `ServedWindow` a session's ``served_window=`` argument stands for.

    Raises:
        ConfigError: ``"probe"`` without ``base_url``, or a window that is not a positive int.
        UpstreamError: ``"probe"`` and nothing listens at ``base_url``.
    """
    if value is None or isinstance(value, ServedWindow):
        return value
    if value == "probe":
        if base_url is None:
            raise ConfigError(
                "served_window='probe' needs the server's `base_url=` (e.g. 'http://localhost:8080/v1') to ask it.",
                key="served_window",
            )
        from .llm.served_window import probe

        return probe(base_url, model=model)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(
            f"served_window={value!r}: pass the server's window in tokens, a `ServedWindow`, or 'probe'.",
            key="served_window",
        )
    return ServedWindow(base_url=base_url or "", server="openai-compatible", window=value, source="configured")

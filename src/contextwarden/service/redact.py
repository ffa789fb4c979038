"""Credentials out of every text a client or a log can see.

An upstream answers a bad key with ``Incorrect API key provided: sk-...``; a provider may echo the
``Authorization`` header in an error; a proxy's error page may print its own URL with a password.
The service passes upstream error bodies through to clients (their retry logic reads them) and
writes upstream failures to its log, so each such text goes through `redact_text` (or
`redact_json` for a JSON body) first: the service's own upstream key and the client's bearer are
replaced wherever they appear, and so is anything shaped like a well-known key or a bearer token.
`RedactingFilter` does the same for the records of the service's loggers.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

from .._json import MAX_DEPTH, nests_deeper
from . import jsonio

__all__ = ["REDACTED", "RedactingFilter", "Redactor", "redact_text"]

REDACTED = "[redacted]"

_PATTERNS = re.compile(
    "|".join(
        (
            r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{6,}",  # OpenAI, Anthropic (sk-ant-), Stripe-style keys
            r"\b(?:xai|gsk|pplx|csk|nvapi|hf)[-_][A-Za-z0-9_\-]{10,}",  # xAI, Groq, Perplexity, Cerebras, NVIDIA, HF
            r"\bAIza[0-9A-Za-z_\-]{20,}",  # Google
            r"\bAKIA[0-9A-Z]{12,}",  # AWS access key id
            r"\bgh[pousr]_[A-Za-z0-9]{20,}",  # GitHub
            r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",  # JWT
            r"\b[Bb][Ee][Aa][Rr][Ee][Rr]\s+[^\s\"',;]+",
            r"(?<=://)[^/\s:@\"']+:[^/\s@\"']+(?=@)",  # user:password in a URL
            r"\b(?:api[_-]?key|x-api-key|access[_-]?token|secret|password|authorization)"
            r"(?P<sep>[\"']?\s*[:=]\s*[\"']?)(?:(?:bearer|basic|token)\s+)?[^\s\"',;&]{6,}",
        )
    ),
    re.IGNORECASE,
)
"""Shapes of credentials, whoever's they are."""


def _pattern_sub(match: re.Match[str]) -> str:
    sep = match.group("sep")
    if sep is not None:  # keep the name and separator: "api_key=[redacted]"
        head = match.group(0)
        return head[: head.index(sep) + len(sep)] + REDACTED
    return REDACTED


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with ``secrets`` (exact values) and every credential-shaped token replaced by ``[redacted]``."""
    for secret in secrets:
        if secret and len(secret) >= 4 and secret in text:
            text = text.replace(secret, REDACTED)
    return _PATTERNS.sub(_pattern_sub, text)


def _redact_value(value: Any, secrets: tuple[str, ...]) -> Any:
    # recursive: callers pass only values within `MAX_DEPTH` levels
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, dict):
        return {redact_text(str(k), secrets): _redact_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_value(v, secrets) for v in value]
    return value


class Redactor:
    """Redacts with the service's own secrets (its upstream key) plus the request's (the client's bearer)."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self.secrets = tuple(s for s in secrets if s)

    def text(self, text: str, *extra: str | None) -> str:
        """``text`` redacted."""
        return redact_text(text, (*self.secrets, *(s for s in extra if s)))

    def secrets_out(self, content: bytes, *extra: str | None) -> bytes:
        """``content`` with the exact secrets replaced (a cheap pass for every reply, error or not: a model
        can be made to repeat the key the service sent it with)."""
        for secret in (*self.secrets, *extra):
            if secret and len(secret) >= 4:
                encoded = secret.encode()
                if encoded in content:
                    content = content.replace(encoded, REDACTED.encode())
        return content

    def body(self, content: bytes, *extra: str | None) -> bytes:
        """A reply body redacted: JSON field by field (kept valid JSON), anything else as text."""
        secrets = (*self.secrets, *(s for s in extra if s))
        text = content.decode("utf-8", "replace")
        if not _may_hold_credential(text, secrets):
            return content
        try:
            value = jsonio.loads(content)
        except (ValueError, RecursionError):
            value = None
        if value is None or nests_deeper(value, MAX_DEPTH):
            return redact_text(text, secrets).encode()
        return jsonio.dumps(_redact_value(value, secrets))


def _may_hold_credential(text: str, secrets: tuple[str, ...]) -> bool:
    return any(s in text for s in secrets if s) or _PATTERNS.search(text) is not None


class RedactingFilter(logging.Filter):
    """A logging filter that renders each record's message and redacts it (arguments included)."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit its format: leave it to the handler
            return True
        cleaned = self.redactor.text(message)
        if record.exc_info and record.exc_info[1] is not None:
            # the traceback text is rendered by the handler: carry it pre-rendered and redacted
            formatted = logging.Formatter().formatException(record.exc_info)
            cleaned = f"{cleaned}\n{self.redactor.text(formatted)}"
            record.exc_info = None
            record.exc_text = None
        record.msg, record.args = cleaned, None
        return True


def install(redactor: Redactor, names: Iterable[str]) -> RedactingFilter:
    """Add a `RedactingFilter` to the loggers ``names`` (the service's own); returns it for `uninstall`."""
    log_filter = RedactingFilter(redactor)
    for name in names:
        logging.getLogger(name).addFilter(log_filter)
    return log_filter


def uninstall(log_filter: RedactingFilter, names: Iterable[str]) -> None:
    """Remove a filter `install` added."""
    for name in names:
        logging.getLogger(name).removeFilter(log_filter)

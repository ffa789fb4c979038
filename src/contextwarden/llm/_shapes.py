"""Reading a provider's reply defensively: a field of the wrong type is an `UpstreamError` naming it.

A model server (or a proxy in front of it) can send anything: ``"tool_calls": "x"``, a number
where the arguments belong, a list where an object belongs. The clients read every field they use
through `ReplyReader`, so such a reply raises one `UpstreamError` that names the field by its path
(``choices[0].message.tool_calls[1].function.name``) instead of an AttributeError or KeyError from
deep inside the parser.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..exceptions import UpstreamError

__all__ = ["ReplyReader"]


def _describe(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr) if value is not None else "null"
    if len(text) > 80:
        text = text[:80] + "..."
    return f"{type(value).__name__} {text}"


class ReplyReader:
    """Typed access to the fields of one decoded reply or stream event."""

    def __init__(self, url: str | None, *, api: str, status_code: int | None = 200) -> None:
        """Name the reply's source.

        Args:
            url: The endpoint that sent the reply (named in errors).
            api: The API the reply should follow (``"OpenAI chat-completions"``, ...), named in errors.
            status_code: The HTTP status of the reply (200; ``None`` inside a stream is also fine).
        """
        self.url = url
        self.api = api
        self.status_code = status_code

    def error(self, field: str, value: Any, expected: str) -> UpstreamError:
        """The error for a field of the wrong shape."""
        where = self.url or "the model server"
        return UpstreamError(
            f"{where} sent a reply whose `{field}` is {_describe(value)}, expected {expected}; check that the"
            f" server (and any proxy in front of it) speaks the {self.api} API.",
            url=self.url,
            status_code=self.status_code,
        )

    def mapping(self, value: Any, field: str) -> Mapping[str, Any]:
        """``value`` as an object; ``None`` reads as an empty one."""
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(field, value, "an object")
        return value

    def items(self, value: Any, field: str) -> list[Any]:
        """``value`` as a list; ``None`` reads as an empty one."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(field, value, "a list")
        return value

    def text(self, value: Any, field: str) -> str | None:
        """``value`` as a string, or ``None`` when absent."""
        if value is None or isinstance(value, str):
            return value
        raise self.error(field, value, "a string")

    def index(self, value: Any, field: str, default: int) -> int:
        """``value`` as a non-negative integer index; ``default`` when absent."""
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.error(field, value, "a non-negative integer")
        return value

    def name(self, value: Any, field: str) -> str:
        """A tool's name: a non-empty string."""
        if not isinstance(value, str) or not value:
            raise self.error(field, value, "the tool's name (a non-empty string)")
        return value

    def arguments(self, value: Any, field: str) -> str:
        """Tool-call arguments as JSON text: a string as sent, an object encoded, absent as ``{}``."""
        if isinstance(value, str):
            return value
        if value is None:
            return "{}"
        if isinstance(value, Mapping):
            # A few servers send decoded objects; the library keeps JSON text.
            return json.dumps(value, ensure_ascii=False)
        raise self.error(field, value, "a JSON text (or an object)")

    @staticmethod
    def label(value: Any) -> str | None:
        """Descriptive metadata (model name, response id): kept when it is a string, dropped otherwise."""
        return value if isinstance(value, str) else None

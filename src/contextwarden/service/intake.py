"""Checks of what comes in, for every dialect: a client's body, an upstream's reply.

A client's mistake is a 400 that names the field (``messages``, ``model``, ``stream_options``),
never a 500: a body nested past `MAX_BODY_DEPTH`, a lone surrogate in a text the service must
encode, an option of the wrong type. An upstream reply nested past the bound is not a reason to
drop a reply that was paid for: `upstream_json` cuts the too-deep parts out (they become ``null``
in what the service reads; the client still gets the bytes the upstream sent).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .._json import has_lone_surrogate
from . import jsonio
from .errors import ServiceError

__all__ = [
    "MAX_BODY_DEPTH",
    "check_query_text",
    "check_stream_options",
    "check_texts",
    "deep_field",
    "json_object",
    "prune_deep",
    "upstream_json",
]

MAX_BODY_DEPTH = 200
"""Deepest nesting of arrays and objects read from a client or an upstream (the fast parser's own bound)."""

_FIELD_SCAN_LIMIT = 1 << 20
"""Characters scanned to name the field of a too-deep body (past that the message names none)."""

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:]', re.DOTALL)


def deep_field(text: str, max_depth: int) -> str | None:
    """The top-level key whose value nests deeper than ``max_depth`` (None when not found in the first MiB)."""
    depth = 0
    key: str | None = None
    last: str | None = None
    for match in _TOKEN.finditer(text, 0, min(len(text), _FIELD_SCAN_LIMIT)):
        token = match.group(0)
        if token in "[{":
            depth += 1
            if depth > max_depth:
                return key
        elif token in "]}":
            depth -= 1
        elif token == ":" and depth == 1 and last is not None and last.startswith('"'):
            key = last[1:-1]
        last = token
    return None


def json_object(raw: bytes, *, api: str) -> dict[str, Any]:
    """The JSON object of a client's body.

    Raises:
        ServiceError: 400 for a body that is not JSON, nests past `MAX_BODY_DEPTH` (naming the field),
            or is not an object.
    """
    try:
        body = jsonio.loads(raw)
    except jsonio.TooDeep:
        text = raw.decode("utf-8", "replace")
        field = deep_field(text, MAX_BODY_DEPTH)
        where = f"`{field}`" if field is not None else "The request body"
        raise ServiceError(
            400,
            f"{where} nests arrays or objects deeper than {MAX_BODY_DEPTH} levels; send a flatter request.",
            param=field,
            code="too_deep",
        ) from None
    except ValueError as exc:
        raise ServiceError(
            400, f"The request body is not valid JSON ({exc}); send {api}.", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise ServiceError(
            400, f"The request body is a JSON {type(body).__name__}, not an object.", code="invalid_json"
        )
    return body


def check_texts(body: Mapping[str, Any], fields: Iterable[str]) -> None:
    """Refuse a lone surrogate (which no store, header or upstream body can carry) in the string ``fields``.

    Raises:
        ServiceError: 400 naming the field.
    """
    for name in fields:
        value = body.get(name)
        if isinstance(value, str) and has_lone_surrogate(value):
            raise ServiceError(
                400,
                f"`{name}` holds a lone surrogate character (an unpaired \\ud800-\\udfff escape); send valid Unicode.",
                param=name,
                code="invalid_text",
            )


def check_query_text(name: str, value: str, *, max_chars: int = 1024) -> None:
    """A query parameter the service hands to a store: printable, without lone surrogates, bounded.

    Raises:
        ServiceError: 400 naming the parameter.
    """
    bad = next((c for c in value if not c.isprintable()), None)
    if bad is not None or has_lone_surrogate(value) or len(value) > max_chars:
        problem = (
            f"is {len(value)} characters long (at most {max_chars})"
            if len(value) > max_chars
            else f"holds the character U+{ord(bad or chr(0xFFFD)):04X}"
        )
        raise ServiceError(
            400,
            f"`{name}` {problem}; pass the value the previous page returned.",
            param=name,
            code=f"invalid_{name}",
        )


def check_stream_options(body: Mapping[str, Any]) -> None:
    """``stream_options`` must be an object (or null) when present.

    Raises:
        ServiceError: 400 naming the field.
    """
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ServiceError(
            400,
            f'`stream_options` must be an object such as {{"include_usage": true}}, not a JSON '
            f"{jsonio.type_name(options)}.",
            param="stream_options",
            code="invalid_type",
        )


def prune_deep(text: str, max_depth: int) -> str:
    """``text`` (JSON) with every array or object nested past ``max_depth`` replaced by ``null``."""
    out: list[str] = []
    depth = 0
    copied = 0
    skip_from: int | None = None
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if token in "[{":
            depth += 1
            if depth == max_depth + 1 and skip_from is None:
                skip_from = match.start()
        elif token in "]}":
            if depth == max_depth + 1 and skip_from is not None:
                out.append(text[copied:skip_from])
                out.append("null")
                copied = match.end()
                skip_from = None
            depth -= 1
    out.append(text[copied:])
    return "".join(out)


def upstream_json(content: bytes) -> Any:
    """An upstream's JSON reply, with parts nested past `MAX_BODY_DEPTH` read as ``null``.

    Raises:
        ValueError: the reply is not JSON.
    """
    try:
        return jsonio.loads(content)
    except jsonio.TooDeep:
        return jsonio.loads(prune_deep(content.decode("utf-8", "replace"), MAX_BODY_DEPTH).encode())

"""JSON the proxy reads and writes: the fast parsers where they agree with the standard library.

A re-sent history of 200 messages is tens of kilobytes read and written once per request.
Reading uses pydantic-core's parser (already installed with pydantic): about twice as fast as
``json.loads`` on such bodies and, unlike orjson, it keeps an integer past 64 bits exact and reads
``NaN`` and ``Infinity`` as the standard library does. A body it refuses (a lone surrogate, nesting
past its depth limit, invalid JSON) is read again by ``json.loads``, so what is accepted and every
error message are the standard library's. Writing uses orjson, about twenty times faster than
``json.dumps``; a value it refuses, such as an integer past 64 bits or a lone surrogate, is written
by the standard library; ``NaN``, which is not JSON, goes out as ``null``.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from pydantic_core import from_json

from .._json import too_deep

__all__ = ["MAX_DEPTH", "TooDeep", "dumps", "loads", "type_name"]

MAX_DEPTH = 200
"""Deepest nesting read: the fast parser's own bound, kept for the standard library's second reading
(whose recursion would otherwise fail with ``RecursionError`` a few hundred levels further down)."""


class TooDeep(ValueError):
    """A JSON document nesting arrays or objects deeper than `MAX_DEPTH`."""


def loads(raw: bytes) -> Any:
    """The value of the JSON document ``raw``, as ``json.loads`` reads it.

    Raises:
        TooDeep: the document nests deeper than `MAX_DEPTH`.
        ValueError: ``raw`` is not JSON (``json.JSONDecodeError``, or ``UnicodeDecodeError``).
    """
    try:
        return from_json(raw)
    except ValueError:
        text = raw.decode("utf-8", "surrogatepass") if isinstance(raw, bytes | bytearray) else raw
        if too_deep(text, MAX_DEPTH):
            raise TooDeep(f"the document nests arrays or objects deeper than {MAX_DEPTH} levels") from None
        try:
            return json.loads(raw)
        except RecursionError:
            raise TooDeep(f"the document nests arrays or objects deeper than {MAX_DEPTH} levels") from None


_TYPE_NAMES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def type_name(value: Any) -> str:
    """The JSON name of a decoded value's type (``object``, ``array``, ``null``...)."""
    return "null" if value is None else _TYPE_NAMES.get(type(value), type(value).__name__)


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON of ``value``."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, separators=(",", ":")).encode()

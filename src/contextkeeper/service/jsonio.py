"""JSON the proxy writes: orjson for the request it sends upstream, the standard library where they differ.

A re-sent history of 200 messages is tens of kilobytes written once per request: orjson writes it
about twenty times faster than ``json.dumps``. (Reading is left to ``json.loads``: on text-heavy
bodies orjson is barely faster, and it would turn an integer past 64 bits into a float.) A value
orjson refuses, such as an integer past 64 bits or a lone surrogate, is written by the standard
library; ``NaN``, which is not JSON, goes out as ``null``.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["dumps"]


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON of ``value``."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, separators=(",", ":")).encode()

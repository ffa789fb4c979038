"""Bounded JSON parsing and checks for text that comes from outside (models, callers, stores).

`loads` is the one parser for JSON the library did not write itself: tool-call arguments,
the arguments of contextwarden's own tools, JSON found in tool outputs. It bounds the nesting
depth (checked before parsing, so a 5,000-deep document never reaches the recursive parser)
and, when asked, the size, and it turns every failure into `BadJSON` with a short description
of the problem. Callers wrap that into their own typed error (a `MessageError` for `add()`, an
error text for a tool result the model reads).

A JSON escape such as ``"\\ud83d"`` decodes to a lone surrogate, which no UTF-8 store can hold:
`lone_surrogate_path` finds one in a decoded value, `scrub` replaces them in data the library
derives (so derived state stays saveable whatever the input held).
"""

from __future__ import annotations

import json
import json.scanner
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, cast

from ._brief import brief

__all__ = [
    "MAX_DEPTH",
    "MAX_TOOL_ARGUMENT_CHARS",
    "BadJSON",
    "has_lone_surrogate",
    "is_json",
    "loads",
    "lone_surrogate_path",
    "may_decode_to_surrogate",
    "metadata_problem",
    "nests_deeper",
    "scrub",
    "storable",
    "too_deep",
    "tool_arguments",
    "whole_number",
]

MAX_DEPTH = 100
"""Deepest nesting of arrays and objects accepted from outside (real payloads stay far below)."""

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_PAIR = re.compile(r"\[\]|\{\}")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


class BadJSON(ValueError):
    """A JSON text that cannot be accepted; ``problem`` says why in a few words."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def too_deep(text: str, max_depth: int) -> bool:
    """True when the arrays and objects of ``text`` nest deeper than ``max_depth``.

    Works on the bracket skeleton (strings removed) with C-level regex passes: each pass removes
    the innermost empty pairs, so a document of depth d is gone after d passes.
    """
    if text.count("[") + text.count("{") <= max_depth:
        return False
    skeleton = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(max_depth):
        skeleton, n = _PAIR.subn("", skeleton)
        if not n or not skeleton:
            return False
    return _PAIR.search(skeleton) is not None


def nests_deeper(value: Any, max_depth: int = MAX_DEPTH) -> bool:
    """True when the dicts, lists and tuples of a Python value nest deeper than ``max_depth`` (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        kind = type(node)
        # the exact JSON types first: an ABC check costs several times a type comparison
        if kind is dict or (kind is not list and kind is not tuple and isinstance(node, Mapping)):
            children: Any = node.values()
        elif kind is list or kind is tuple or isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth >= max_depth:
            return True
        for child in children:
            kind = type(child)
            if kind is str or kind is int or kind is float or kind is bool or child is None:
                continue
            if kind is dict or kind is list or kind is tuple or isinstance(child, Mapping | list | tuple):
                stack.append((child, depth + 1))
    return False


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH, max_chars: int | None = None) -> Any:
    """Parse JSON from outside, within ``max_depth`` levels of nesting and ``max_chars`` characters.

    Raises:
        BadJSON: not JSON, too deep, too long, or a number Python cannot hold.
    """
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadJSON(f"is not valid UTF-8 (byte {exc.start})") from None
    if not isinstance(text, str):
        raise BadJSON(f"must be a JSON text, got {type(text).__name__}")
    if max_chars is not None and len(text) > max_chars:
        raise BadJSON(f"is {len(text):,} characters long (at most {max_chars:,})")
    if too_deep(text, max_depth):
        raise BadJSON(f"nests arrays or objects deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadJSON(f"is not valid JSON ({exc.msg} at char {exc.pos})") from None
    except (ValueError, RecursionError) as exc:  # an integer of more than 4,300 digits, say
        raise BadJSON(f"cannot be read ({exc})") from None


# typeshed types make_scanner's argument as the scanner class itself; it takes a decoder
_SCAN_ONCE: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))
"""Reads one JSON value at a position (the C scanner, which `json.loads` also runs)."""
_JSON_SPACE = " \t\n\r"


def is_json(text: str, *, max_depth: int = MAX_DEPTH) -> bool:
    """True when `loads` would accept ``text`` (one JSON value, at most ``max_depth`` levels deep).

    The check for text that is almost always fine (tool-call arguments as a model wrote them): it
    runs the C scanner directly, without the Python layers of `json.loads` or the error messages
    `loads` writes when it is not.
    """
    if too_deep(text, max_depth):
        return False
    start = len(text) - len(text.lstrip(_JSON_SPACE))
    try:
        _, end = _SCAN_ONCE(text, start)
    except (StopIteration, ValueError, RecursionError):
        return False
    return end == len(text) or not text[end:].strip(_JSON_SPACE)


def has_lone_surrogate(text: str) -> bool:
    """True when ``text`` holds a surrogate code point (which UTF-8 cannot encode)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def may_decode_to_surrogate(text: str) -> bool:
    """True when a JSON text has a ``\\uD800``-``\\uDFFF`` escape (a cheap pre-check)."""
    return _SURROGATE_ESCAPE.search(text) is not None


def lone_surrogate_path(value: Any) -> str | None:
    """Where a decoded JSON value holds a string with a lone surrogate (``$.a[2]``), or None."""
    stack: list[tuple[str, Any]] = [("$", value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            if has_lone_surrogate(node):
                return path
        elif isinstance(node, dict):
            for k, v in node.items():
                key_path = f"{path}.{k}" if isinstance(k, str) and k.isidentifier() else f"{path}[{k!r}]"
                if isinstance(k, str) and has_lone_surrogate(k):
                    return f"{path} (a key)"
                stack.append((key_path, v))
        elif isinstance(node, list | tuple):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(node))
    return None


_MAX_METADATA_INT_BITS = 2000  # about 600 decimal digits


def metadata_problem(value: Any, *, max_depth: int = MAX_DEPTH) -> tuple[str, str] | None:
    """Why ``value`` cannot be stored as JSON metadata, as (path, problem), or None when it can.

    Stores keep metadata as UTF-8 JSON: only dicts with string keys, lists, strings without
    lone surrogates, finite numbers, booleans and None, nested at most ``max_depth`` levels.
    """
    if _plain_json(value, max_depth):
        return None
    return _metadata_walk(value, max_depth)


def _metadata_walk(value: Any, max_depth: int) -> tuple[str, str] | None:
    """`metadata_problem` by a walk that names where the problem is."""
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack:
        path, node, depth = stack.pop()
        if depth > max_depth:
            return path, f"nests deeper than {max_depth} levels"
        if node is None or isinstance(node, bool):
            continue
        if isinstance(node, int):
            # JSON readers (Python's included) refuse integers beyond a few thousand digits: such a
            # value would be stored and then never load again
            if node.bit_length() > _MAX_METADATA_INT_BITS:
                return path, "is an integer too long to store (more than 600 digits)"
            continue
        if isinstance(node, float):
            if not math.isfinite(node):
                return path, f"is {node!r}, which JSON cannot hold"
        elif isinstance(node, str):
            if has_lone_surrogate(node):
                return path, "contains a lone surrogate"
        elif isinstance(node, dict):
            for k, v in node.items():
                if not isinstance(k, str):
                    return path, f"has a key of type {type(k).__name__} ({brief(k)}); keys must be strings"
                if has_lone_surrogate(k):
                    return path, f"has a key with a lone surrogate ({brief(k)})"
                stack.append((f"{path}.{k}" if path else k, v, depth + 1))
        elif isinstance(node, list | tuple):
            stack.extend((f"{path}[{i}]", v, depth + 1) for i, v in enumerate(node))
        else:
            return path, f"is a {type(node).__name__}, which is not JSON"
    return None


def _plain_json(value: Any, max_depth: int) -> bool:
    """True when ``value`` is storable JSON made of the exact JSON types (the common case, told without
    building the paths `metadata_problem` names a problem by); False: anything else, to be looked at there."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return False
        kind = type(node)
        if kind is str:
            if has_lone_surrogate(node):
                return False
        elif kind is dict:
            for k, v in node.items():
                if type(k) is not str or has_lone_surrogate(k):
                    return False
                stack.append((v, depth + 1))
        elif kind is list:
            stack.extend((v, depth + 1) for v in node)
        elif kind is int:
            if node.bit_length() > _MAX_METADATA_INT_BITS:
                return False
        elif kind is float:
            if not math.isfinite(node):
                return False
        elif not (node is None or kind is bool):
            return False
    return True


def scrub(value: Any) -> Any:
    """A copy of ``value`` with every lone surrogate in its strings replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if has_lone_surrogate(value) else value
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value


def storable(state: Any) -> Any:
    """``state`` as it can be stored: unchanged when every string encodes to UTF-8, else scrubbed.

    The fast check runs in C (one encode of the dump); only a state that fails it is walked.
    """
    try:
        json.dumps(state, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return scrub(state)
    except (TypeError, ValueError):
        return state  # not a text problem: the store names it
    return state


MAX_TOOL_ARGUMENT_CHARS = 65_536
"""contextwarden's own tools take short arguments; a longer text is refused before it is parsed."""
_MAX_WHOLE = 10**9


def whole_number(value: object, *, maximum: int = _MAX_WHOLE) -> int | None:
    """A positive whole number from a model's argument (``3``, ``3.0`` or ``"3"``), or None when it is not one.

    NaN, infinities, booleans, negative numbers, zero and numbers above ``maximum`` are not.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        digits = value.strip()
        if not (digits.isascii() and digits.isdigit() and len(digits) <= 12):
            return None
        value = int(digits)
    if isinstance(value, float):
        if not (math.isfinite(value) and value.is_integer()):
            return None
        value = int(value)
    if isinstance(value, int) and 1 <= value <= maximum:
        return value
    return None


def tool_arguments(arguments: object, *, example: str) -> dict[str, Any] | str:
    """The arguments of one of contextwarden's own tools as a dict, or an ``error: ...`` text for the model.

    A JSON text is parsed within `MAX_TOOL_ARGUMENT_CHARS` and `MAX_DEPTH`; a mapping is checked
    for depth. ``example`` shows the model what to send instead.
    """
    if isinstance(arguments, str | bytes):
        try:
            args = loads(arguments, max_chars=MAX_TOOL_ARGUMENT_CHARS)
        except BadJSON as exc:
            return f"error: the arguments text {exc.problem}; send a JSON object like {example}."
    elif isinstance(arguments, Mapping):
        if nests_deeper(arguments, MAX_DEPTH):
            return f"error: the arguments nest deeper than {MAX_DEPTH} levels; send a JSON object like {example}."
        args = dict(arguments)
    else:
        return f"error: the arguments must be a JSON object, got {type(arguments).__name__}; send {example}."
    if not isinstance(args, dict):
        return f"error: the arguments must be a JSON object, got {type(args).__name__}; send {example}."
    return args

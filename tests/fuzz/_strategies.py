"""Hypothesis strategies for what an adversary sends: hostile text, JSON (values and texts) and numbers.

Every strategy here draws from a mix of the ordinary and the hostile, so a test sees both the
shapes the code expects and the ones it does not: lone surrogates, NUL, control and
bidirectional characters, zero-width joiners, CJK, escaped JSON inside strings, strings of
hundreds of thousands of characters, JSON nested thousands deep, integers too long to print,
``NaN``/``Infinity`` literals, duplicate keys, values of the wrong type.

`mutated` turns a well-formed structure (a provider message, a model reply, an export record)
into a hostile one by replacing, deleting or adding values at random paths.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import strategies as st

__all__ = [
    "CALL_IDS",
    "OPEN_DEFECTS",
    "bounded_json_value",
    "deep_json_text",
    "deep_value",
    "hostile_any",
    "hostile_json_text",
    "hostile_json_value",
    "hostile_key",
    "hostile_number",
    "hostile_text",
    "huge_text",
    "lenient_dumps",
    "mutated",
    "shallow_any",
    "shallow_json_text",
    "shallow_json_value",
    "short_text",
]

SNIPPETS = (
    "\x00",
    "\u202e",  # right-to-left override
    "\u200f",
    "\u2066",
    "\u200b",  # zero-width space
    "\u200d",  # zero-width joiner
    "\ufeff",
    "\u2028",
    "\r\n",
    "\t",
    "\x1b[31m",
    "e\u0301",
    "漢字かな한국어",
    "中文文本测试",
    "👩‍👩‍👧",
    "\U0001f600",
    "\ud83d",  # a lone high surrogate
    "\udc00",  # a lone low surrogate
    '{"p": "\\ud83d"}',
    '"\\udc00"',
    "\\u0000",
    '{"a": 1, "a": 2}',
    '"}]}',
    "\\",
    '"',
    "[store]",
    "<|im_end|>",
    "msg_",
    "snap_../../etc/passwd",
    "..",
    "#12",
    "NaN",
    "Infinity",
    "null",
    "ﷺ",
    "\U0010ffff",
)
"""Pieces that broke, or could break, text handling somewhere."""

_SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, categories=["Cs"])
_ANY_CHAR = st.one_of(st.characters(), _SURROGATES, st.sampled_from(["\x00", "\u202e", "\u200b", "漢"]))

short_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(SNIPPETS),
    st.text(alphabet=_ANY_CHAR, max_size=12),
)
"""Short strings for ids, names, keys and roles: ordinary and hostile."""

_HUGE_PIECES = ["x", "漢", "ab cd ", "\u200b", "word\n", "\ud83d"]


def _huge(pieces: list[str]) -> st.SearchStrategy[str]:
    return st.builds(lambda piece, n: piece * n, st.sampled_from(pieces), st.sampled_from([5_000, 40_000, 200_000]))


huge_text = _huge([*_HUGE_PIECES, '{"a":'])
"""Strings of 5 k to 1 M characters (one of them an open JSON object nested as deep)."""


def _texts(huge: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=40),
        st.text(alphabet=_ANY_CHAR, max_size=40),
        st.lists(st.one_of(st.sampled_from(SNIPPETS), st.text(max_size=6)), max_size=8).map("".join),
        st.sampled_from(SNIPPETS),
        huge,
    )


hostile_text = _texts(huge_text)
"""Text as a hostile caller or model sends it."""
flat_text = _texts(_huge(_HUGE_PIECES))
"""`hostile_text` without the huge text that is also JSON nested thousands deep."""

hostile_key = st.one_of(
    st.sampled_from(["", "a", "role", "content", "type", "__proto__", "\ud83d", "\x00"]), short_text
)

_HUGE_INTS = (2**31, 2**63, -(2**63) - 1, 2**64, 10**20, 10**400, -(10**400))
_TOO_LONG_TO_PRINT = st.just(5000).map(lambda digits: 10**digits)
"""More digits than Python prints by default (str() raises ValueError); built lazily so that
hypothesis never has to print it while describing the strategy."""

OPEN_DEFECTS: frozenset[str] = frozenset()
"""Input families that still break an entry point in an area whose fix is under way.

The general strategies leave them out, so that the suite keeps checking everything else;
`test_found_defects` holds each as a strict xfail. When those pass, remove the family here.
Every family the suite found so far is fixed: none is left out.
"""

hostile_number = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2, *_HUGE_INTS]),
    *([] if "int-too-long-to-print" in OPEN_DEFECTS else [_TOO_LONG_TO_PRINT]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.inf, -math.inf, math.nan, -0.0, 1e308, 5e-324, 2.5, 0.5, 1e-9]),
    st.booleans(),
)
"""Numbers as they arrive from JSON or Python callers: huge, non-finite, fractional, booleans."""


class DeepList(list):  # type: ignore[type-arg]
    """The outermost list of a deeply nested value.

    Hypothesis's reports print it as the call that made it (printing the value would recurse
    thousands of levels); its ``repr`` stays the list's, so code that prints it still recurses.
    """

    depth = 0

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(f"deep_value({self.depth}, kind='list')")


class DeepDict(dict):  # type: ignore[type-arg]
    """The outermost dict of a deeply nested value (see `DeepList`)."""

    depth = 0

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(f"deep_value({self.depth}, kind='dict')")


def deep_value(depth: int, *, kind: str = "list") -> Any:
    """A Python value nested ``depth`` levels deep (built without recursion)."""
    value: Any = "x"
    for _ in range(depth - 1):
        value = [value] if kind == "list" else {"a": value}
    outer: Any = DeepList([value]) if kind == "list" else DeepDict(a=value)
    outer.depth = depth
    return outer


def deep_json_text(depth: int, *, kind: str = "list") -> str:
    """A JSON text nested ``depth`` levels deep."""
    if kind == "list":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


_leaves = st.one_of(st.none(), st.booleans(), hostile_number, hostile_text)
_nested = st.recursive(
    _leaves,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(hostile_key, children, max_size=4)),
    max_leaves=10,
)
_deep = st.builds(deep_value, st.sampled_from([50, 101, 999, 3000, 6000]), kind=st.sampled_from(["list", "dict"]))

_bounded_leaves = st.one_of(
    st.none(), st.booleans(), hostile_number.filter(lambda n: not isinstance(n, int) or abs(n) < 10**300), hostile_text
)
bounded_json_value = st.recursive(
    _bounded_leaves,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(hostile_key, children, max_size=4)),
    max_leaves=10,
)
"""JSON-like values nested at most a few levels, without integers of 300 digits or more."""

hostile_json_value = st.one_of(_nested, _deep)
"""JSON-like Python values: the leaves above, nested lists and dicts, and values nested thousands deep."""
shallow_json_value = _nested
"""`hostile_json_value` without the values nested thousands deep."""


def lenient_dumps(value: Any, *, ensure_ascii: bool = False) -> str:
    """``json.dumps`` that writes ``NaN``/``Infinity`` and never fails (the text is hostile input anyway)."""
    try:
        return json.dumps(value, ensure_ascii=ensure_ascii)
    except (ValueError, TypeError, RecursionError):
        return "[" * 5000  # an unclosed, deep document stands in for what could not be written


_LITERAL_TEXTS = (
    "",
    " ",
    "{",
    "}",
    "[",
    "null",
    "[]",
    '"x"',
    "NaN",
    "Infinity",
    "-Infinity",
    '{"page": Infinity}',
    '{"page": NaN, "ref": "#0"}',
    '{"resolve_id": -Infinity}',
    '{"a": 1, "a": 2}',
    '{"ref": "#0", "ref": 7}',
    "1" * 5000,
    "1e999",
    "-1e999",
    '{"page": 1e999}',
    '{"page": ' + "9" * 5000 + "}",
    '"\\ud83d"',
    '{"p": "\\ud83d"}',
    '{"text": "\\udc00abc", "kind": "decision"}',
    "\ufeff{}",
    "{}\x00",
    '{"a": "b"',
    '{"ref": "snap_' + "a" * 600 + '"}',
)


def _json_texts(*, deep: bool) -> st.SearchStrategy[str]:
    literals = [t for t in _LITERAL_TEXTS if deep or len(t) < 1000]
    return st.one_of(
        st.sampled_from(literals),
        st.builds(lenient_dumps, hostile_json_value if deep else shallow_json_value, ensure_ascii=st.booleans()),
        st.builds(
            deep_json_text,
            st.sampled_from([99, 100, 101, 1000, 5000, 20_000] if deep else [99, 100, 101, 200]),
            kind=st.sampled_from(["list", "dict"]),
        ),
        st.builds(
            lambda text, cut: text[: max(1, len(text) * cut // 10)],
            st.builds(lenient_dumps, _leaves),
            st.integers(1, 9),
        ),
        hostile_text if deep else flat_text,
    )


hostile_json_text = _json_texts(deep=True)
"""JSON texts: valid, invalid, truncated, nested up to 20,000 deep, with non-standard literals and huge numbers."""
shallow_json_text = _json_texts(deep=False)
"""`hostile_json_text` nested at most 200 deep, without 5,000-digit numbers."""

hostile_any = st.one_of(st.none(), st.booleans(), hostile_number, hostile_text, hostile_json_value)
"""Any value in a field: the wrong type as often as the right one."""
shallow_any = st.one_of(st.none(), st.booleans(), hostile_number, hostile_text, shallow_json_value)
"""`hostile_any` without values nested thousands deep."""

CALL_IDS = ("call_pre", "call_1", "call_2", "toolu_1", "fc_1")
"""A small pool of tool-call ids, so hostile messages often refer to calls that exist."""


# --- mutation ---------------------------------------------------------------------------------
Path = tuple[Any, ...]


def _paths(value: Any, prefix: Path = ()) -> Iterator[Path]:
    stack: list[tuple[Path, Any]] = [(prefix, value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                yield (*path, k)
                stack.append(((*path, k), v))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield (*path, i)
                stack.append(((*path, i), v))


def _copy(value: Any) -> Any:
    """A copy of the dicts and lists of ``value`` (iterative: values may nest thousands deep)."""
    if not isinstance(value, dict | list):
        return value
    root: Any = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        src, dst = stack.pop()
        for key, child in src.items() if isinstance(src, dict) else enumerate(src):
            if isinstance(child, dict | list):
                new: Any = {} if isinstance(child, dict) else []
                stack.append((child, new))
            else:
                new = child
            if isinstance(dst, dict):
                dst[key] = new
            else:
                dst.append(new)
    return root


def _parent(value: Any, path: Path) -> Any:
    node = value
    for key in path[:-1]:
        node = node[key]
    return node


@st.composite
def mutated(
    draw: Callable[..., Any],
    base: st.SearchStrategy[Any],
    *,
    max_mutations: int = 3,
    values: st.SearchStrategy[Any] | None = None,
) -> Any:
    """A value of ``base`` with up to ``max_mutations`` values replaced, deleted or added at random paths."""
    value = _copy(draw(base))
    for _ in range(draw(st.integers(0, max_mutations))):
        paths = list(_paths(value))
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(value, path)
        op = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        new = values if values is not None else hostile_any
        if op == "replace":
            parent[path[-1]] = draw(new)
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(hostile_key)] = draw(new)
        else:
            parent.insert(path[-1], draw(new))
    return value

"""The bounded JSON helper: depth and size are checked before parsing, every failure is `BadJSON`."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, strategies as st

from contextwarden import _json

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=30,
)


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


@given(json_values, st.integers(min_value=1, max_value=6))
def test_depth_check_agrees_with_the_parsed_value(value: Any, limit: int) -> None:
    text = json.dumps(value)
    assert _json.too_deep(text, limit) == (depth(value) > limit)
    assert _json.nests_deeper(value, limit) == (depth(value) > limit)
    if depth(value) <= limit:
        assert _json.loads(text, max_depth=limit) == value
    else:
        with pytest.raises(_json.BadJSON, match="deeper than"):
            _json.loads(text, max_depth=limit)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[" * 5000 + "]" * 5000, "deeper than 100 levels"),
        ('{"a":' * 5000 + "1" + "}" * 5000, "deeper than 100 levels"),
        ("1" * 5000, "cannot be read"),  # more digits than Python converts
        ("not json", "is not valid JSON"),
        (b"\xff\xfe", "not valid UTF-8"),
    ],
)
def test_hostile_texts_are_bad_json_not_python_errors(text: str | bytes, problem: str) -> None:
    with pytest.raises(_json.BadJSON, match=problem):
        _json.loads(text)


def _accepted_by_loads(text: str, limit: int) -> bool:
    try:
        _json.loads(text, max_depth=limit)
    except _json.BadJSON:
        return False
    return True


# texts near JSON: valid documents, their prefixes and suffixes, JSON whitespace and other spaces
# around them (a form feed or a BOM is not JSON whitespace), and two documents in a row
near_json = st.builds(
    lambda value, cut, pad, second: (pad[0] + json.dumps(value) + pad[1] + second)[cut:],
    json_values,
    st.integers(min_value=-2, max_value=2).map(lambda k: max(k, 0)),
    st.tuples(*(st.sampled_from(["", " ", "\n\t", "\x0c", "\ufeff", "\u00a0", "\r\n "]),) * 2),
    st.sampled_from(["", "1", "{}", "]", "x", '""']),
)


@given(near_json | st.text(max_size=20), st.integers(min_value=1, max_value=6))
def test_is_json_accepts_exactly_what_loads_accepts(text: str, limit: int) -> None:
    assert _json.is_json(text, max_depth=limit) == _accepted_by_loads(text, limit)


@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000, "1" * 5000, "", "   ", "\ufeff{}", "{} x"])
def test_is_json_refuses_what_loads_refuses(text: str) -> None:
    assert not _json.is_json(text)
    assert not _accepted_by_loads(text, _json.MAX_DEPTH)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = json.dumps({"code": "[" * 500 + "{" * 500})
    assert _json.loads(text) == {"code": "[" * 500 + "{" * 500}


def test_size_is_bounded_before_parsing() -> None:
    with pytest.raises(_json.BadJSON, match="at most 10"):
        _json.loads('{"a": "long text"}', max_chars=10)


def test_escaped_half_surrogates_are_found_where_they_decode() -> None:
    text = '{"p": ["ok", {"q": "\\ud83d"}]}'
    assert _json.may_decode_to_surrogate(text)
    assert _json.lone_surrogate_path(_json.loads(text)) == "$.p[1].q"
    whole = '{"p": "\\ud83d\\ude00"}'  # a complete pair decodes to one character
    assert _json.lone_surrogate_path(_json.loads(whole)) is None


def test_scrub_makes_any_state_encodable() -> None:
    state = {"a": ["x\ud83d", {"k\udc00": "fine"}], "n": 1}
    clean = _json.storable(state)
    json.dumps(clean, ensure_ascii=False).encode("utf-8")
    assert clean == {"a": ["x\ufffd", {"k\ufffd": "fine"}], "n": 1}
    ok = {"a": "b"}
    assert _json.storable(ok) is ok


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, 3),
        (3.0, 3),
        ("3", 3),
        (math.inf, None),
        (math.nan, None),
        (-1, None),
        (0, None),
        (10**400, None),
        ("9" * 5000, None),
        (True, None),
        ([1], None),
        ("2.5", None),
        (2.5, None),
    ],
)
def test_whole_numbers_from_model_arguments(value: object, expected: int | None) -> None:
    assert _json.whole_number(value) == expected


def test_metadata_problems_name_the_path() -> None:
    assert _json.metadata_problem({"a": [1, {"b": math.inf}]}) == ("a[1].b", "is inf, which JSON cannot hold")
    assert _json.metadata_problem({"a": {1: "x"}})[1].startswith("has a key of type int")  # type: ignore[index]
    assert _json.metadata_problem({"ok": [1, "two", None, True, 2.5]}) is None


class _Text(str):
    """A str subclass: not one of the exact JSON types, so the walk looks at it."""


metadata_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.just(10**700)
    | st.floats()
    | st.text(max_size=6)
    | st.just("\ud800")
    | st.builds(_Text, st.text(max_size=3))
    | st.just(object()),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=4) | st.just("\udfff") | st.integers(0, 3), inner, max_size=4)
    ),
    max_leaves=25,
)


@given(metadata_values, st.integers(min_value=0, max_value=5))
def test_metadata_problem_finds_what_the_path_naming_walk_finds(value: Any, limit: int) -> None:
    # the fast check of plain JSON answers only "no problem", and only when the walk would too
    assert _json.metadata_problem(value, max_depth=limit) == _json._metadata_walk(value, limit)

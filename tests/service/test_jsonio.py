"""The proxy reads request bodies as ``json.loads`` does, with a faster parser where they agree."""

from __future__ import annotations

import json
import math

import pytest

from contextwarden.service import jsonio

SAME = [
    b'{"model": "m", "messages": [{"role": "user", "content": "caf\\u00e9 \\ud83d\\ude00 \xc3\xa9"}]}',
    b'{"seed": 1180591620717411303425, "low": -9223372036854775809, "u64": 18446744073709551615}',
    b'{"t": 0.1, "max": 1.7976931348623157e308, "tiny": 5e-324, "neg": -0.0, "e": 1E5, "big": 1e400}',
    b'{"a": 1, "a": 2}',
    b'{"lone": "\\ud800"}',  # a lone surrogate: only the standard library reads it
    b'{"lone": "\\ud800", "deep": ' + b"[" * 199 + b"]" * 199 + b"}",  # the fast parser refuses, within the bound
    b'\xef\xbb\xbf{"bom": true}',
    b'  {"a" : [ ] , "b": null}  ',
]


@pytest.mark.parametrize("raw", SAME)
def test_a_body_reads_as_the_standard_library_reads_it(raw: bytes) -> None:
    assert repr(jsonio.loads(raw)) == repr(json.loads(raw))


def test_nan_and_infinity_read_as_the_standard_library_reads_them() -> None:
    value = jsonio.loads(b'{"a": NaN, "b": Infinity, "c": -Infinity}')
    assert math.isnan(value["a"]) and value["b"] == math.inf and value["c"] == -math.inf


@pytest.mark.parametrize(
    "raw", [b"", b"[1,2", b'{"a":"x"} junk', b"{'a':1}", b'{"a":01}', b'{"a":"x\ny"}', b'{"a":"\xff"}']
)
def test_invalid_json_fails_with_the_standard_library_s_error(raw: bytes) -> None:
    with pytest.raises(ValueError) as ours:
        jsonio.loads(raw)
    with pytest.raises(ValueError) as theirs:
        json.loads(raw)
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("depth", [201, 1000, 5000])
def test_a_document_past_the_depth_bound_is_refused_as_too_deep(depth: int) -> None:
    with pytest.raises(jsonio.TooDeep, match="deeper than 200"):
        jsonio.loads(b'{"a": ' + b"[" * depth + b"]" * depth + b"}")

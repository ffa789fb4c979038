"""`split_words` splits a command as POSIX ``shlex.split`` does, in time linear in its length."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import example, given, strategies as st

from contextwarden.shellrefs import shell_references, split_words

_PIECES = st.sampled_from(
    ["a", "b/c.py", " ", "\t", "\n", "'", '"', "\\", "\\\\", '\\"', "$x", "é", "\u00a0", "#", ";"]
)


@example('a "b\\"c" \'d e\' f\\ g')
@example("''")
@example('"a\\\\b\\c"')
@example("x\\\ny")
@given(st.lists(_PIECES, max_size=30).map("".join))
def test_split_words_agrees_with_shlex(text: str) -> None:
    try:
        expected: list[str] | None = shlex.split(text, comments=False, posix=True)
    except ValueError:
        expected = None
    if expected is None:
        with pytest.raises(ValueError):
            split_words(text)
    else:
        assert split_words(text) == expected


@pytest.mark.parametrize(
    ("unit", "words"),
    [("a=", ["a=" * 200_000]), ("'a'", ["a" * 200_000]), ('"a"', ["a" * 200_000]), ("\\a", ["a" * 200_000])],
)
def test_a_long_word_is_split_whole(unit: str, words: list[str]) -> None:
    # shlex grows a word a character at a time: minutes at this size
    assert split_words(unit * 200_000) == words
    assert shell_references(f"cat {unit * 200_000}") is not None


def test_many_words_are_split() -> None:
    assert split_words("a b " * 100_000) == ["a", "b"] * 100_000

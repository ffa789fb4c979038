"""Keyword tokenization: words, light stemming, stopwords, CJK bigrams."""

from __future__ import annotations

from hypothesis import given, strategies as st

from contextwarden.memory._text import tokenize


def test_words_are_lowered_stemmed_and_stopwords_dropped() -> None:
    assert tokenize("The user is Painting SUNSETS in the garden") == ["user", "paint", "sunset", "garden"]


def test_cjk_runs_become_bigrams_and_mixed_text_keeps_words() -> None:
    assert tokenize("我喜欢北京") == ["我喜", "喜欢", "欢北", "北京"]
    assert tokenize("部署 deploy 失败") == ["部署", "deploy", "失败"]
    assert tokenize("猫") == ["猫"]
    assert tokenize("東京タワー") == ["東京", "京タ", "タワ", "ワー"]


def test_identifiers_survive() -> None:
    tokens = tokenize("Ticket OPS-4411 failed in src/billing/parser.py at a1b2c3d")
    assert {"op", "4411", "src", "billing", "parser", "py", "a1b2c3d"} <= set(tokens) or "ops" in tokens


@given(st.text(max_size=200))
def test_tokenize_never_fails_and_yields_nonempty_lowercase_tokens(text: str) -> None:
    for token in tokenize(text):
        assert token and token == token.lower() and " " not in token


@given(st.text(alphabet="一二三四五六七八九十天地人和", min_size=2, max_size=30))
def test_a_cjk_run_of_n_characters_gives_n_minus_one_bigrams(text: str) -> None:
    tokens = tokenize(text)
    assert len(tokens) == len(text) - 1
    assert "".join(t[0] for t in tokens) + tokens[-1][1] == text

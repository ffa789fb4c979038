"""GitHub's BPE engine counts exactly what tiktoken counts, and is used only where it does."""

from __future__ import annotations

import gzip
import importlib.util
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import tiktoken
from hypothesis import given, settings, strategies as st

from contextwarden.exceptions import ConfigError
from contextwarden.tokens import get_counter, tiktoken as tiktoken_module
from contextwarden.tokens.bpe_engine import ENGINE_NAME, engine_for
from contextwarden.tokens.tiktoken import _CL100K_PAT, _R50K_PAT, TiktokenCounter, load_encoding

# pieces that decide where the split patterns cut: every kind of whitespace and line break,
# contractions in both cases, letters with marks, digits in runs, CJK, emoji with modifiers,
# punctuation runs, "/" and the special-token strings (plain text in ordinary counting)
_ALPHABET = [
    "a", "Z", "ab", "é", "e\u0301", "ß", "Ω", "ǅ", "中", "文", "日本", "한", "😀", "👍🏽", "①", "Ⅻ", "٣", "1", "23",
    "4567", " ", "  ", "   ", "\n", "\n\n", "\r", "\r\n", "\t", "\x0b", "\x0c", "\x85", "\u00a0", "\u1680", "\u2000",
    "\u2028", "\u2029", "\u3000", "\u200b", "\ufeff", "'", "'s", "'S", "'ll", "'LL", "'ve", "'re", "'d", "'m", "'t",
    "’", "/", ".", "...", ",", "-", "_", "!", "?", "#", "(", ")", "{", "}", '"', "\\", "<|endoftext|>",
    "<|fim_prefix|>", "http://x.io/a?b=1",
]  # fmt: skip
_texts = st.lists(st.sampled_from(_ALPHABET), max_size=80).map("".join)


def _encoding_file(tmp_path: Path, name: str) -> Path:
    """The published ``name`` ranks as shipped (gzipped) inside ``bpe-openai``, written out as a .tiktoken file."""
    spec = importlib.util.find_spec("bpe_openai")
    assert spec is not None and spec.submodule_search_locations, "bpe-openai is installed with the dev extra"
    packed = Path(next(iter(spec.submodule_search_locations))) / "data" / f"{name}.tiktoken.gz"
    path = tmp_path / f"{name}.tiktoken"
    path.write_bytes(gzip.decompress(packed.read_bytes()))
    return path


@pytest.fixture(scope="module")
def cl100k() -> TiktokenCounter:
    counter = get_counter("tiktoken:cl100k_base")
    assert isinstance(counter, TiktokenCounter)
    return counter


@pytest.fixture(scope="module")
def o200k(tmp_path_factory) -> Iterator[TiktokenCounter]:
    known = "o200k_base" in tiktoken_module._loaded
    counter = TiktokenCounter.from_file(_encoding_file(tmp_path_factory.mktemp("o200k"), "o200k_base"))
    assert counter.name == "tiktoken:o200k_base"
    yield counter
    if not known:  # other tests expect o200k_base to be missing unless its file is in the cache
        tiktoken_module._loaded.pop("o200k_base", None)


def test_the_published_encodings_count_with_the_engine(cl100k, o200k):
    assert cl100k.engine == ENGINE_NAME
    assert o200k.engine == ENGINE_NAME
    assert repr(cl100k) == "TiktokenCounter(name='tiktoken:cl100k_base', engine='bpe-openai')"


@settings(max_examples=1500, deadline=None)
@given(text=_texts)
def test_cl100k_engine_counts_what_tiktoken_counts(cl100k, text):
    assert cl100k.count_text(text) == len(cl100k.encoding.encode_ordinary(text))


@settings(max_examples=1500, deadline=None)
@given(text=_texts)
def test_o200k_engine_counts_what_tiktoken_counts(o200k, text):
    assert o200k.count_text(text) == len(o200k.encoding.encode_ordinary(text))


@settings(max_examples=500, deadline=None)
@given(text=st.text(max_size=120))
def test_any_unicode_text_counts_as_tiktoken_counts_it(cl100k, o200k, text):
    # lone surrogates included: the engine refuses them and tiktoken's repair counts them
    for counter in (cl100k, o200k):
        assert counter.count_text(text) == len(counter.encoding.encode_ordinary(text)), counter.name


@pytest.mark.parametrize(
    "text",
    [
        " " * 10_000,
        "a" * 50_000,
        "7" * 9_999,
        "\n" * 3_000 + "x",
        " \t\n" * 4_000,
        "中文" * 20_000,
        "x  " * 30_000 + "   ",
        "def f():\n    return 1\n\n" * 5_000,
        "".join(_ALPHABET) * 300,
    ],
    ids=["spaces", "letters", "digits", "breaks", "mixed-space", "cjk", "trailing", "code", "alphabet"],
)
def test_long_texts_count_as_tiktoken_counts_them(cl100k, o200k, text):
    for counter in (cl100k, o200k):
        assert counter.count_text(text) == len(counter.encoding.encode_ordinary(text)), counter.name


def test_engine_tiktoken_counts_with_tiktoken_alone(cl100k):
    plain = TiktokenCounter(cl100k.encoding, engine="tiktoken")
    assert plain.engine == "tiktoken"
    assert plain.name == cl100k.name  # the same counts: caches and stores keyed by the name stay valid
    text = "Both count the same: it's 2026, 中文 and\n\tcode()."
    assert plain.count_text(text) == cl100k.count_text(text) == len(cl100k.encoding.encode_ordinary(text))


def test_an_unknown_engine_is_refused_naming_the_choices(cl100k):
    with pytest.raises(ConfigError, match="'auto' or 'tiktoken', got 'fast'"):
        TiktokenCounter(cl100k.encoding, engine="fast")  # type: ignore[arg-type]


def test_an_encoding_with_the_name_but_other_ranks_counts_with_tiktoken():
    published = load_encoding("cl100k_base")
    ranks = dict(published._mergeable_ranks)
    for merged in (b" the", b"ing", b" a", b"er", b"on", b"in"):
        del ranks[merged]
    altered = tiktoken.Encoding(name="cl100k_base", pat_str=_CL100K_PAT, mergeable_ranks=ranks, special_tokens={})
    counter = TiktokenCounter(altered)
    assert counter.engine == "tiktoken"  # the probe text counted otherwise than the engine does
    text = "the string within the interior"
    assert counter.count_text(text) == len(altered.encode_ordinary(text)) != len(published.encode_ordinary(text))


def test_an_encoding_with_the_name_but_another_pattern_counts_with_tiktoken():
    published = load_encoding("cl100k_base")
    other = tiktoken.Encoding(
        name="cl100k_base", pat_str=_R50K_PAT, mergeable_ranks=published._mergeable_ranks, special_tokens={}
    )
    counter = TiktokenCounter(other)
    assert counter.engine == "tiktoken"
    text = "it's   spaced\n\n  out 12345"
    assert counter.count_text(text) == len(other.encode_ordinary(text))


def test_engine_for_knows_only_the_encodings_it_implements(cl100k):
    assert engine_for("p50k_base", cl100k.encoding.encode_ordinary) is None
    assert engine_for("cl100k_base", cl100k.encoding.encode_ordinary) is not None
    # a reference that counts otherwise (another encoding's) is not matched by the engine
    assert engine_for("cl100k_base", lambda text: [0] * (len(text) + 1)) is None


def test_the_package_imported_later_uses_the_same_engine_module(cl100k):
    assert cl100k.engine == ENGINE_NAME
    loaded = sys.modules["bpe_openai._bindings"]
    with warnings.catch_warnings():  # the package's own import uses a deprecated importlib.resources call
        warnings.simplefilter("ignore", DeprecationWarning)
        import bpe_openai

    assert sys.modules["bpe_openai._bindings"] is loaded
    assert len(bpe_openai.get_encoding("cl100k_base").encode_ordinary("hello world")) == 2

"""Tokenization for keyword retrieval: words for alphabetic scripts, character bigrams for CJK runs."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

__all__ = ["MAX_TOKEN_CHARS", "STOPWORDS", "is_cjk", "tokenize"]

MAX_TOKEN_CHARS = 120
"""The longest keyword token; a longer word is indexed and searched by its first this many characters."""

# CJK ideographs, kana and hangul: scripts written without spaces, indexed as overlapping bigrams.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+(?:['’][^\W{_CJK}]+)?|\d+")
_CJK_RUN = re.compile(rf"^[{_CJK}]+$")

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours yourself yourselves
    yeah yes oh wow hey hi really also got get gets getting thing things lot much many one ever like""".split()
)


def is_cjk(text: str) -> bool:
    """True when ``text`` is one run of CJK characters."""
    return bool(_CJK_RUN.match(text))


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    # A light suffix stripper: enough to match "painting"/"paints"/"painted" with "paint".
    if len(word) <= 4 or not word.isalpha():
        return word
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s" and word.endswith("ss"):
                return word
            if suffix == "es" and not word.endswith(("ches", "shes", "xes", "sses", "zes")):
                continue
            stem = word[: len(word) - len(suffix)] + keep
            if suffix in ("ing", "ed") and len(stem) > 3 and stem[-1] == stem[-2] and stem[-1] not in "lsz":
                stem = stem[:-1]
            return stem
    return word


def tokenize(text: str, *, stopwords: frozenset[str] = STOPWORDS) -> list[str]:
    """Keyword tokens of ``text``: lower-cased, NFKC-normalized words, lightly stemmed, stopwords dropped.

    A run of CJK characters becomes its overlapping character bigrams (a single character stays
    as it is), since those scripts do not separate words by spaces.
    """
    if stopwords is STOPWORDS:
        # the same memories are tokenized again on every recall that touches or re-ranks them
        return list(_cached_tokens(text))
    return _tokenize(text, stopwords)


@lru_cache(maxsize=16384)
def _cached_tokens(text: str) -> tuple[str, ...]:
    return tuple(_tokenize(text, STOPWORDS))


def _tokenize(text: str, stopwords: frozenset[str]) -> list[str]:
    tokens: list[str] = []
    for match in _TOKEN.finditer(unicodedata.normalize("NFKC", text).lower()):
        piece = match.group()
        if is_cjk(piece):
            if len(piece) == 1:
                tokens.append(piece)
            else:
                tokens.extend(piece[i : i + 2] for i in range(len(piece) - 1))
            continue
        piece = piece.replace("’", "'")
        if "'" in piece:
            piece = piece.split("'", 1)[0]
        if not piece or piece in stopwords:
            continue
        # A very long word (a hash, a base64 blob) is searched by its head: full-text indexes
        # refuse longer terms (Postgres: 2,047 bytes), and the text itself is kept whole.
        tokens.append(_stem(piece[:MAX_TOKEN_CHARS]))
    return tokens

"""Cue forms matched by the words a sentence holds: what tells a rule, a correction, a decision.

A family of cues (`CueSet`) is a set of regular-expression forms. Searching a sentence for one
big alternation of them makes Python's engine try every form at every position (tens of
microseconds a sentence; the user's every message is read so). Here each form is filed under a
word that occurs, whole, in any text the form matches (its *anchor*): a sentence is split into
its words once (`words`), and only the forms whose anchor is among them are tried. Forms that
open a sentence are tried at its start only; forms without word boundaries (Chinese and
Japanese cues, a word's prefix) are filed under a substring. `CueSet.pattern` is the family as
one alternation: what `CueSet.found` must agree with (a property test checks it).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["CueSet", "words"]

_WORD_RE = re.compile(r"\w+")


def words(low: str) -> frozenset[str]:
    """The words of a lower-cased sentence, as ``\\b`` delimits them (``don't``: ``don`` and ``t``)."""
    return frozenset(_WORD_RE.findall(low))


class CueSet:
    """A family of cue forms (see the module docstring); matched against a lower-cased sentence.

    Args:
        opening: forms that open the sentence (matched at its start only), as one pattern.
        words: cues that are one whole word each.
        phrases: forms by the anchors they contain (``"before": [r"\\bbefore (?:you|any)\\b"]``);
            a key may name several anchors, separated by spaces, any of which every match contains.
        texts: forms by a substring every match contains (``None``: the substring is the form).
    """

    __slots__ = (
        "_anchored",
        "_ascii_texts",
        "_by_anchor",
        "forms",
        "_opening_at",
        "_other_texts",
        "_phrases",
        "_words",
        "opening",
        "pattern",
    )

    def __init__(
        self,
        *,
        opening: str | None = None,
        words: str = "",
        phrases: Mapping[str, Iterable[str]] | None = None,
        texts: Mapping[str, str | None] | None = None,
    ) -> None:
        self.opening = re.compile(opening) if opening else None
        # the same without its "^": matched at a sentence's offset inside its message
        self._opening_at = re.compile(opening.removeprefix("^")) if opening else None
        self._words = frozenset(words.split())
        self._phrases: dict[str, re.Pattern[str]] = {}
        forms: list[str] = [opening] if opening else []
        forms += [rf"\b{w}\b" for w in sorted(self._words)]
        for anchors, group in (phrases or {}).items():
            forms += group
            joined = "|".join(group)
            for anchor in anchors.split():
                self._phrases[anchor] = re.compile(joined)
        self._anchored = self._words | self._phrases.keys()
        self._by_anchor = {**{w: re.compile(rf"\b{re.escape(w)}\b") for w in self._words}, **self._phrases}
        """Every anchor's forms, a single word's included (`scan` looks for them by substring first)."""
        compiled = {needle: re.compile(form) if form else None for needle, form in (texts or {}).items()}
        forms += [form or re.escape(needle) for needle, form in (texts or {}).items()]
        # substrings outside ASCII are looked for only in sentences that have such characters
        self._ascii_texts = tuple((n, p) for n, p in compiled.items() if n.isascii())
        self._other_texts = tuple((n, p) for n, p in compiled.items() if not n.isascii())
        self.forms = tuple(forms)
        """Each form of the family on its own."""
        self.pattern = re.compile("|".join(f"(?:{f})" for f in forms))
        """The whole family as one alternation (its meaning; `found` is the fast way to ask it)."""

    def found(self, low: str, present: frozenset[str]) -> bool:
        """True when a form of the family occurs in ``low``; ``present``: its `words`."""
        if self.opening is not None and self.opening.match(low) is not None:
            return True
        hits = self._anchored.intersection(present)
        if hits:
            if not self._words.isdisjoint(hits):
                return True
            phrases = self._phrases
            if any(phrases[a].search(low) is not None for a in hits):
                return True
        return self._found_in_texts(low)

    def scan(self, low: str, present: frozenset[str], starts: Sequence[int], ends: Sequence[int]) -> list[bool]:
        """`found` for each sentence ``low[starts[i]:ends[i]]`` of one message; ``present``: the message's `words`.

        Every form is tried only in the sentences where its anchor occurs, each sentence bounded as if
        it stood alone (a ``\\b`` at its edges sees what it would see then: whitespace or a terminator).
        """
        found = [False] * len(starts)
        if self._opening_at is not None:
            opening = self._opening_at
            for i, (a, b) in enumerate(zip(starts, ends, strict=True)):
                found[i] = opening.match(low, a, b) is not None
        forms = self._by_anchor
        for anchor in self._anchored.intersection(present):
            _mark(low, anchor, forms[anchor], starts, ends, found)
        for needle, form in self._ascii_texts:
            _mark(low, needle, form, starts, ends, found)
        if self._other_texts and not low.isascii():
            for needle, form in self._other_texts:
                _mark(low, needle, form, starts, ends, found)
        return found

    def _found_in_texts(self, low: str) -> bool:
        for needle, form in self._ascii_texts:
            if needle in low and (form is None or form.search(low) is not None):
                return True
        if self._other_texts and not low.isascii():
            for needle, form in self._other_texts:
                if needle in low and (form is None or form.search(low) is not None):
                    return True
        return False


def _mark(
    low: str, needle: str, form: re.Pattern[str] | None, starts: Sequence[int], ends: Sequence[int], found: list[bool]
) -> None:
    """Mark the sentences where ``form`` occurs, trying it only in those where ``needle`` does."""
    at = low.find(needle)
    while at >= 0:
        i = bisect.bisect_right(starts, at) - 1
        if i < 0 or at >= ends[i]:  # between sentences: on to the next one
            at = low.find(needle, starts[i + 1]) if i + 1 < len(starts) else -1
            continue
        if not found[i]:
            if form is None:
                found[i] = at + len(needle) <= ends[i]
            else:
                found[i] = form.search(low, starts[i], ends[i]) is not None
        # the sentence is decided (a bounded search covers all of it): on to the next one
        at = low.find(needle, ends[i]) if i + 1 < len(starts) else -1

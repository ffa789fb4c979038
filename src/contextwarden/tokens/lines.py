"""Exact counts of texts that are rendered again and again with most of their lines unchanged.

The context block is rendered at every compaction, and most of its lines (the working set, the
ledger's steps) are the same as the last time. A tokenizer whose pre-tokenizer never joins a line
break to the character after it gives a text the sum of its parts' counts when the text is cut
right after such a break, so each part is counted once and remembered.

That holds for cl100k_base when the next character is neither whitespace nor ``/``: every piece of
its pattern that can hold a line break ends with it (``\\s*[\\r\\n]``, punctuation followed by
line breaks, a whitespace run at the end of the text), and BPE merges only within a piece. Cutting
before whitespace or ``/`` is avoided: there a break may share a piece with what follows (o200k_base
puts ``/`` after line breaks in one piece; GPT-2's pattern ends a run of spaces before a break
differently at the end of a text). Counters without that property count the whole text.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["LineCounts"]

_CUT = re.compile(r"(?<=\n)(?=[^\s/])")
"""After a line break, before a character that starts a new piece (not whitespace, not ``/``)."""


class LineCounts:
    """Counts a text as the sum of its lines' counts, each distinct line counted once.

    ``additive``: the counter gives a text cut by `_CUT` the sum of its parts' counts (see the module
    docstring); when False every text is counted whole. At most ``max_parts`` parts are remembered
    (all are forgotten at once when that is reached: a session's block has a few hundred).
    """

    def __init__(self, count: Callable[[str], int], *, additive: bool, max_parts: int = 8192) -> None:
        self._count = count
        self.additive = additive
        self.max_parts = max_parts
        self._parts: dict[str, int] = {}

    def count(self, text: str) -> int:
        """Tokens of ``text``: exactly what the counter gives for the whole text."""
        if not self.additive:
            return self._count(text)
        parts, total = self._parts, 0
        for part in _CUT.split(text):
            n = parts.get(part)
            if n is None:
                if len(parts) >= self.max_parts:
                    parts.clear()
                n = parts[part] = self._count(part)
            total += n
        return total

    def __len__(self) -> int:
        return len(self._parts)

"""Split a user's message into sentences without changing a character of any of them.

The user section quotes the user verbatim, so a sentence here is a span of the original text
(start and end offsets), never a normalized copy. A sentence ends at a line break, or at ``.``,
``!``, ``?`` (and their full-width forms ``。！？``, and ``…``) followed by a space and something
that starts a sentence; a full-width terminator needs no space after it. Decimals (``5.25``),
paths (``vendor/.`` at the end of a sentence still ends it), abbreviations followed by a lower
case word (``e.g. the``) and dotted names (``settings.py``) stay inside their sentence.

Text that a client wraps in its own markup (``<system-reminder>…</system-reminder>``, an IDE's
``<ide_opened_file>`` notice, a slash command's captured output) is not what the user wrote: it is
left out of the spans.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Span", "harness_blocks", "split_sentences", "user_spans"]

# Blocks an agent client inserts into the user's message: notices, hook output, a command's
# captured stdout. What is inside them came from the client or a program, not from the user.
_HARNESS_TAGS = (
    "system-reminder",
    "ide_opened_file",
    "ide_selection",
    "ide_diagnostics",
    "command-name",
    "command-message",
    "command-args",
    "command-contents",
    "local-command-stdout",
    "local-command-stderr",
    "bash-input",
    "bash-stdout",
    "bash-stderr",
    "user-prompt-submit-hook",
    "environment_context",
    "user_instructions",
)
_HARNESS_RE = re.compile(
    r"<(" + "|".join(re.escape(t) for t in _HARNESS_TAGS) + r")\b[^>]*>.*?(?:</\1\s*>|\Z)", re.DOTALL | re.IGNORECASE
)
_NOISE_RE = re.compile(r"^\s*\[Request interrupted by user[^\]]*\]\s*$")
# A terminator, closing quotes or brackets, then whitespace and a sentence start (not a lower
# case ASCII letter: "e.g. the", "approx. five"); a full-width terminator ends a sentence as is.
_END_RE = re.compile(r"(?:[.!?…]+[\"'”’»)\]]*(?=\s+[^\sa-z])|[。！？]+[”’」』)]*)")


@dataclass(frozen=True, slots=True)
class Span:
    """A sentence of a message: ``text[start:end]`` of the message's text."""

    start: int
    end: int


def harness_blocks(text: str) -> list[tuple[int, int]]:
    """Offsets of the client-inserted blocks of ``text`` (see the module docstring)."""
    if "<" not in text:
        return []
    return [(m.start(), m.end()) for m in _HARNESS_RE.finditer(text)]


def user_spans(text: str) -> list[tuple[int, int]]:
    """Offsets of the parts of ``text`` the user wrote (client blocks and interruption notices left out)."""
    blocks = harness_blocks(text)
    pieces: list[tuple[int, int]] = []
    at = 0
    for a, b in [*blocks, (len(text), len(text))]:
        if a > at:
            pieces.append((at, a))
        at = max(at, b)
    out: list[tuple[int, int]] = []
    for a, b in pieces:
        chunk = text[a:b]
        if not chunk.strip() or _NOISE_RE.match(chunk):
            continue
        lead = len(chunk) - len(chunk.lstrip())
        out.append((a + lead, a + len(chunk.rstrip())))
    return out


def split_sentences(text: str, *, start: int = 0, end: int | None = None) -> list[Span]:
    """The sentences of ``text[start:end]`` as spans, in order, trimmed of surrounding whitespace."""
    stop = len(text) if end is None else end
    spans: list[Span] = []
    line_start = start
    while line_start < stop:
        nl = text.find("\n", line_start, stop)
        line_end = stop if nl < 0 else nl
        at = line_start
        for m in _END_RE.finditer(text, line_start, line_end):
            _add(spans, text, at, m.end())
            at = m.end()
        _add(spans, text, at, line_end)
        line_start = line_end + 1
    return spans


def _add(spans: list[Span], text: str, a: int, b: int) -> None:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    if b > a:
        spans.append(Span(a, b))

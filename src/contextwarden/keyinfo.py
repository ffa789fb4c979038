"""Find what must survive when a text is shortened: identifiers, key lines, head and tail.

Compaction replaces old tool outputs and evicted rounds by short stand-ins. Agents later need
the exact strings those held (ids, paths, dates, amounts, function names, error messages), so
every stand-in keeps them verbatim. Everything here is deterministic and regex-based: it runs on
the hot path of a compaction and must cost little more than one scan of the text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator

from ._json import BadJSON, has_lone_surrogate, loads

__all__ = [
    "error_lines",
    "extract_identifiers",
    "fact_rank",
    "is_error_line",
    "json_facts",
    "key_lines",
    "preview",
    "rank_facts",
    "salient_facts",
]

# One pass, shaped so that the regex engine does O(1) work at most positions: one look-behind
# rejects every position inside a token (an identifier starts where a token starts), a possessive
# scan rejects plain words (no digit, "_", "/", capital or dot) at C speed, and only then one
# look-ahead decides whether the token is worth taking: a digit, underscore or slash in it (ids,
# dates, amounts, paths, snake_case), a code (SEA, HXDUBJ), camelCase, a file extension, or an
# exception name. URLs and amounts with thousands separators ($1,234.56) may run past a token.
_TOKEN = r"""[^\s"'`()\[\]{}<>,;=|]"""
_PLAIN = r"""[^\s"'`()\[\]{}<>,;=|\d_/A-Z.]"""
_EXT = r"(?:py|js|ts|tsx|go|rs|java|rb|c|h|cpp|md|json|yaml|yml|toml|txt|sql|sh|cfg|ini|log|csv)"
_IDENT_RE = re.compile(
    rf"(?<!{_TOKEN})(?:"
    r"https?://[^\s\"'<>)\]]+"
    r"|[$€£]?\b\d{1,3}(?:,\d{3})+(?:\.\d+)?\b"
    rf"|(?={_PLAIN}*+[\d_/A-Z.])"
    rf"(?=[A-Z][A-Z0-9]{{2}}|{_TOKEN}*?(?:[\d_/]|[a-z][A-Z]|\.{_EXT}\b|Error\b|Exception\b|Warning\b))"
    rf"{_TOKEN}+)"
)
# Lower-cased needles found with str.find: one C-speed scan each, far cheaper than a regex.
_KEY_WORDS = (
    "error",
    "exception",
    "traceback",
    "failed",
    "fatal",
    "panic",
    "denied",
    "refused",
    "timeout",
    "not found",
    "assert",
    "warning",
)
_TRIVIAL = frozenset({"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "100", "HTTP", "JSON", "NULL", "TRUE"})


def extract_identifiers(text: str, *, limit: int | None = None) -> list[str]:
    """Identifier-like strings of ``text`` in order of first appearance, without duplicates.

    Dates, URLs, paths, file names, amounts, codes, snake_case and camelCase names, and words
    that carry digits. Single digits and a few noise words are skipped.
    """
    # findall + dict.fromkeys keep the per-match work in C; only distinct tokens reach Python code
    found = [t.rstrip(".,:;!?-") for t in dict.fromkeys(_IDENT_RE.findall(text))]
    out = [t for t in dict.fromkeys(found) if 2 <= len(t) <= 200 and t not in _TRIVIAL]
    return out if limit is None else out[:limit]


def _json_scalars(value: object, depth: int = 0) -> Iterator[str]:
    if depth > 12:
        return
    if isinstance(value, dict):
        for v in value.values():
            yield from _json_scalars(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            yield from _json_scalars(v, depth + 1)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield str(value)
    elif isinstance(value, str) and value and len(value) <= 80 and not has_lone_surrogate(value):
        yield value  # a JSON escape of half a pair decodes to a lone surrogate: no fact, no store can keep it


_DATE_LIKE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TRIVIAL_WORDS = frozenset({"yes", "no", "true", "false", "none", "null", "ok", "n/a"})


_HAS_DIGIT = re.compile(r"\d")
_ERRORISH = re.compile(r"error|exception|traceback|failed|fatal", re.IGNORECASE)
_HAS_ALPHA = re.compile(r"[^\W\d_]")


@functools.lru_cache(maxsize=65536)
def fact_rank(fact: str) -> int:
    """How much a fact is worth keeping (0 best): ids and dates, codes, amounts, names, other words."""
    if " " in fact.strip():
        # several words: an error message is worth its place, a command or a phrase is not an id
        return 1 if _ERRORISH.search(fact) else 4
    has_digit = _HAS_DIGIT.search(fact) is not None
    has_alpha = _HAS_ALPHA.search(fact) is not None
    if (has_digit and has_alpha) or ("_" in fact and has_alpha) or "/" in fact or _DATE_LIKE.match(fact):
        return 0
    if len(fact) >= 3 and fact.isupper():
        return 1
    if has_digit and len(_HAS_DIGIT.findall(fact)) >= 3 and (fact[0] in "$€£" or "," in fact or "." in fact):
        return 2  # amounts
    if has_digit and not has_alpha and len(_HAS_DIGIT.findall(fact)) >= 3:
        return 4  # bare numbers and clock times: rarely what a later step asks for by name
    if fact.lower() in _TRIVIAL_WORDS or len(fact) <= 2 or (has_digit and not has_alpha):
        return 5
    if fact[:1].isupper():
        return 3
    return 4


def rank_facts(facts: Iterable[str]) -> list[str]:
    """Facts ordered by `fact_rank`, first appearance breaking ties; duplicates removed."""
    unique = list(dict.fromkeys(facts))
    return sorted(unique, key=fact_rank)


def json_facts(text: str) -> list[str] | None:
    """Distinct short scalar values of a JSON document, or None when ``text`` is not JSON."""
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        doc = loads(text)
    except BadJSON:
        return None
    return list(dict.fromkeys(_json_scalars(doc)))


_SPACE_RE = re.compile(r"\s")


def _word_end(text: str, at: int) -> int:
    """``at`` moved forward to the next whitespace, so a scan window never cuts an identifier."""
    if at >= len(text):
        return len(text)
    m = _SPACE_RE.search(text, at, at + 400)
    return m.start() if m else at


def salient_facts(text: str, *, limit: int | None = None, scan_chars: int | None = None) -> list[str]:
    """The facts worth keeping from a text, best first (`fact_rank`).

    A JSON document (up to 64 KB) is parsed whole and its short scalar values ranked; any other
    text is scanned for identifiers, over its first ``scan_chars`` characters when given.
    """
    facts = json_facts(text) if len(text) <= 65536 else None
    if facts is None:
        window = text if scan_chars is None else text[: _word_end(text, scan_chars)]
        facts = extract_identifiers(window)
    ranked = rank_facts(f for f in facts if fact_rank(f) < 5)
    return ranked if limit is None else ranked[:limit]


def key_lines(text: str, *, limit: int = 8, max_line_chars: int = 200) -> list[str]:
    """Lines that report errors, failures, warnings or timeouts (first ``limit``, in text order)."""
    lowered = text.lower()
    starts: set[int] = set()
    for word in _KEY_WORDS:
        pos = lowered.find(word)
        found = 0
        while pos >= 0 and found < limit:
            line_start = lowered.rfind("\n", 0, pos) + 1
            starts.add(line_start)
            found += 1
            line_end = lowered.find("\n", pos)
            if line_end < 0:
                break
            pos = lowered.find(word, line_end)
    out: list[str] = []
    for line_start in sorted(starts):
        line_end = text.find("\n", line_start)
        line = text[line_start : line_end if line_end >= 0 else len(text)].strip()
        if line and line not in out:
            out.append(line[:max_line_chars])
            if len(out) >= limit:
                break
    return out


def preview(text: str, *, head_chars: int = 300, tail_chars: int = 0) -> str:
    """Head (and optionally tail) of ``text``, cut at line or word boundaries, with the elision marked."""
    if len(text) <= head_chars + tail_chars + 40:
        return text
    head = text[:head_chars]
    cut = max(head.rfind("\n"), head.rfind(" "))
    if cut > head_chars // 2:
        head = head[:cut]
    omitted = len(text) - len(head) - tail_chars
    if tail_chars <= 0:
        return f"{head} …[{omitted} chars omitted]"
    tail = text[-tail_chars:]
    nl = tail.find("\n")
    if 0 <= nl < tail_chars // 2:
        tail = tail[nl + 1 :]
    return f"{head}\n…[{omitted} chars omitted]…\n{tail}"


def is_error_line(line: str) -> bool:
    """True when a key line names an error, exception or failure (a warning or timeout alone is not)."""
    return _ERRORISH.search(line) is not None


def error_lines(text: str, *, limit: int = 2) -> list[str]:
    """Up to ``limit`` lines naming an error or exception (not warnings), cut to 160 characters."""
    return [line for line in key_lines(text, limit=2 * limit, max_line_chars=160) if is_error_line(line)][:limit]

"""Every text scan of the package on long adversarial lines: time per MB and how it grows.

A scan whose cost grows with the square of its input (a regular expression that backtracks over
a long run, a loop that rescans what it has seen) turns one hostile tool output into a hung
agent. Each scanner here is a public entry point that reads text an agent, a tool or a model
wrote; each is run on inputs made of one short unit repeated (spaces, hex digits, path pieces,
heredoc markers, markdown emphasis...), at two sizes. A linear scan costs about twice as much at
twice the size; a quadratic one four times.

``bench scans`` reports, per scanner, the worst unit, its seconds per MB at the larger size and
the growth ratio; the target is a bound on seconds per MB (`TARGET_S_PER_MB`) for every scanner
and unit. The test suite runs the same scanners on long lines for correctness (no error, a
result of the right type), not for time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import keyinfo, shellrefs
from ..ledger_entries import describe_call, request_facts
from ..memory._text import tokenize
from ..memory.chunking import Source, chunk_lines, content_kinds, memories_from_messages
from ..memory.importance import HeuristicImportance
from ..messages import Message
from ..summarize._sections import parse_summary

__all__ = ["ADVERSARIAL_UNITS", "SCANNERS", "TARGET_S_PER_MB", "ScanFigure", "measure_scans"]

TARGET_S_PER_MB = 2.0
"""The most seconds one scanner may take per MB of input, for every unit, on this kind of machine."""

ADVERSARIAL_UNITS: tuple[str, ...] = (
    "a", "0", " ", "\t", "\n", "x1", "0f", "aB", "a_", "a.", "a-", "a/", "/", ".", "-", "_", "a b/",
    "\\", '"', "'", "`", "(", "()", "<", "<<", ">", "#", "# ", "*", "**", ":", "a:", "=", "a=", "[", "{",
    "$", "@", "|", ",", ";", "&", "~", "%", "é", "中", "\u200b", "https://a", "-c ", "python <<",
    "sed -i ", "::", "Error: ", "FAILED ", " passed", "a.py ", "exit code ", "**A**: ",
)  # fmt: skip
"""Units repeated to build a hostile line: runs of one character class, and pieces of the patterns scanners look for."""

_IMPORTANCE = HeuristicImportance()


def _memories(text: str) -> object:
    return memories_from_messages([Source(index=0, message=Message.user(text))], session_id="s", tenant="t")


def _describe(text: str) -> object:
    return describe_call("bash", json.dumps({"command": text}))


SCANNERS: dict[str, Callable[[str], object]] = {
    "shellrefs.shell_references": shellrefs.shell_references,
    "shellrefs.python_references": shellrefs.python_references,
    "shellrefs.find_paths": shellrefs.find_paths,
    "shellrefs.test_summary": shellrefs.test_summary,
    "shellrefs.exit_code": shellrefs.exit_code,
    "keyinfo.extract_identifiers": keyinfo.extract_identifiers,
    "keyinfo.salient_facts": keyinfo.salient_facts,
    "keyinfo.key_lines": keyinfo.key_lines,
    "keyinfo.error_lines": keyinfo.error_lines,
    "keyinfo.json_facts": keyinfo.json_facts,
    "ledger.request_facts": request_facts,
    "ledger.describe_call": _describe,
    "summary.parse_summary": parse_summary,
    "memory.tokenize": tokenize,
    "memory.chunk_lines": lambda text: chunk_lines(text, max_chars=480),
    "memory.content_kinds": content_kinds,
    "memory.importance": _IMPORTANCE,
    "memory.from_messages": _memories,
}
"""Public entry points that scan text written by a user, a tool or a model."""


@dataclass(frozen=True, kw_only=True)
class ScanFigure:
    """One scanner's worst case over the adversarial units."""

    scanner: str
    unit: str
    """The unit whose repetition cost the most per MB."""
    s_per_mb: float
    """Seconds per MB of input at the larger size, for that unit."""
    growth: float
    """Time at the larger size over time at the smaller one (2 for a linear scan of twice the input)."""

    @property
    def within_target(self) -> bool:
        """True when the scan stays under `TARGET_S_PER_MB`."""
        return self.s_per_mb <= TARGET_S_PER_MB


def adversarial_line(unit: str, chars: int) -> str:
    """``unit`` repeated to about ``chars`` characters."""
    return unit * max(1, chars // len(unit))


def _time(scan: Callable[[str], object], text: str) -> float:
    started = time.perf_counter()
    scan(text)
    return time.perf_counter() - started


def measure_scans(
    *,
    chars: int = 256_000,
    units: Sequence[str] = ADVERSARIAL_UNITS,
    scanners: dict[str, Callable[[str], object]] | None = None,
) -> list[ScanFigure]:
    """Each scanner's worst unit: time on ``chars`` and ``chars // 2`` characters of it."""
    figures: list[ScanFigure] = []
    for name, scan in (scanners or SCANNERS).items():
        worst: ScanFigure | None = None
        for unit in units:
            line = adversarial_line(unit, chars)
            small = _time(scan, adversarial_line(unit, chars // 2))
            large = _time(scan, line)
            mb = len(line.encode("utf-8")) / 1_000_000
            figure = ScanFigure(scanner=name, unit=unit, s_per_mb=large / mb, growth=large / max(small, 1e-9))
            if worst is None or figure.s_per_mb > worst.s_per_mb:
                worst = figure
        assert worst is not None
        figures.append(worst)
    return figures

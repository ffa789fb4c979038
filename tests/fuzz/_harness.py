"""The three properties every fuzzed entry point must hold, and the tally of inputs tried.

``probe.call(entry, fn, ...)`` runs one hostile input through an entry point: a return value or a
`ContextWardenError` passes (property 1), anything else is counted as a raw exception and fails the
test. ``probe.view_ok`` checks property 2 (the next view is valid for the provider and within
budget); ``probe.kept`` property 3 (nothing stored before the hostile input is gone);
``probe.isolated`` that another tenant saw nothing. Every check is counted per entry point; the
fuzz suite's conftest writes the totals to ``.fuzz-report.json`` and prints one summary line.

Tests marked ``xfail`` (known defects still being fixed) are tallied apart, as ``known``, so the
totals state what the passing suite showed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, settings

from contextwarden import toolpairs
from contextwarden.exceptions import ContextWardenError

__all__ = ["SCALE", "Failed", "Outcome", "Tally", "examples", "fuzz_settings", "probe"]

T = TypeVar("T")

SCALE = float(os.environ.get("CONTEXTWARDEN_FUZZ_SCALE", "1"))
"""Multiplies every test's example count (``make fuzz`` sets ``CONTEXTWARDEN_FUZZ_SCALE=10``)."""


def examples(n: int) -> int:
    """``n`` examples, scaled by `SCALE` (at least 1)."""
    return max(1, int(n * SCALE))


SHRINK = (
    os.environ.get("CONTEXTWARDEN_FUZZ_SHRINK", "0" if os.environ.get("HYPOTHESIS_PROFILE") == "ci" else "1") != "0"
)
"""Minimize failing inputs: on by default, off in CI (``HYPOTHESIS_PROFILE=ci``), where minimizing a
large hostile input can take minutes; ``CONTEXTWARDEN_FUZZ_SHRINK=1`` or ``0`` decides explicitly."""


def fuzz_settings(n: int, *, shrink: bool = True, **kwargs: Any) -> settings:
    """Settings for a fuzz test: ``n`` (scaled) examples, no deadline (the machine is shared), no size checks.

    ``shrink=False`` for tests of known defects (marked xfail): they fail on every run, and
    minimizing the failing input again each time would cost most of the suite's time budget.
    """
    if not (shrink and SHRINK):
        kwargs.setdefault("phases", [Phase.explicit, Phase.reuse, Phase.generate])
    return settings(
        max_examples=examples(n),
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
        ],
        **kwargs,
    )


@dataclass
class Tally:
    """What one entry point saw."""

    tried: int = 0
    """Generated inputs run through the entry point."""
    typed_errors: int = 0
    """Inputs refused with a `ContextWardenError` (allowed); the rest were accepted."""
    raw_exceptions: int = 0
    """Inputs that raised anything else (a failure)."""
    invalid_views: int = 0
    """Views afterwards that were invalid for the provider or over budget (a failure)."""
    data_lost: int = 0
    """Inputs after which something stored before was gone (a failure)."""
    cross_tenant_reads: int = 0
    """Reads or writes that crossed from one tenant into another's session (a failure)."""


@dataclass
class Ledger:
    passing: dict[str, Tally] = field(default_factory=dict)
    """Tallies of tests that must pass."""
    known: dict[str, Tally] = field(default_factory=dict)
    """Tallies of tests marked xfail (known defects still being fixed)."""
    in_known_test: bool = False

    def tally(self, entry: str) -> Tally:
        book = self.known if self.in_known_test else self.passing
        return book.setdefault(entry, Tally())

    def totals(self, book: dict[str, Tally]) -> dict[str, int]:
        out = {k: 0 for k in asdict(Tally())}
        for t in book.values():
            for k, v in asdict(t).items():
                out[k] += v
        return out

    def report(self) -> dict[str, Any]:
        return {
            "totals": self.totals(self.passing),
            "entry_points": {k: asdict(v) for k, v in sorted(self.passing.items())},
            "known_defects": {
                "totals": self.totals(self.known),
                "entry_points": {k: asdict(v) for k, v in sorted(self.known.items())},
            },
            "scale": SCALE,
        }


class Failed(AssertionError):
    """A property did not hold."""


@dataclass(frozen=True)
class Outcome:
    """What an entry point did with one input."""

    value: Any = None
    error: ContextWardenError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Probe:
    def __init__(self) -> None:
        self.ledger = Ledger()

    def call(self, entry: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Outcome:
        """Property 1: ``fn`` returns or raises a `ContextWardenError`; nothing else. Counts one input tried."""
        self.ledger.tally(entry).tried += 1
        return self._run(entry, fn, args, kwargs, counted=True)

    def check(self, entry: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Outcome:
        """`call` for a follow-up of an input already counted (the next view, a resume...)."""
        return self._run(entry, fn, args, kwargs, counted=False)

    def _run(self, entry: str, fn: Callable[..., T], args: Any, kwargs: Any, *, counted: bool) -> Outcome:
        tally = self.ledger.tally(entry)
        try:
            value = fn(*args, **kwargs)
        except ContextWardenError as exc:
            if counted:
                tally.typed_errors += 1
            return Outcome(error=exc)
        except Exception as exc:
            tally.raw_exceptions += 1
            raise Failed(f"{entry}: raw {type(exc).__name__}: {str(exc)[:300]}") from exc
        return Outcome(value=value)

    def count(self, entry: str) -> None:
        """Count one input that a test checks by other means than `call`."""
        self.ledger.tally(entry).tried += 1

    def raw(self, entry: str, detail: str) -> None:
        """Record a raw exception found by other means (a CLI crash message) and fail."""
        self.ledger.tally(entry).raw_exceptions += 1
        raise Failed(f"{entry}: {detail}")

    def view_ok(self, entry: str, view: Any, status: Any, *, allow_pending_tail: bool = True) -> None:
        """Property 2: the view is valid for the provider (no tool-pair problem) and within budget."""
        problems = toolpairs.validate(view, allow_pending_tail=allow_pending_tail)
        over = status is not None and status.used > status.budget
        if problems or over:
            self.ledger.tally(entry).invalid_views += 1
            what = "; ".join(p.detail for p in problems[:3])
            if over:
                what += f" view uses {status.used} tokens of a budget of {status.budget}"
            raise Failed(f"{entry}: invalid view after the input: {what}")

    def kept(self, entry: str, before: Iterable[str], after: Iterable[str], *, where: str) -> None:
        """Property 3: every id in ``before`` is still in ``after``."""
        missing = set(before) - set(after)
        if missing:
            self.ledger.tally(entry).data_lost += 1
            raise Failed(f"{entry}: {len(missing)} stored item(s) lost from {where}: {sorted(missing)[:5]}")

    def isolated(self, entry: str, leaked: bool, detail: str) -> None:
        """Another tenant's session was not readable or appendable."""
        if leaked:
            self.ledger.tally(entry).cross_tenant_reads += 1
            raise Failed(f"{entry}: cross-tenant access: {detail}")


probe = Probe()
"""The suite's one probe; the conftest reads its ledger at the end of the run."""

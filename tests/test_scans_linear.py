"""Every text scan of the package reads long adversarial lines to the end and answers.

The time per MB is a benchmark (``bench scans``); here each scanner runs on lines long enough
that a scan quadratic in its input would take minutes, so a regression shows as a suite that
stops finishing, and every scanner must still answer without an error.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings, strategies as st

from contextwarden.benchmarks.scans import ADVERSARIAL_UNITS, SCANNERS, adversarial_line

_UNITS = st.one_of(
    st.sampled_from(ADVERSARIAL_UNITS),
    st.text(alphabet=st.sampled_from(list(" \t\n/._-=:'\"\\<>#*|(){}[]$@aZ09é中")), min_size=1, max_size=5),
)


@pytest.mark.parametrize("scanner", sorted(SCANNERS))
@settings(max_examples=6, deadline=None)
@example(unit="x1")
@example(unit=" ")
@example(unit="a=")
@example(unit="_")
@example(unit="\n")
@given(unit=_UNITS)
def test_scanner_reads_a_long_adversarial_line(scanner: str, unit: str) -> None:
    line = adversarial_line(unit, 100_000)
    # the behaviour under test: the scan ends and raises nothing (a quadratic one takes minutes here)
    SCANNERS[scanner](line)

"""Running a benchmark module of ``benchmarks/`` as a user does, on the reference harness beside the checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT.parent / "shared" / "bench" / "peers_bench.py"


def run_benchmark(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks.<module> ARGS`` from the repository root (five minutes at most).

    The reference harness must be beside the checkout: a missing one fails the test, it is not skipped.
    """
    assert HARNESS.exists(), f"{HARNESS} is missing: check out the shared bench directory beside the repository"
    return subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

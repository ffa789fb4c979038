"""Running a benchmark module of ``benchmarks/`` as a user does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks.<module> ARGS`` from the repository root (five minutes at most).

    The workload is the reference harness's when it is beside the checkout, the built-in one otherwise
    (`benchmarks.workload`), as for a user.
    """
    return subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

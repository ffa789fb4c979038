"""Running a benchmark module of ``benchmarks/`` as a user does, on the reference harness beside the checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT.parent / "shared" / "bench" / "peers_bench.py"

needs_harness = pytest.mark.skipif(
    not HARNESS.exists(), reason="../shared/bench/peers_bench.py is not beside the checkout"
)


def run_benchmark(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks.<module> ARGS`` from the repository root (five minutes at most)."""
    pytest.importorskip("tiktoken")
    return subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

"""Small synthetic sample data shipped with the package, the default of the benchmark commands.

The files live in ``contextwarden/benchmarks/data/`` (written by ``tools/make_sample_data.py``):
``probe-traces.jsonl`` (probe traces), ``locomo-sample.json`` (LoCoMo's layout) and one coding
session as ``transcript.openai.json``, ``transcript.responses.json`` and
``transcript.anthropic.json``. They show that a command works; the full data sets are named with
``--data`` (see the benchmark page of the documentation).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SAMPLES", "sample_path"]

_DIR = Path(__file__).resolve().parent / "data"

SAMPLES = (
    "probe-traces.jsonl",
    "locomo-sample.json",
    "transcript.openai.json",
    "transcript.responses.json",
    "transcript.anthropic.json",
)
"""The sample files, by name."""


def sample_path(name: str) -> Path:
    """The path of the packaged sample file ``name`` (one of `SAMPLES`).

    Raises:
        ValueError: ``name`` is not a sample file.
    """
    if name not in SAMPLES:
        raise ValueError(f"{name!r} is not a packaged sample; use one of {', '.join(SAMPLES)}")
    return _DIR / name

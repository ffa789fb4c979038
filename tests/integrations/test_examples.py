"""Every script in examples/ runs offline, as written (a few turns each, through the real frameworks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))


def test_there_is_an_example_per_framework_and_plain_loop() -> None:
    assert {p.stem for p in EXAMPLES} >= {
        "langchain_agent",
        "openai_agents",
        "pydantic_ai_agent",
        "llamaindex_agent",
        "openai_sdk_loop",
        "anthropic_sdk_loop",
    }


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_example_runs_offline(script: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "CONTEXTWARDEN_"))}
    env.update(TURNS="4", PYTHONPATH=str(script.parents[1] / "src"))
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "4 turns" in result.stdout

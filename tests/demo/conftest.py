"""Demo test fixtures: a private user directory and one shared demo run."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from contextwarden.cli import app


@pytest.fixture(autouse=True)
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for key in list(os.environ):
        if key.startswith("CONTEXTWARDEN_") and key != "CONTEXTWARDEN_REQUIRE_SERVICES":
            monkeypatch.delenv(key)
    monkeypatch.setenv("CONTEXTWARDEN_HOME", str(tmp_path / "home"))
    yield tmp_path / "home"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`contextwarden demo --turns 120 --json` into a temporary store; returns the JSON and the report path."""
    base = tmp_path_factory.mktemp("demo")
    report = base / "report.html"
    store = f"sqlite:///{base / 'cw.db'}"
    env = {"CONTEXTWARDEN_HOME": str(base / "home")}
    result = CliRunner().invoke(
        app,
        [
            "demo",
            "--turns",
            "120",
            "--seed",
            "11",
            "--window",
            "16000",
            "--report",
            str(report),
            "--store",
            store,
            "--json",
        ],
        env=env,
    )
    assert result.exit_code == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    data["_store"] = store
    data["_report"] = report
    return data

"""The wheel a user installs: built from this tree, installed into a clean virtual environment.

`pip install contextwarden` gives the command, the typed package and its sample data; the README's
quickstart then runs as written, offline (no model server, no API key). The build and the install
take the dependencies from the package index, as a user's install does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from contextwarden._version import __version__

ROOT = Path(__file__).resolve().parents[1]


def _quickstart() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Quickstart") :]
    match = re.search(r"^```python\n(.*?)^```", section, re.M | re.S)
    assert match, "the README's Quickstart has a python block"
    return match.group(1)


def _offline_env(home: Path) -> dict[str, str]:
    """No model server, no API key, a private user directory: what a new user's shell has."""
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "HOME", "PIP_CACHE_DIR", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["CONTEXTWARDEN_HOME"] = str(home)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (found,) = out.glob("contextwarden-*.whl")
    return found


def test_the_wheel_carries_the_package_its_data_and_the_command(wheel: Path) -> None:
    assert wheel.name == f"contextwarden-{__version__}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "contextwarden/py.typed" in names
    assert any(n.startswith("contextwarden/benchmarks/data/") and n.endswith(".jsonl") for n in names)
    assert any(n.startswith("contextwarden/service/static/") for n in names)
    info = f"contextwarden-{__version__}.dist-info"
    assert f"{info}/licenses/LICENSE" in names
    assert not any(n.startswith(("tests/", "benchmarks/", "docs/")) for n in names)
    entry_points = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert re.search(r"^contextwarden = contextwarden", entry_points, re.M)


def test_a_clean_install_runs_the_command_and_the_quickstart_offline(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python, command = env_dir / "bin" / "python", env_dir / "bin" / "contextwarden"
    env = _offline_env(tmp_path / "home")
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    work = tmp_path / "work"
    work.mkdir()
    helped = subprocess.run([str(command), "--help"], cwd=work, capture_output=True, text=True, env=env, timeout=120)
    assert helped.returncode == 0, helped.stderr
    assert "serve" in helped.stdout and "demo" in helped.stdout
    ran = subprocess.run(
        [str(python), "-c", _quickstart()], cwd=work, capture_output=True, text=True, env=env, timeout=300
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "the bug is in src/module_7.py" in ran.stdout
    assert "compactions by layer:" in ran.stdout

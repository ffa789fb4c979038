"""`ServiceThread` serves the app in a thread and stops it cleanly: no thread outlives `stop`."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import httpx
import pytest

from contextwarden.exceptions import UsageError
from contextwarden.service import ServiceThread, create_app
from contextwarden.settings import Settings


def _settings(tmp_path: Path) -> Settings:
    return Settings(
        service={"upstream_url": "http://127.0.0.1:9/v1"}, store={"url": f"sqlite:///{tmp_path / 'sessions.db'}"}
    )


def test_the_service_answers_while_running_and_its_thread_ends_on_exit(tmp_path: Path) -> None:
    with ServiceThread(create_app(_settings(tmp_path))) as service:
        assert service.base_url == f"{service.url}/v1"
        assert httpx.get(f"{service.url}/healthz").status_code == 200
    assert not [t for t in threading.enumerate() if t.name == "contextwarden-service"]
    with pytest.raises(UsageError, match="not running"):
        _ = service.port
    service.stop()  # stopping twice is harmless


def test_a_taken_port_is_a_usage_error_and_leaves_no_thread(tmp_path: Path) -> None:
    with ServiceThread(create_app(_settings(tmp_path))) as first:
        taken = ServiceThread(create_app(_settings(tmp_path)), port=first.port, start_timeout=5)
        with pytest.raises(UsageError, match="did not start"):
            taken.start()
    assert not [t for t in threading.enumerate() if t.name == "contextwarden-service"]


def test_a_script_that_stops_the_service_exits_cleanly(tmp_path: Path) -> None:
    """The interpreter exits with status 0 (a loop left running in a daemon thread can crash it)."""
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import httpx
            from contextwarden.service import ServiceThread, create_app
            from contextwarden.settings import Settings

            settings = Settings(
                service={{"upstream_url": "http://127.0.0.1:9/v1"}},
                store={{"url": "sqlite:///{tmp_path / "script.db"}"}},
            )
            service = ServiceThread(create_app(settings)).start()
            print(httpx.get(service.url + "/healthz").status_code)
            service.stop()
            """
        ),
        encoding="utf-8",
    )
    src = Path(__file__).resolve().parents[2] / "src"
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PYTHONPATH": str(src), "CONTEXTWARDEN_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "200"

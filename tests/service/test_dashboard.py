"""The dashboard in Debian's chromium (Playwright): the gauge moves when a request passes through the proxy."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from _services import unavailable
from contextwarden.testing import ScriptedOpenAIServer

from .conftest import SYSTEM, Running, chat, user

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]  # fmt: skip


def _chromium() -> str:
    executable = CHROMIUM if Path(CHROMIUM).is_file() else shutil.which("chromium")
    missing = [] if executable else ["Debian chromium (apt-get install -y chromium)"]
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pip install playwright)")
    if missing:
        unavailable("the dashboard test needs " + " and ".join(missing))
    assert executable is not None
    return executable


def test_the_gauge_changes_when_a_request_passes_through_the_proxy(
    service: Running, upstream: ScriptedOpenAIServer
) -> None:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    headers = {"X-Session-Id": "dash"}
    history = [SYSTEM, user("first question")]
    first = service.client.post("/v1/chat/completions", json=chat(*history), headers=headers)
    assert first.status_code == 200
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=ARGS, headless=True)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{service.url}/#dash")
            page.wait_for_selector("#sessions li[data-session-id='dash']")
            page.wait_for_function("Number(document.getElementById('gauge').dataset.ratio) > 0")
            before = float(page.get_attribute("#gauge", "data-ratio") or 0)
            assert page.text_content("#gauge-state") == "normal"
            page.wait_for_function("document.getElementById('connection').textContent.startsWith('live')")
            assert page.eval_on_selector_all("#breakdown tr", "rows => rows.length") == 4

            # a request through the proxy: the gauge follows from the SSE stream, no reload
            history += [first.json()["choices"][0]["message"], user("a much longer question " * 120)]
            second = service.client.post("/v1/chat/completions", json=chat(*history), headers=headers)
            assert second.status_code == 200
            reply = second.json()["choices"][0]["message"]
            status = service.client.get("/v1/sessions/dash").json()["status"]
            assert status["ratio"] > before
            page.wait_for_function(
                f"Number(document.getElementById('gauge').dataset.ratio) === {status['ratio']}", timeout=10_000
            )
            after = float(page.get_attribute("#gauge", "data-ratio") or 0)
            assert page.text_content("#gauge-used") == str(status["used"])
            width = page.eval_on_selector("#gauge-fill", "el => parseFloat(el.style.width)")
            assert width == pytest.approx(after * 100, abs=0.1)

            # a long conversation compacts: the timeline and the ledger show it
            for i in range(30):
                history += [reply, user(f"step {i}: " + "log line " * 60)]
                r = service.client.post("/v1/chat/completions", json=chat(*history), headers=headers)
                assert r.status_code == 200
                reply = r.json()["choices"][0]["message"]
                if sum(service.client.get("/v1/sessions/dash").json()["status"]["compactions"].values()):
                    break
            page.wait_for_selector("#timeline li", timeout=10_000)
            assert "tokens" in (page.text_content("#timeline li") or "")
            page.wait_for_selector("#ledger li", timeout=10_000)
            assert errors == []
        finally:
            browser.close()

"""The dashboard in Debian's chromium (Playwright): the gauge moves when a request passes through the proxy."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

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
            page = browser.new_page(bypass_csp=True)  # the test drives the page with evaluated predicates
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{service.url}/#dash")
            page.wait_for_selector("#sessions li[data-session-id='dash']")
            page.wait_for_function("Number(document.getElementById('gauge').dataset.ratio) > 0")
            before = float(page.get_attribute("#gauge", "data-ratio") or 0)
            assert page.text_content("#gauge-state") == "normal"
            page.wait_for_function("document.getElementById('connection').textContent.startsWith('live')")
            assert page.eval_on_selector_all("#breakdown tbody tr", "rows => rows.length") == 4

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
            page.wait_for_selector("#compactions li .tag", timeout=10_000)
            assert "saved" in (page.text_content("#compactions li") or "")
            page.wait_for_selector("#chart circle.compaction", timeout=10_000)
            page.wait_for_selector("#ledger li", timeout=10_000)
            assert errors == []
        finally:
            browser.close()


def _layout(page: Any) -> dict[str, Any]:
    """What a screenshot must show, measured: the chart, components adding up to the gauge, bounded lists."""
    return page.evaluate(
        """() => ({
          overflow: document.documentElement.scrollWidth - window.innerWidth,
          points: document.querySelectorAll('#chart polyline.used').length,
          marks: [...document.querySelectorAll('#chart line.threshold')].map(l => l.dataset.threshold),
          gaugeMarks: [...document.querySelectorAll('#gauge-marks .mark')].map(m => m.dataset.mark),
          fill: parseFloat(document.getElementById('gauge-fill').style.width),
          stack: [...document.querySelectorAll('#stack .seg')].reduce((a, s) => a + parseFloat(s.style.width), 0),
          total: Number(document.querySelector('#breakdown tr.total').dataset.sum),
          used: Number(document.getElementById('gauge-used').textContent),
          listed: document.querySelector('#sessions li .badge').textContent,
          ratio: document.getElementById('gauge-ratio').textContent,
          ledger: document.querySelectorAll('#ledger li').length,
          working: document.querySelectorAll('#working-set li').length,
          instructions: document.getElementById('instructions-card').hidden
            ? -1 : document.querySelectorAll('#instructions li').length,
          chartWidth: document.getElementById('chart').getBoundingClientRect().width,
        })"""
    )


_GLYPHS = """() => {
  // The first visible CJK text of the page, and how its distinct characters draw in the element's font.
  const cjk = /[\\u3040-\\u30ff\\u4e00-\\u9fff]/;
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let element = null;
  while (walker.nextNode()) {
    const parent = walker.currentNode.parentElement;
    if (cjk.test(walker.currentNode.textContent) && parent && parent.getClientRects().length) {
      element = parent;
      break;
    }
  }
  if (element === null) return null;
  const chars = [...new Set([...element.textContent].filter(c => cjk.test(c)))].slice(0, 8);
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = 48;
  const ctx = canvas.getContext('2d');
  ctx.font = `32px ${getComputedStyle(element).fontFamily}`;
  ctx.textBaseline = 'top';
  const shapes = chars.map(c => {
    ctx.clearRect(0, 0, 48, 48);
    ctx.fillText(c, 4, 4);
    return ctx.getImageData(0, 0, 48, 48).data.filter((_, i) => i % 4 === 3).join(',');
  });
  return {text: element.textContent.slice(0, 60), chars: chars.length, shapes: new Set(shapes).size};
}"""
"""Without a CJK font every missing character draws as the same box (tofu): distinct characters, one shape."""


def test_screenshots_at_desktop_and_phone_width_show_the_same_figures(tmp_path: Path) -> None:
    """A demo session in the store, served by the dashboard at 1280 and 420 px: the same chart, components and lists."""
    executable = _chromium()
    from playwright.sync_api import sync_playwright
    from typer.testing import CliRunner

    from contextwarden.cli import app
    from contextwarden.settings import Settings

    from .conftest import start_service

    store = f"sqlite:///{tmp_path / 'cw.db'}"
    args = ["demo", "--turns", "60", "--no-live", "--json", "--store", store, "--report", str(tmp_path / "r.html")]
    assert CliRunner().invoke(app, args).exit_code == 0
    service = start_service(Settings(store={"url": store}, service={"upstream_url": "http://127.0.0.1:9"}))
    seen: dict[int, dict[str, Any]] = {}
    glyphs: dict[int, dict[str, Any] | None] = {}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, args=ARGS, headless=True)
            try:
                for width in (1280, 420):
                    page = browser.new_page(viewport={"width": width, "height": 900}, bypass_csp=True)
                    errors: list[str] = []
                    page.on("pageerror", lambda e, found=errors: found.append(str(e)))
                    page.goto(f"{service.url}/#demo-7")
                    page.wait_for_selector("#chart polyline.used")
                    page.wait_for_selector("#sessions li .badge")
                    page.screenshot(path=str(tmp_path / f"dashboard-{width}.png"), full_page=True)
                    seen[width] = _layout(page)
                    glyphs[width] = page.evaluate(_GLYPHS)
                    assert errors == []
            finally:
                browser.close()
    finally:
        service.stop()
    for width, shown in seen.items():
        assert shown["overflow"] <= 0, f"the page is wider than {width} px"
        assert shown["points"] == 1 and {"low water", "high water", "overflow"} <= set(shown["marks"])
        assert shown["gaugeMarks"] == ["low water", "high water", "overflow"]  # the marks the band state uses
        assert shown["stack"] == pytest.approx(shown["fill"], abs=0.2)  # the components add up to the gauge
        assert shown["total"] == shown["used"]
        assert shown["listed"] == shown["ratio"]  # the list shows the gauge's ratio
        assert 0 < shown["ledger"] <= 12 and 0 < shown["working"] <= 12 and 0 < shown["instructions"] <= 12
        assert shown["chartWidth"] <= width
    desktop, phone = seen[1280], seen[420]
    assert {k: v for k, v in desktop.items() if k != "chartWidth"} == {
        k: v for k, v in phone.items() if k != "chartWidth"
    }
    assert phone["chartWidth"] < desktop["chartWidth"]
    for width, drawn in glyphs.items():  # the demo's user writes in Chinese: the screenshot shows its characters
        assert drawn is not None, f"no CJK text on the dashboard at {width} px"
        assert drawn["chars"] >= 4, drawn
        assert drawn["shapes"] == drawn["chars"], f"CJK characters draw as boxes (install fonts-noto-cjk): {drawn}"

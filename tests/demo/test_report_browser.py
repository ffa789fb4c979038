"""The HTML report opens in Debian's chromium and its charts render with data (Playwright)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from _services import unavailable

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _need_chromium() -> None:
    missing = []
    if not Path(CHROMIUM).is_file() and shutil.which("chromium") is None:
        missing.append("Debian chromium (apt-get install -y chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pip install playwright)")
    if missing:
        unavailable("browser test needs " + " and ".join(missing))


def test_report_renders_charts_in_chromium(demo_run: dict[str, Any], tmp_path: Path) -> None:
    _need_chromium()
    from playwright.sync_api import sync_playwright

    report = Path(demo_run["_report"])
    executable = CHROMIUM if Path(CHROMIUM).is_file() else str(shutil.which("chromium"))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(report.resolve().as_uri())
            assert page.title() == "contextwarden demo report (seed 11)"
            charts = page.eval_on_selector_all(
                "svg.chart",
                """els => els.map(el => {
                    const box = el.getBoundingClientRect();
                    return {
                        name: el.dataset.chart,
                        points: Number(el.dataset.points),
                        width: box.width,
                        height: box.height,
                        shapes: el.querySelectorAll('[data-series] , [data-series] rect').length,
                    };
                })""",
            )
            by_name = {c["name"]: c for c in charts}
            assert set(by_name) == {"utilization", "components", "compactions", "cache", "facts", "memory"}
            for chart in charts:
                assert chart["width"] > 500 and chart["height"] > 100, chart
                assert chart["points"] > 0 and chart["shapes"] > 0, chart
            # the utilization line is drawn across the chart, one vertex per turn
            line = page.eval_on_selector(
                'polyline[data-series="ratio"]',
                "el => ({n: el.points.numberOfItems, w: el.getBBox().width, h: el.getBBox().height})",
            )
            assert line["n"] == 120 and line["w"] > 500 and line["h"] > 20
            # reuse bars: one per turn, rendered with a size
            bars = page.eval_on_selector_all(
                '[data-series="reused"] rect', "els => els.filter(e => e.getBBox().height > 0).length"
            )
            assert bars > 60
            events = page.eval_on_selector_all('rect[data-series="event"]', "els => els.length")
            assert events == sum(demo_run["compactions_by_layer"].values())
            thresholds = page.eval_on_selector_all("line[data-threshold]", "els => els.map(e => e.dataset.threshold)")
            assert {"low water", "budget"} <= set(thresholds)  # the band's marks: the state rule the demo uses
            kept = page.inner_text('#summary [data-metric="fact retention"] b')
            assert kept == f"{sum(f['found'] for f in demo_run['facts'])}/10"
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
            assert (tmp_path / "report.png").stat().st_size > 10_000
            assert errors == []
            assert all(u.startswith("file://") for u in requests), requests
        finally:
            browser.close()

"""Render the README's picture: the demo report's utilization chart, as docs/images/utilization.png.

    python tools/render_chart.py

Runs the demo (300 turns, seed 7, no live view) into a temporary directory and screenshots the
report's ``#chart-utilization`` element with Playwright driving Debian's ``chromium``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "images" / "utilization.png"


def main() -> int:
    browser_path = shutil.which("chromium")
    if browser_path is None:
        print("chromium not found: apt-get install chromium", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "demo.html"
        env = {**os.environ, "CONTEXTWARDEN_HOME": tmp, "PYTHONPATH": str(ROOT / "src")}
        args = ["demo", "--no-live", "--report", str(report), "--store", f"sqlite:///{Path(tmp) / 'demo.db'}"]
        subprocess.run([sys.executable, "-m", "contextwarden", *args], env=env, check=True, stdout=subprocess.DEVNULL)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1000, "height": 800}, device_scale_factor=2)
            page.goto(report.as_uri())
            page.locator("#chart-utilization").screenshot(path=str(OUT))
            browser.close()
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The fuzz suite's report: inputs tried per entry point and what went wrong, as JSON and one line.

At the end of a run that reached the fuzz tests, the totals go to ``.fuzz-report.json`` in the
repository root (``CONTEXTWARDEN_FUZZ_REPORT`` names another file) and one line is printed:
``fuzz: N inputs tried over M entry points; raw exceptions 0, invalid views 0, data lost 0,
cross-tenant reads 0``. Tests marked xfail (known defects still being fixed) are counted apart.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ._harness import probe


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.fuzz)
            # Hostile inputs are large by design; hypothesis warns when it prints one in a report.
            item.add_marker(pytest.mark.filterwarnings("ignore:Generating overly large repr"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    probe.ledger.in_known_test = item.get_closest_marker("xfail") is not None


def _report_path(config: pytest.Config) -> Path:
    return Path(os.environ.get("CONTEXTWARDEN_FUZZ_REPORT") or config.rootpath / ".fuzz-report.json")


def _summary(report: dict[str, Any]) -> str:
    t = report["totals"]
    line = (
        f"fuzz: {t['tried']:,} inputs tried over {len(report['entry_points'])} entry points; "
        f"raw exceptions {t['raw_exceptions']}, invalid views {t['invalid_views']}, data lost {t['data_lost']}, "
        f"cross-tenant reads {t['cross_tenant_reads']}"
    )
    known = report["known_defects"]["totals"]
    if known["tried"]:
        line += f" (+{known['tried']:,} in tests of known defects, xfail)"
    return line


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not (probe.ledger.passing or probe.ledger.known):
        return
    report = probe.ledger.report()
    path = _report_path(session.config)
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if not (probe.ledger.passing or probe.ledger.known):
        return
    report = probe.ledger.report()
    terminalreporter.write_line(f"{_summary(report)}; report: {_report_path(config)}")

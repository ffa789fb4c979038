"""The built-in demo: a seeded coding-agent session, its replay through a `Session`, and an HTML report.

``contextwarden demo`` (and ``make demo``) runs it; the pieces are usable on their own::

    from contextwarden.demo import generate_session, replay, DemoResult, write_report
"""

from __future__ import annotations

from .generator import DemoSession, PlantedFact, generate_session
from .replay import CompactionRecord, DemoResult, RecalledMemory, RecallRecord, TurnStats, replay, view_text
from .report import render_report, write_report

__all__ = [
    "CompactionRecord",
    "DemoResult",
    "DemoSession",
    "PlantedFact",
    "RecallRecord",
    "RecalledMemory",
    "TurnStats",
    "generate_session",
    "render_report",
    "replay",
    "view_text",
    "write_report",
]

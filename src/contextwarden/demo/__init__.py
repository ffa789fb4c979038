"""The built-in demo: a seeded coding-agent session, run through a `Session` turn by turn, and an HTML report.

``contextwarden demo`` (and ``make demo``) runs it; the pieces are usable on their own::

    from contextwarden.demo import generate_session, run_demo, DemoResult, write_report
"""

from __future__ import annotations

from .generator import DemoSession, PlantedFact, generate_session
from .report import render_report, write_report
from .run import CompactionRecord, DemoResult, RecalledMemory, RecallRecord, TurnStats, run_demo, view_text

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
    "run_demo",
    "view_text",
    "write_report",
]

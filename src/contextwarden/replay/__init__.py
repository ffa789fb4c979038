"""What-if replay: a recorded transcript replayed under several configurations, side by side.

    from contextwarden.replay import replay_transcript, write_report
    runs = [replay_transcript(messages, lambda: Session(window=32_000, config=cfg), name=name)
            for name, cfg in configs.items()]
    write_report(runs, "replay.html")   # per-turn utilization of each, and the comparison table

`contextwarden replay FILE --config A.toml --config B.toml` does this from the command line.
"""

from __future__ import annotations

from .report import render_report, write_report
from .runner import ReplayRun, ReplayTurn, last_turn_facts, replay_transcript, split_turns

__all__ = [
    "ReplayRun",
    "ReplayTurn",
    "last_turn_facts",
    "render_report",
    "replay_transcript",
    "split_turns",
    "write_report",
]

"""`Timeline`: a session's bounded history of status points, compactions and alerts.

One point per prepared view (turn, tokens used, ratio), each compaction that changed the view
(its turn, layer, tokens before and after, and what it saved) and the latest alerts: what the
dashboard draws as the chart of used tokens over turns. It stays bounded whatever the session's
length: past ``max_points`` the older half of the points is thinned to every other one, so the
chart keeps the whole session's shape at a coarser grain; compactions and alerts keep the newest.

A session with a store saves its timeline with its figures in the state slot ``status``
(`STATUS_SLOT`), so a process that did not serve the session (the CLI, another replica's
dashboard) shows the same history.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

__all__ = ["STATUS_SLOT", "Timeline"]

STATUS_SLOT = "status"
"""The state slot where a session saves its figures and timeline (`Session.save_status`)."""


class Timeline:
    """Status points, compactions and alerts of one session, bounded."""

    def __init__(self, *, max_points: int = 240, max_compactions: int = 60, max_alerts: int = 20) -> None:
        self.max_points = max(8, max_points)
        self.points: list[tuple[int, int, float]] = []
        """(turn, tokens used, ratio), oldest first; one per turn (the newest grain may be coarser)."""
        self.compactions: deque[dict[str, Any]] = deque(maxlen=max_compactions)
        """The newest compactions that changed the view: turn, layer, trigger, before, after, saved, items, ts."""
        self.alerts: deque[dict[str, Any]] = deque(maxlen=max_alerts)
        """The newest alerts: turn, alert, detail, ts."""

    def point(self, turn: int, used: int, ratio: float) -> None:
        """Record the view served on ``turn`` (a second view of the same turn replaces the first)."""
        points = self.points
        if points and points[-1][0] >= turn:
            points[-1] = (turn, used, ratio)
            return
        points.append((turn, used, ratio))
        if len(points) > self.max_points:
            half = len(points) // 2
            # thin the older half: the chart keeps the session's whole shape in bounded space
            self.points = points[:half:2] + points[half:]

    def compaction(
        self, *, turn: int, layer: str, trigger: str, before: int, after: int, items: int, ts: float
    ) -> None:
        """Record a compaction layer that changed the view (tokens in the provider's tokens)."""
        self.compactions.append(
            {
                "turn": turn,
                "layer": layer,
                "trigger": trigger,
                "before": before,
                "after": after,
                "saved": max(0, before - after),
                "items": items,
                "ts": ts,
            }
        )

    def alert(self, *, turn: int, alert: str, detail: str, ts: float) -> None:
        """Record an alert."""
        self.alerts.append({"turn": turn, "alert": alert, "detail": detail, "ts": ts})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: ``points`` as ``[turn, used, ratio]`` lists, ``compactions`` and ``alerts``."""
        return {
            "points": [list(p) for p in self.points],
            "compactions": list(self.compactions),
            "alerts": list(self.alerts),
        }

    def load(self, data: Mapping[str, Any]) -> None:
        """Take the history `to_dict` saved (entries of the wrong shape are skipped: it is a display record)."""
        points: list[tuple[int, int, float]] = []
        for p in data.get("points") or ():
            if isinstance(p, list | tuple) and len(p) == 3:
                try:
                    points.append((int(p[0]), int(p[1]), float(p[2])))
                except (TypeError, ValueError):
                    continue
        self.points = points[-self.max_points :]
        self.compactions.clear()
        self.compactions.extend(c for c in data.get("compactions") or () if isinstance(c, dict))
        self.alerts.clear()
        self.alerts.extend(a for a in data.get("alerts") or () if isinstance(a, dict))

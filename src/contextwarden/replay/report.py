"""The replay's HTML report: one self-contained file (inline CSS and SVG, no script, nothing fetched).

A comparison table of the configurations and a chart of the per-turn utilization of each. Charts
come from `line_chart`, which the benchmark report uses too; each ``<svg>`` carries ``data-chart``
and every series ``data-series`` and ``data-count``, so what was drawn can be checked.
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .._version import __version__
from .runner import ReplayRun

__all__ = ["line_chart", "render_report", "write_report"]

W, H = 960, 320
LEFT, RIGHT, TOP, BOTTOM = 70, 16, 20, 36
PALETTE = ("#08519c", "#e6550d", "#31a354", "#756bb1", "#c51b8a", "#636363", "#d9a400", "#17becf")
CSS = (
    "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#222}"
    "table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
    "th:first-child,td:first-child{text-align:left}.axis{stroke:#444}.grid{stroke:#eee}"
    ".tick,.label{font-size:11px;fill:#444}.series{fill:none;stroke-width:1.6}"
    ".legend span{margin-right:14px}.legend i{display:inline-block;width:12px;height:3px;margin-right:4px;"
    "vertical-align:middle}"
)


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _fmt(v: float) -> str:
    if abs(v) >= 10_000:
        return f"{v / 1000:.0f}k"
    if abs(v) >= 1000:
        return f"{v / 1000:.1f}k"
    return f"{v:.3g}"


def line_chart(
    chart: str,
    title: str,
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    y_label: str,
    x_label: str = "turn",
    y_max: float | None = None,
    log_y: bool = False,
) -> str:
    """An SVG line chart of ``series`` (name -> points), with a legend; ``log_y`` for values over decades."""
    import math

    points = [p for pts in series.values() for p in pts]
    xs = [x for x, _ in points] or [0.0, 1.0]
    ys = [y for _, y in points if not log_y or y > 0] or [1.0]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)

    def ty(v: float) -> float:
        return math.log10(max(v, 1e-9)) if log_y else v

    y0 = ty(min(ys)) if log_y else 0.0
    y1 = ty(y_max) if y_max is not None else ty(max(ys))
    y1 = max(y1, y0 + 1e-9)

    def px(v: float) -> float:
        return round(LEFT + (v - x0) / (x1 - x0) * (W - LEFT - RIGHT), 2)

    def py(v: float) -> float:
        return round(H - BOTTOM - (ty(v) - y0) / (y1 - y0) * (H - TOP - BOTTOM), 2)

    body = [
        f'<line class="axis" x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}"/>',
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}"/>',
    ]
    ticks = [10**k for k in range(math.floor(y0), math.ceil(y1) + 1)] if log_y else [y1 * i / 4 for i in range(5)]
    for t in ticks:
        y = py(t)
        if TOP - 1 <= y <= H - BOTTOM + 1:
            body.append(f'<line class="grid" x1="{LEFT}" y1="{y}" x2="{W - RIGHT}" y2="{y}"/>')
            body.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4}" text-anchor="end">{_fmt(t)}</text>')
    for i in range(6):
        v = x0 + (x1 - x0) * i / 5
        label = _fmt(round(v)) if x1 - x0 >= 10 else _fmt(v)  # turns are whole numbers
        body.append(f'<text class="tick" x="{px(v)}" y="{H - BOTTOM + 16}" text-anchor="middle">{label}</text>')
    body.append(f'<text class="label" x="{W - RIGHT}" y="{H - 4}" text-anchor="end">{_e(x_label)}</text>')
    body.append(f'<text class="label" x="6" y="{TOP - 6}">{_e(y_label)}</text>')
    legend = []
    for i, (name, pts) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        drawn = [(x, y) for x, y in pts if not log_y or y > 0]
        coords = " ".join(f"{px(x)},{py(y)}" for x, y in drawn)
        body.append(
            f'<polyline class="series" data-series="{_e(name)}" data-count="{len(drawn)}" stroke="{colour}" '
            f'points="{coords}"/>'
        )
        legend.append(f'<span><i style="background:{colour}"></i>{_e(name)}</span>')
    svg = (
        f'<svg class="chart" data-chart="{_e(chart)}" viewBox="0 0 {W} {H}" width="100%" role="img" '
        f'aria-label="{_e(title)}" xmlns="http://www.w3.org/2000/svg"><title>{_e(title)}</title>{"".join(body)}</svg>'
    )
    return f'<h2>{_e(title)}</h2><div class="legend">{"".join(legend)}</div>{svg}'


def _table(runs: Sequence[ReplayRun]) -> str:
    head = (
        "<tr><th>configuration</th><th>turns</th><th>tokens sent</th><th>prefix reuse</th><th>peak tokens</th>"
        "<th>peak utilization</th><th>compactions by layer</th><th>retention of last-turn facts</th>"
        "<th>prepare p50 ms</th><th>p95 ms</th></tr>"
    )
    rows = []
    for r in runs:
        layers = ", ".join(f"{k} {v}" for k, v in r.compactions.items()) or "none"
        retention = "-" if r.retention is None else f"{r.retention:.0%} ({len(r.facts_kept)}/{len(r.facts)})"
        rows.append(
            f"<tr data-run='{_e(r.name)}'><td>{_e(r.name)}</td><td>{len(r.turns)}</td><td>{r.tokens_sent:,}</td>"
            f"<td>{r.prefix_reuse:.3f}</td><td>{r.peak:,}</td><td>{r.peak_utilization:.0%}</td>"
            f"<td>{_e(layers)}</td><td>{retention}</td><td>{r.time_per_turn_ms(0.5):.2f}</td>"
            f"<td>{r.time_per_turn_ms(0.95):.2f}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def render_report(runs: Sequence[ReplayRun], *, title: str = "contextwarden replay") -> str:
    """The HTML report of ``runs`` (one transcript under several configurations)."""
    util = line_chart(
        "utilization",
        "Utilization per turn",
        {r.name: [(t.turn, t.utilization) for t in r.turns] for r in runs},
        y_label="share of the effective budget",
        y_max=max(1.0, max((r.peak_utilization for r in runs), default=1.0)),
    )
    sent = line_chart(
        "sent",
        "Tokens sent per turn",
        {r.name: [(t.turn, float(t.sent)) for t in r.turns] for r in runs},
        y_label="tokens",
    )
    settings = "".join(
        f"<li><b>{_e(r.name)}</b>: window {r.window:,}, budget {r.budget:,}"
        + "".join(f", {_e(k)} {_e(v)}" for k, v in r.settings.items())
        + "</li>"
        for r in runs
    )
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title><style>{CSS}</style></head>"
        f"<body><h1>{_e(title)}</h1><p>contextwarden {_e(__version__)}, {stamp}</p><ul>{settings}</ul>"
        f"{_table(runs)}{util}{sent}</body></html>\n"
    )


def write_report(runs: Sequence[ReplayRun], path: str | Path, *, title: str = "contextwarden replay") -> Path:
    """Write `render_report` to ``path``; returns it."""
    out = Path(path)
    out.write_text(render_report(runs, title=title), encoding="utf-8")
    return out

"""The demo's HTML report: one self-contained file (inline CSS and SVG, no script, nothing fetched).

Charts: utilization per turn with the threshold lines, tokens by component, compaction events,
prompt-cache reuse, the planted facts still in view, and what long-term memory recalled (per turn,
and each recall with its memories and their provenance). Every chart is an ``<svg>`` with
``data-chart`` and ``data-points`` attributes, and every drawn series carries ``data-series``,
so tests (and people) can check what was drawn.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from pathlib import Path

from .._version import __version__
from .run import DemoResult

__all__ = ["render_report", "write_report"]

W, H = 960, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 18, 34
LAYER_COLOURS = {"clear": "#2b8cbe", "evict": "#e6550d", "summarize": "#756bb1", "shrink": "#c51b8a"}
COMPONENT_COLOURS = {"system": "#636363", "context": "#756bb1", "history": "#74c476", "tool_results": "#6baed6"}
STATE_COLOURS = {"warning": "#d9a400", "error": "#e6550d", "critical": "#de2d26"}


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _fmt(n: float) -> str:
    if abs(n) >= 1000:
        return f"{n / 1000:.0f}k" if abs(n) >= 10_000 else f"{n / 1000:.1f}k"
    return f"{n:g}"


class _Plot:
    """Maps data to the drawing area of one chart."""

    def __init__(self, *, x_max: float, y_max: float, x_min: float = 0.0, y_min: float = 0.0) -> None:
        self.x_min, self.x_max = x_min, max(x_max, x_min + 1)
        self.y_min, self.y_max = y_min, max(y_max, y_min + 1e-9)

    def x(self, v: float) -> float:
        return round(LEFT + (v - self.x_min) / (self.x_max - self.x_min) * (W - LEFT - RIGHT), 2)

    def y(self, v: float) -> float:
        return round(H - BOTTOM - (v - self.y_min) / (self.y_max - self.y_min) * (H - TOP - BOTTOM), 2)

    def axes(self, *, y_ticks: Sequence[float], y_label: str, x_label: str = "turn", percent: bool = False) -> str:
        parts = [
            f'<line class="axis" x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}"/>',
            f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}"/>',
        ]
        for t in y_ticks:
            y = self.y(t)
            label = f"{t:.0%}" if percent else _fmt(t)
            parts.append(f'<line class="grid" x1="{LEFT}" y1="{y}" x2="{W - RIGHT}" y2="{y}"/>')
            parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4}" text-anchor="end">{label}</text>')
        span = self.x_max - self.x_min
        step = max(1, round(span / 10 / 10) * 10) if span > 20 else max(1, int(span // 5) or 1)
        v = self.x_min if self.x_min > 0 else step
        while v <= self.x_max:
            x = self.x(v)
            parts.append(f'<text class="tick" x="{x}" y="{H - BOTTOM + 16}" text-anchor="middle">{int(v)}</text>')
            v += step
        parts.append(f'<text class="label" x="{W - RIGHT}" y="{H - 4}" text-anchor="end">{_e(x_label)}</text>')
        parts.append(f'<text class="label" x="6" y="{TOP - 4}">{_e(y_label)}</text>')
        return "".join(parts)


def _svg(chart: str, points: int, title: str, body: str) -> str:
    return (
        f'<svg class="chart" id="chart-{chart}" data-chart="{chart}" data-points="{points}" '
        f'viewBox="0 0 {W} {H}" width="100%" role="img" aria-label="{_e(title)}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{_e(title)}</title>{body}</svg>'
    )


def _legend(items: Sequence[tuple[str, str]]) -> str:
    spans = "".join(f'<span><i style="background:{c}"></i>{_e(name)}</span>' for name, c in items)
    return f'<div class="legend">{spans}</div>'


def _utilization(r: DemoResult) -> str:
    n = len(r.turns)
    p = _Plot(x_min=1, x_max=n, y_max=1.05)
    body = [p.axes(y_ticks=(0, 0.25, 0.5, 0.75, 1.0), y_label="share of the effective budget", percent=True)]
    lines = [(name, value, STATE_COLOURS[name]) for name, value in r.thresholds.items() if name in STATE_COLOURS]
    lines += [("low water", r.low_water, "#31a354")]
    if r.high_water < 1.0:
        lines.append(("high water", r.high_water, "#08519c"))
    for name, value, colour in lines:
        y = p.y(value)
        body.append(
            f'<line class="threshold" data-threshold="{_e(name)}" data-value="{value}" x1="{LEFT}" y1="{y}" '
            f'x2="{W - RIGHT}" y2="{y}" stroke="{colour}"/>'
            f'<text class="tlabel" x="{W - RIGHT - 4}" y="{y - 4}" text-anchor="end" fill="{colour}">'
            f"{_e(name)} {value:.2f}</text>"
        )
    pts = " ".join(f"{p.x(t.turn)},{p.y(min(t.ratio, 1.05))}" for t in r.turns)
    body.append(f'<polyline data-series="ratio" data-count="{n}" class="series" points="{pts}" stroke="#08306b"/>')
    for c in r.compactions:
        t = r.turns[c.turn - 1]
        colour = LAYER_COLOURS.get(c.layer, "#333")
        body.append(
            f'<circle data-series="compaction" data-layer="{_e(c.layer)}" cx="{p.x(c.turn)}" '
            f'cy="{p.y(min(t.ratio, 1.05))}" '
            f'r="3.5" fill="{colour}"><title>turn {c.turn}: {_e(c.layer)} {c.before:,} → {c.after:,} tokens'
            f"</title></circle>"
        )
    return _svg("utilization", n, "Utilization per turn", "".join(body))


def _components(r: DemoResult) -> str:
    n = len(r.turns)
    names = [k for k in COMPONENT_COLOURS if any(t.breakdown.get(k, 0) for t in r.turns)]
    p = _Plot(x_min=1, x_max=n, y_max=max(r.budget, max((t.used for t in r.turns), default=1)))
    step = max(1000, round(r.budget / 4 / 1000) * 1000)
    body = [p.axes(y_ticks=[v for v in range(0, int(p.y_max) + 1, step)], y_label="tokens in the request")]
    base = [0.0] * n
    for name in names:
        top = [b + max(0, t.breakdown.get(name, 0)) for b, t in zip(base, r.turns, strict=True)]
        upper = " ".join(f"{p.x(t.turn)},{p.y(v)}" for t, v in zip(r.turns, top, strict=True))
        lower = " ".join(f"{p.x(t.turn)},{p.y(v)}" for t, v in reversed(list(zip(r.turns, base, strict=True))))
        body.append(
            f'<polygon data-series="{name}" data-count="{n}" points="{upper} {lower}" '
            f'fill="{COMPONENT_COLOURS[name]}" fill-opacity="0.85"><title>{name}</title></polygon>'
        )
        base = top
    y = p.y(r.budget)
    body.append(
        f'<line class="threshold" data-threshold="budget" data-value="{r.budget}" x1="{LEFT}" y1="{y}" '
        f'x2="{W - RIGHT}" y2="{y}" stroke="#de2d26"/><text class="tlabel" x="{W - RIGHT - 4}" y="{y - 4}" '
        f'text-anchor="end" fill="#de2d26">effective budget {r.budget:,}</text>'
    )
    return _svg("components", n, "Tokens by component", "".join(body)) + _legend(
        [(k, COMPONENT_COLOURS[k]) for k in names]
    )


def _events(r: DemoResult) -> str:
    n = len(r.turns)
    p = _Plot(x_min=1, x_max=n, y_max=max((c.before for c in r.compactions), default=r.budget) * 1.05)
    step = max(1000, round(r.budget / 4 / 1000) * 1000)
    body = [p.axes(y_ticks=[v for v in range(0, int(p.y_max) + 1, step)], y_label="tokens before → after")]
    width = max(2.0, min(10.0, (W - LEFT - RIGHT) / max(n, 1) * 0.8))
    # layers of one turn sit side by side
    slot: dict[int, int] = {}
    for c in r.compactions:
        k = slot.get(c.turn, 0)
        slot[c.turn] = k + 1
        x = p.x(c.turn) - width / 2 + k * (width + 1)
        top, bottom = p.y(c.before), p.y(c.after)
        body.append(
            f'<rect data-series="event" data-layer="{_e(c.layer)}" data-turn="{c.turn}" x="{round(x, 2)}" y="{top}" '
            f'width="{round(width, 2)}" height="{max(1.0, round(bottom - top, 2))}" '
            f'fill="{LAYER_COLOURS.get(c.layer, "#333")}">'
            f"<title>turn {c.turn}: {_e(c.layer)} ({_e(c.trigger)}) {c.before:,} → {c.after:,} tokens, "
            f"{c.items} item(s), {c.duration_ms:.1f} ms</title></rect>"
        )
    layers = sorted({c.layer for c in r.compactions})
    return _svg("compactions", len(r.compactions), "Compaction events", "".join(body)) + _legend(
        [(k, LAYER_COLOURS.get(k, "#333")) for k in layers]
    )


def _reuse(r: DemoResult) -> str:
    n = len(r.turns)
    p = _Plot(x_min=0.5, x_max=n + 0.5, y_max=max((t.sent for t in r.turns), default=1) * 1.05)
    step = max(1000, round(r.budget / 4 / 1000) * 1000)
    body = [p.axes(y_ticks=[v for v in range(0, int(p.y_max) + 1, step)], y_label="tokens sent per request")]
    width = max(1.0, (W - LEFT - RIGHT) / max(n, 1) * 0.9)
    cached, fresh = [], []
    for t in r.turns:
        x = round(p.x(t.turn) - width / 2, 2)
        y_reused = p.y(t.reused)
        y_sent = p.y(t.sent)
        cached.append(
            f'<rect x="{x}" y="{y_reused}" width="{round(width, 2)}" height="{round(p.y(0) - y_reused, 2)}"/>'
        )
        fresh.append(f'<rect x="{x}" y="{y_sent}" width="{round(width, 2)}" height="{round(y_reused - y_sent, 2)}"/>')
    body.append(f'<g data-series="reused" data-count="{n}" fill="#31a354">{"".join(cached)}</g>')
    body.append(f'<g data-series="new" data-count="{n}" fill="#bdbdbd">{"".join(fresh)}</g>')
    return _svg("cache", n, "Prompt-cache reuse per request", "".join(body)) + _legend(
        [("common prefix with the previous request (cacheable)", "#31a354"), ("new tokens", "#bdbdbd")]
    )


def _facts(r: DemoResult) -> str:
    n = len(r.turns)
    total = max(1, len(r.facts))
    p = _Plot(x_min=1, x_max=n, y_max=total)
    body = [p.axes(y_ticks=list(range(0, total + 1, max(1, total // 5))), y_label="planted facts")]
    planted = " ".join(f"{p.x(t.turn)},{p.y(t.facts_planted)}" for t in r.turns)
    kept = " ".join(f"{p.x(t.turn)},{p.y(t.facts_in_view)}" for t in r.turns)
    body.append(
        f'<polyline data-series="planted" data-count="{n}" class="series" points="{planted}" stroke="#969696"/>'
    )
    body.append(f'<polyline data-series="in-view" data-count="{n}" class="series" points="{kept}" stroke="#e6550d"/>')
    return _svg("facts", n, "Planted facts in the view", "".join(body)) + _legend(
        [("planted so far", "#969696"), ("found verbatim in the view", "#e6550d")]
    )


def _recalled(r: DemoResult) -> str:
    n = len(r.turns)
    p = _Plot(x_min=1, x_max=n, y_max=max((t.recalled for t in r.turns), default=1) * 1.1)
    top = int(p.y_max)
    body = [p.axes(y_ticks=list(range(0, top + 1, max(1, top // 5))), y_label="memories in view")]
    points = " ".join(f"{p.x(t.turn)},{p.y(t.recalled)}" for t in r.turns)
    body.append(
        f'<polyline data-series="recalled" data-count="{n}" class="series" points="{points}" stroke="#756bb1"/>'
    )
    turns = sorted({rec.turn for rec in r.recalls})
    dots = "".join(f'<circle cx="{p.x(t)}" cy="{p.y(0)}" r="3" fill="#756bb1"/>' for t in turns)
    body.append(f'<g data-series="recalls" data-count="{len(turns)}">{dots}</g>')
    return _svg("memory", n, "Recalled memories in the view", "".join(body)) + _legend(
        [("memories the view shows in recalled blocks (dots: a recall)", "#756bb1")]
    )


def _memory_section(r: DemoResult) -> str:
    """What long-term memory did: the recalls per turn, each with what it brought back and its provenance."""
    if r.memory is None:
        return "<h2>Long-term memory</h2><p>Off (<code>--no-memory</code>).</p>"
    facts = [f.value for f in r.facts]
    rows = []
    for rec in r.recalls:
        brought = sorted({f for f in facts for m in rec.memories if f in m.text})
        items = "".join(
            f"<li><code>{_e(m.label)}</code> {_e(m.text)}{'…' if len(m.text) >= 240 else ''}</li>" for m in rec.memories
        )
        rows.append(
            f'<tr data-turn="{rec.turn}"><td class=n>{rec.turn}</td><td>{_e(rec.query)}</td>'
            f"<td class=n>{len(rec.memories)}</td><td class=n>{rec.tokens:,}</td>"
            f"<td>{', '.join(f'<code>{_e(f)}</code>' for f in brought) or '-'}</td>"
            f"<td><details><summary>{len(rec.memories)} memories</summary><ul>{items}</ul></details></td></tr>"
        )
    return f"""<h2>Long-term memory</h2>
<p>{_e(r.memory)}. Before a request, memory is searched with the request's words; what it brings back is
shown right before the request as the answer of a <code>recall</code> call, each memory labelled with its
source, ledger step (<code>read_context("#step")</code> shows the step in full), time and score. A
compaction recalls again.</p>
{_recalled(r)}
<table id="recalls"><tr><th>turn</th><th>request</th><th>memories</th><th>tokens</th><th>planted facts</th>
<th>what came back</th></tr>
{"".join(rows)}</table>
"""


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#fafafa;color:#222}
main{max-width:1000px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 6px}
p.sub{color:#666;margin:0 0 16px}
table{border-collapse:collapse;background:#fff;margin:8px 0}
td,th{border:1px solid #ddd;padding:4px 10px;text-align:left} td.n{text-align:right;font-variant-numeric:tabular-nums}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(180px,1fr));gap:10px;margin:14px 0}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px 12px}
.card b{display:block;font-size:20px} .card span{color:#666;font-size:12px}
svg.chart{background:#fff;border:1px solid #ddd;border-radius:6px;display:block}
svg .axis{stroke:#444;stroke-width:1} svg .grid{stroke:#eee;stroke-width:1}
svg .series{fill:none;stroke-width:1.6} svg .threshold{stroke-width:1.2;stroke-dasharray:5 4}
svg .tick{font-size:11px;fill:#555} svg .label{font-size:11px;fill:#333} svg .tlabel{font-size:11px}
.legend{display:flex;gap:16px;flex-wrap:wrap;margin:6px 0 0;font-size:12px;color:#444}
.legend i{display:inline-block;width:12px;height:12px;margin-right:5px;vertical-align:-2px;border-radius:2px}
.ok{color:#31a354;font-weight:600} .lost{color:#de2d26;font-weight:600}
code{background:#f0f0f0;padding:1px 4px;border-radius:3px}
"""


def render_report(r: DemoResult) -> str:
    """The report as an HTML text."""
    seen, sent, full = r.tokens_seen, r.tokens_sent, r.tokens_full_history
    layers = ", ".join(f"{k} ×{v}" for k, v in sorted(r.compactions_by_layer.items())) or "none"
    cards = [
        ("turns", f"{len(r.turns):,}", f"{r.messages:,} messages"),
        ("tokens seen", f"{seen:,}", "the whole transcript"),
        ("tokens sent", f"{sent:,}", f"vs {full:,} resending everything"),
        ("peak request", f"{r.peak:,}", f"effective budget {r.budget:,}"),
        ("compactions", f"{len(r.compactions)}", layers),
        ("prefix reuse", f"{r.prefix_reuse:.1%}", "tokens a prompt cache can serve"),
        ("fact retention", f"{len(r.found)}/{len(r.facts)}", "planted facts in the final view"),
        ("snapshots", f"{r.snapshots:,}", "full originals kept"),
    ]
    card_html = "".join(
        f'<div class="card" data-metric="{_e(k)}"><span>{_e(k)}</span><b>{_e(v)}</b><span>{_e(s)}</span></div>'
        for k, v, s in cards
    )
    fact_rows = "".join(
        f"<tr><td>{_e(f.kind)}</td><td><code>{_e(f.value)}</code></td><td class=n>{f.turn}</td>"
        f"<td>{'<span class=ok>kept</span>' if f.value in r.found else '<span class=lost>lost</span>'}</td></tr>"
        for f in r.facts
    )
    event_rows = "".join(
        f"<tr><td class=n>{c.turn}</td><td>{_e(c.layer)}</td><td>{_e(c.trigger)}</td><td class=n>{c.before:,}</td>"
        f"<td class=n>{c.after:,}</td><td class=n>{c.items}</td><td class=n>{c.duration_ms:.1f}</td></tr>"
        for c in r.compactions
    )
    alert_rows = "".join(
        f"<tr><td class=n>{a['turn']}</td><td>{_e(a['alert'])}</td><td>{_e(a['detail'])}</td></tr>" for a in r.alerts
    )
    alerts = (
        f"<h2>Alerts</h2><table id=alerts><tr><th>turn</th><th>alert</th><th>detail</th></tr>{alert_rows}</table>"
        if alert_rows
        else ""
    )
    setup = (
        f"model <code>{_e(r.model or '-')}</code>, window {r.window:,} − reserved output {r.reserved_output:,} − tool "
        f"schemas {r.tool_schemas:,} = effective budget {r.budget:,} tokens; compaction from {r.high_water:.0%} "
        f"down to "
        f"{r.low_water:.0%}; state rule: {_e(r.rule or '-')}; {_e(r.summarizer)}; "
        f"store <code>{_e(r.store_url)}</code>, session "
        f"<code>{_e(r.session_id)}</code>."
    )
    generated = time.strftime("%Y-%m-%d %H:%M:%S")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>contextwarden demo report (seed {r.seed})</title>
<style>{_CSS}</style></head>
<body><main>
<h1>contextwarden demo report</h1>
<p class="sub">A seeded coding-agent session (seed {r.seed}) replayed through contextwarden {_e(__version__)}.
Generated {generated}; the run took {r.compute_s:.2f} s of compute.</p>
<div class="cards" id="summary">{card_html}</div>
<p>{setup}</p>

<h2>Utilization per turn</h2>
<p>The request's size as a share of the effective budget. Compaction starts when the view would pass
high water and cuts down to low water; between compactions the view only grows, so the prefix stays
cacheable. Dots mark compactions (colour: layer).</p>
{_utilization(r)}
{_legend([(k, LAYER_COLOURS[k]) for k in sorted({c.layer for c in r.compactions}) if k in LAYER_COLOURS])}

<h2>Tokens by component</h2>
<p>system prompt, context block (summary and progress ledger), conversation history, tool results.</p>
{_components(r)}

<h2>Compaction events</h2>
<p>Each bar spans the view's size before and after one layer ran.</p>
{_events(r)}
<table id="events"><tr><th>turn</th><th>layer</th><th>trigger</th><th>tokens before</th><th>after</th>
<th>items</th><th>ms</th></tr>
{event_rows}</table>

<h2>Prompt-cache reuse</h2>
<p>Per request: the tokens of the longest common prefix with the previous request (what a provider's
prompt cache can serve) and the new tokens. Overall reuse {r.prefix_reuse:.1%}.</p>
{_reuse(r)}

<h2>Planted facts</h2>
<p>Facts planted early in the session and needed by the last question; found verbatim in the final view
or lost.</p>
{_facts(r)}
<table id="facts"><tr><th>kind</th><th>value</th><th>planted in turn</th><th>final view</th></tr>{fact_rows}</table>
{_memory_section(r)}
{alerts}
</main></body></html>
"""


def write_report(r: DemoResult, path: str | Path) -> Path:
    """Write the report to ``path`` (parent directories created); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(render_report(r), encoding="utf-8")
    return p

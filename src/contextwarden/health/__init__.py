"""Context health: metrics, alerts and trends of sessions, exported to Prometheus.

API (stable)::

    from contextwarden.health import HealthMonitor, AlertRules

    monitor = HealthMonitor(session)           # or HealthMonitor() then monitor.attach(session)
    session.prepare()                          # every prepared view is one turn for the monitor
    monitor.snapshot()                         # HealthSnapshot of the last turn (None before one)
    monitor.history                            # bounded deque of HealthSnapshot, oldest first
    monitor.trend(last=20)                     # HealthTrend: first/last/mean/slope per figure
    monitor.alerts, monitor.alert_counts       # HealthAlert records and counts by name
    monitor.record_fidelity(0.8, source="judge")   # feed a score measured elsewhere
    monitor.observe(event)                     # feed events by hand (no session: events only)
    monitor.detach()

    process_health()                           # ProcessHealth: totals over every monitor + live monitors

    # Prometheus (extra ``prometheus``), e.g. a service's /metrics route:
    from contextwarden.health import PrometheusExporter, register_metrics
    exporter = register_metrics(registry)      # a prometheus_client CollectorRegistry (default: global)
    body = exporter.render()                   # exposition bytes; content type CONTENT_TYPE_LATEST

Figures (`HealthSnapshot`): utilization, used/budget tokens, pressure state, burn rate (tokens per
turn), turns until overflow, eviction frequency (rounds per turn), compactions by layer,
compression ratio (last compaction and overall), tool-result share of the view, prompt-cache
prefix reuse, summarizer failures and breaker state, token-counter calibration error, fidelity
(the deterministic probes of each compaction, or a score fed in), alerts by name.

Alerts (`AlertRules`, all thresholds configurable): ``critical-utilization`` (> 0.90 for 3
turns), ``high-eviction-frequency`` (> 5 rounds in a turn), ``low-fidelity`` (< 0.75),
``low-compression`` (1 < ratio < 2), ``burn-rate-spike`` (> 2x the session's mean growth),
``thrashing`` and ``breaker-open`` (raised by the engine, counted here). The monitor's own
alerts are emitted as ``alert`` events on the session's bus: subscribers and the SSE stream see
them, and a session with a store keeps them in its audit log.

Prometheus metric names are listed in `contextwarden.health.prometheus`. OpenTelemetry spans
(extra ``otel``) are in `contextwarden.health.tracing`; fidelity evaluation in
`contextwarden.health.probes` (deterministic) and `contextwarden.health.judge` (LLM as judge).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .alerts import ALERT_NAMES, AlertName, AlertRules, HealthAlert
from .monitor import HealthMonitor
from .probes import Probe, ProbeReport, extract_probes, probe_fidelity
from .process import ProcessHealth, ProcessTotals, process_health
from .samples import HealthSnapshot, HealthTrend, TurnSample, trend

if TYPE_CHECKING:
    from .prometheus import PrometheusExporter, register_metrics

__all__ = [
    "ALERT_NAMES",
    "AlertName",
    "AlertRules",
    "HealthAlert",
    "HealthMonitor",
    "HealthSnapshot",
    "HealthTrend",
    "Probe",
    "ProbeReport",
    "ProcessHealth",
    "ProcessTotals",
    "PrometheusExporter",
    "TurnSample",
    "extract_probes",
    "probe_fidelity",
    "process_health",
    "register_metrics",
    "trend",
]

_LAZY_EXPORTS = {
    "PrometheusExporter": ".prometheus",
    "register_metrics": ".prometheus",
}


def __getattr__(name: str) -> Any:
    module = _LAZY_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)

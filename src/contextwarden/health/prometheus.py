"""Prometheus export of context health (extra: ``prometheus``, i.e. ``prometheus-client``).

`PrometheusExporter` is a custom collector: it reads `ProcessHealth` (totals and live monitors)
when scraped, so the agent's turns pay nothing for it and any registry can hold it::

    from prometheus_client import CollectorRegistry, generate_latest
    registry = CollectorRegistry()
    register_metrics(registry)          # or register_metrics() for the default registry
    body = generate_latest(registry)    # what a /metrics route returns (CONTENT_TYPE_LATEST)

Metrics (prefix ``contextwarden_``): process counters ``turns_total``, ``compactions_total{layer}``,
``compaction_items_total{layer}``, ``compaction_tokens_before_total``/``_after_total``,
``compaction_seconds_total``, ``compaction_runs_total``, ``alerts_total{alert}``,
``summarizer_failures_total``; gauges ``sessions``, ``compression_ratio`` (overall),
``fidelity_mean``; per live session (``session`` label, off with ``per_session=False``):
``utilization``, ``used_tokens``, ``budget_tokens``, ``burn_rate_tokens``,
``turns_until_overflow``, ``eviction_frequency``, ``tool_result_share``, ``prefix_reuse``,
``calibration_error``, ``fidelity``, ``breaker_open``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

try:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "contextwarden.health.prometheus needs prometheus-client: pip install 'contextwarden[prometheus]'"
    ) from exc

from .process import ProcessHealth, process_health

if TYPE_CHECKING:
    from .samples import HealthSnapshot

__all__ = ["CONTENT_TYPE_LATEST", "PrometheusExporter", "register_metrics"]

_P = "contextwarden_"

_SESSION_GAUGES: tuple[tuple[str, str, Callable[[HealthSnapshot], float | None]], ...] = (
    ("utilization", "Share of the effective budget the view uses.", lambda s: s.utilization),
    ("used_tokens", "Tokens of the view (the token counter's).", lambda s: float(s.used)),
    ("budget_tokens", "The effective budget in tokens.", lambda s: float(s.budget)),
    ("burn_rate_tokens", "Mean tokens added per turn over the recent turns.", lambda s: s.burn_rate),
    ("turns_until_overflow", "Turns left at the burn rate before the view fills the budget.",
     lambda s: s.turns_until_overflow),
    ("eviction_frequency", "Rounds evicted per turn over the recent turns.", lambda s: s.eviction_frequency),
    ("tool_result_share", "Share of the view taken by tool results.", lambda s: s.tool_result_share),
    ("prefix_reuse", "Mean share of each request that repeats the previous one from its start.",
     lambda s: s.prefix_reuse),
    ("calibration_error", "Mean relative error of the token counter against reported usage.",
     lambda s: s.calibration_error),
    ("fidelity", "Share of probed facts the last compaction kept.", lambda s: s.fidelity),
    ("breaker_open", "1 when the summarizer's circuit breaker is open.", lambda s: float(s.breaker == "open")),
)  # fmt: skip


class PrometheusExporter(Collector):
    """A Prometheus collector over `ProcessHealth` (default: `process_health()`)."""

    def __init__(self, process: ProcessHealth | None = None, *, per_session: bool = True) -> None:
        self.process = process if process is not None else process_health()
        self.per_session = per_session
        """Export the per-session gauges (one series per live session: turn off for many sessions)."""

    def collect(self) -> Iterator[Metric]:
        process = self.process
        t = process.totals
        snapshots = process.snapshots()
        yield _counter("turns", "Prepared views (turns) over every monitored session.", t.turns)
        compactions = CounterMetricFamily(_P + "compactions", "Compaction layer runs that changed the view.",
                                          labels=["layer"])  # fmt: skip
        for layer, n in sorted(t.compactions.items()):
            compactions.add_metric([layer], n)
        yield compactions
        items = CounterMetricFamily(_P + "compaction_items", "Outputs cleared, rounds evicted, spans summarized.",
                                    labels=["layer"])  # fmt: skip
        for layer, n in sorted(t.compaction_items.items()):
            items.add_metric([layer], n)
        yield items
        yield _counter("compaction_runs", "Compactions (turns that compacted).", t.compaction_count)
        yield _counter("compaction_tokens_before", "Tokens when compactions started.", t.compaction_tokens_before)
        yield _counter("compaction_tokens_after", "Tokens when compactions finished.", t.compaction_tokens_after)
        yield _counter("compaction_seconds", "Time spent compacting.", t.compaction_seconds)
        alerts = CounterMetricFamily(_P + "alerts", "Health alerts raised, by alert.", labels=["alert"])
        for name, n in sorted(t.alerts.items()):
            alerts.add_metric([name], n)
        yield alerts
        yield _counter("summarizer_failures", "Summarizer failures that opened the breaker.", t.summarizer_failures)
        yield GaugeMetricFamily(_P + "sessions", "Sessions with a live health monitor.", value=len(process.monitors()))
        if t.compaction_tokens_after:
            ratio = t.compaction_tokens_before / t.compaction_tokens_after
            yield GaugeMetricFamily(_P + "compression_ratio", "Tokens before / after over every compaction.", ratio)
        if t.fidelity_count:
            mean = t.fidelity_sum / t.fidelity_count
            yield GaugeMetricFamily(_P + "fidelity_mean", "Mean fidelity score over every compaction scored.", mean)
        if not self.per_session:
            return
        for name, doc, read in _SESSION_GAUGES:
            gauge = GaugeMetricFamily(_P + "session_" + name, doc, labels=["session"])
            for snap in snapshots:
                value = read(snap)
                if value is not None:
                    gauge.add_metric([snap.session_id], float(value))
            yield gauge

    def render(self) -> bytes:
        """The exposition text of this collector alone (serve it with ``CONTENT_TYPE_LATEST``)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return bytes(generate_latest(registry))


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(_P + name, doc, value=value)


def register_metrics(
    registry: Any = None, *, process: ProcessHealth | None = None, per_session: bool = True
) -> PrometheusExporter:
    """Register a `PrometheusExporter` in ``registry`` (default: prometheus-client's global registry).

    Returns the exporter (``registry.unregister(exporter)`` removes it).
    """
    exporter = PrometheusExporter(process, per_session=per_session)
    (REGISTRY if registry is None else registry).register(exporter)
    return exporter

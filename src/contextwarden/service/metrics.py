"""Prometheus metrics of the service: its own requests, plus the context health of its sessions.

The service counts what only it sees (requests by route and status, latency, upstream latency,
tokens in and out, retries, cancelled streams) and a utilization gauge per session, bounded to the
most recently active ``max_sessions``. Compactions, alerts, compression and fidelity come from
`contextwarden.health` (a `HealthMonitor` per open session, totalled by the app's own
`ProcessHealth` and exported by its `PrometheusExporter`). Every metric lives in the app's own
registry, so two apps in one process (tests, benchmarks) never share counters.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ..events import Event
from ..health import ProcessHealth
from ..health.prometheus import PrometheusExporter

__all__ = ["CONTENT_TYPE_LATEST", "ServiceMetrics"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class ServiceMetrics:
    """The service's counters, histograms and gauges."""

    def __init__(self, *, max_sessions: int = 100) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.health = ProcessHealth()
        """Totals of this app's session health monitors."""
        # per-session health gauges would grow with every session ever seen: the bounded gauge below stands in
        r.register(PrometheusExporter(self.health, per_session=False))
        self.requests = Counter(
            "contextwarden_requests", "HTTP requests answered, by route and status.", ["route", "status"], registry=r
        )
        self.latency = Histogram(
            "contextwarden_request_seconds",
            "Time to answer a request (the whole stream for a streamed completion).",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_latency = Histogram(
            "contextwarden_upstream_seconds",
            "Time until the upstream's reply (its first chunk for a stream).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "contextwarden_tokens",
            "Tokens: input and output as the upstream reported them, saved by compaction.",
            ["kind"],
            registry=r,
        )
        self.alerts = Counter(
            "contextwarden_session_alerts",
            "Alert events of the sessions, every kind (store, served window, health rules...).",
            ["alert"],
            registry=r,
        )
        self.utilization = Gauge(
            "contextwarden_context_utilization",
            "Share of the effective budget the session's view uses (the most recently active sessions only).",
            ["session"],
            registry=r,
        )
        self.in_flight = Gauge("contextwarden_requests_in_flight", "Completions being proxied now.", registry=r)
        self.open_sessions = Gauge("contextwarden_open_sessions", "Sessions held open by this process.", registry=r)
        self.retries = Counter(
            "contextwarden_overflow_retries",
            "Upstream context-length errors answered by compaction and a retry.",
            registry=r,
        )
        self.cancelled = Counter(
            "contextwarden_cancelled_streams",
            "Streams whose client went away (the upstream call was cancelled).",
            registry=r,
        )
        self.unmanaged = Counter(
            "contextwarden_unmanaged_requests",
            "Requests sent upstream as the client sent them, by reason (no_session: the request names no session; "
            "diverged: its history departs from its session's; retry: a retry whose stored reply is not at the "
            "view's end; other_route: a route the proxy does not manage).",
            ["reason"],
            registry=r,
        )
        self.max_sessions = max_sessions
        self._gauged: OrderedDict[str, None] = OrderedDict()
        # Children of fixed labels, looked up once: `labels()` validates and locks on every call.
        self.tokens_in = self.tokens.labels("input")
        self.tokens_out = self.tokens.labels("output")
        self._answered: dict[tuple[str, int], tuple[Any, Any]] = {}
        """(route, status) -> its request counter and its route's latency histogram (a few routes and statuses)."""

    def answered(self, route: str, status: int, seconds: float) -> None:
        """Count one answered request and observe its duration."""
        children = self._answered.get((route, status))
        if children is None:
            children = self._answered[(route, status)] = (
                self.requests.labels(route, str(status)),
                self.latency.labels(route),
            )
        children[0].inc()
        children[1].observe(seconds)

    def observe_event(self, tenant: str, session_id: str, event: Event) -> None:
        """Count one session event."""
        if event.kind == "context.status":
            self._gauge(f"{tenant}/{session_id}", event.ratio)
        elif event.kind == "compaction.finished":
            saved = event.tokens_before - event.tokens_after
            if saved > 0:
                self.tokens.labels("saved").inc(saved)
        elif event.kind == "alert":
            self.alerts.labels(event.alert).inc()

    def _gauge(self, label: str, ratio: float) -> None:
        if self.max_sessions <= 0:
            return
        self.utilization.labels(label).set(ratio)
        self._gauged[label] = None
        self._gauged.move_to_end(label)
        while len(self._gauged) > self.max_sessions:
            old, _ = self._gauged.popitem(last=False)
            self.utilization.remove(old)

    def forget(self, tenant: str, session_id: str) -> None:
        """Remove a deleted session's gauge."""
        label = f"{tenant}/{session_id}"
        if self._gauged.pop(label, 0) is None:
            self.utilization.remove(label)

    def render(self) -> bytes:
        """The exposition text."""
        return generate_latest(self.registry)

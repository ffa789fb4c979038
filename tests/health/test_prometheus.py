"""The Prometheus collector: exposition of process totals and per-session gauges from real sessions."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from contextwarden import Message, Session
from contextwarden.health import HealthMonitor, ProcessHealth, PrometheusExporter, register_metrics


def _samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _run(session: Session, turns: int) -> None:
    session.add([Message.system("agent"), Message.user("Summarize the logs in /var/log/app.")])
    for i in range(turns):
        session.add([Message.assistant(f"step {i} " + "reading logs " * 60), Message.user(f"go on {i}")])
        session.prepare()


def test_registry_exposes_totals_and_per_session_gauges() -> None:
    process = ProcessHealth()
    sessions = [Session(f"s{i}", window=4000, counter="heuristic") for i in range(2)]
    monitors = [HealthMonitor(s, process=process) for s in sessions]
    for s in sessions:
        _run(s, 30)
    registry = CollectorRegistry()
    exporter = register_metrics(registry, process=process)
    samples = _samples(generate_latest(registry))
    assert samples[("contextwarden_turns_total", ())] == 60
    assert samples[("contextwarden_sessions", ())] == 2
    evictions = sum(m.snapshot().compactions.get("evict", 0) for m in monitors)  # type: ignore[union-attr]
    assert samples[("contextwarden_compactions_total", (("layer", "evict"),))] == evictions > 0
    assert samples[("contextwarden_compaction_runs_total", ())] >= 2
    assert samples[("contextwarden_compression_ratio", ())] > 1
    for m in monitors:
        snap = m.snapshot()
        assert snap is not None
        key = (("session", snap.session_id),)
        assert samples[("contextwarden_session_utilization", key)] == snap.utilization
        assert samples[("contextwarden_session_burn_rate_tokens", key)] == snap.burn_rate
        assert samples[("contextwarden_session_breaker_open", key)] == 0
    assert exporter.render() == generate_latest(registry)
    registry.unregister(exporter)
    assert _samples(generate_latest(registry)) == {}


def test_alerts_are_counted_by_name_and_per_session_gauges_can_be_left_out() -> None:
    process = ProcessHealth()
    monitor = HealthMonitor(process=process)
    monitor.record_fidelity(0.2, source="judge")
    monitor.record_fidelity(0.3, source="judge")
    samples = _samples(PrometheusExporter(process, per_session=False).render())
    assert samples[("contextwarden_alerts_total", (("alert", "low-fidelity"),))] == 2
    assert samples[("contextwarden_fidelity_mean", ())] == 0.25
    assert not [name for name, _ in samples if name.startswith("contextwarden_session_")]

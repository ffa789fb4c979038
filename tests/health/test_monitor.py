"""HealthMonitor on real sessions: figures, alerts on constructed scenarios, none on healthy ones,
alerts as events and in the store's audit log."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextwarden import AsyncSession, Message, Session, ToolCall
from contextwarden.events import Alert, Event
from contextwarden.exceptions import ConfigError, UsageError
from contextwarden.health import AlertRules, HealthMonitor, ProcessHealth
from contextwarden.stores import open_store


def _round(i: int, output_words: int = 60) -> list[Message]:
    call = ToolCall(call_id=f"c{i}", name="read_file", arguments=f'{{"path": "src/mod_{i}.py"}}')
    return [
        Message.assistant(f"Reading module {i}.", tool_calls=[call]),
        Message.tool_result(f"c{i}", f"def handler_{i}():\n" + "    value = compute(value)\n" * output_words),
    ]


def _healthy(session: Session, turns: int) -> None:
    task = "Fix tests/test_app.py::test_refund in src/app.py for ticket PAY-1234. The public API must not change."
    session.add([Message.system("You are a coding agent."), Message.user(task)])
    for i in range(turns):
        session.add(_round(i))
        session.prepare()


def test_healthy_session_raises_no_alert_and_reports_its_figures() -> None:
    session = Session(window=8000, counter="heuristic")
    monitor = HealthMonitor(session, process=ProcessHealth())
    _healthy(session, 120)
    snap = monitor.snapshot()
    assert snap is not None
    assert list(monitor.alerts) == []
    assert snap.turn == 120 and len(monitor.history) == 120
    status = session.status()
    assert snap.utilization == status.ratio
    assert snap.compactions == {k: v for k, v in status.compactions.items() if v}
    assert snap.compression_ratio is not None and snap.compression_ratio >= 2.0
    assert snap.burn_rate > 0 and snap.turns_until_overflow is not None
    assert snap.tool_result_share is not None and 0.5 < snap.tool_result_share < 1.0
    assert snap.prefix_reuse is not None and 0.8 < snap.prefix_reuse <= 1.0
    assert snap.fidelity is not None and snap.fidelity >= 0.75
    assert snap.breaker == "closed" and snap.summarizer_failures == 0


def test_history_is_bounded_and_trend_covers_the_last_snapshots() -> None:
    session = Session(window=8000, counter="heuristic")
    monitor = HealthMonitor(session, history=16, process=ProcessHealth())
    _healthy(session, 40)
    assert len(monitor.history) == 16
    assert [s.turn for s in monitor.history] == list(range(25, 41))
    report = monitor.trend(last=8)
    assert (report.first_turn, report.last_turn, report.snapshots) == (33, 40, 8)
    util = report.figures["utilization"]
    assert util["last"] == monitor.history[-1].utilization
    assert util["min"] <= util["mean"] <= util["max"]
    assert "utilization" in report.render()


def _stuck(session: Session, turns: int = 20) -> None:
    """A pinned brief of ~86% of the budget: compaction cannot bring the view far down."""
    brief = Message.user("brief " + "requirement detail " * 1170)
    session.add([Message.system("agent"), brief])
    session.pin(brief.message_id)
    for i in range(turns):
        session.add([Message.assistant(f"step {i} " + "note " * 40), Message.user(f"continue {i}")])
        session.prepare()


def test_critical_utilization_and_low_compression_when_compaction_cannot_bring_the_view_down() -> None:
    session = Session(window=4000, counter="heuristic", reserved_output=0)
    events: list[Event] = []
    session.subscribe(events.append)
    monitor = HealthMonitor(session, process=ProcessHealth())
    _stuck(session)
    names = [a.name for a in monitor.alerts]
    assert names.count("critical-utilization") == 1  # raised once for the episode, not every turn
    critical = next(a for a in monitor.alerts if a.name == "critical-utilization")
    assert critical.value is not None and critical.value > 0.90 and critical.threshold == 0.90
    low = next(a for a in monitor.alerts if a.name == "low-compression")
    assert low.value is not None and 1.0 < low.value < 2.0
    delivered = [e.alert for e in events if isinstance(e, Alert)]
    assert delivered.count("critical-utilization") == 1 and "low-compression" in delivered
    assert monitor.alert_counts["critical-utilization"] == 1
    snap = monitor.snapshot()
    assert snap is not None and snap.alerts == dict(monitor.alert_counts)


def test_alerts_are_kept_in_the_store_audit_log(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'cw.db'}") as store:
        session = Session("audited", window=4000, counter="heuristic", store=store, reserved_output=0)
        HealthMonitor(session, process=ProcessHealth())
        _stuck(session)
        audit = store.read_audit("audited")
    alerts = [e["alert"] for e in audit if e.get("kind") == "alert"]
    assert alerts.count("critical-utilization") == 1 and "low-compression" in alerts


def test_low_fidelity_from_a_probe_and_from_a_fed_score() -> None:
    session = Session(window=8000, counter="heuristic")
    monitor = HealthMonitor(session, fidelity=lambda before, after: 0.4, process=ProcessHealth())
    _healthy(session, 60)
    low = [a for a in monitor.alerts if a.name == "low-fidelity"]
    assert low and all(a.value == 0.4 for a in low)
    quiet = HealthMonitor(Session(window=6000), process=ProcessHealth())
    quiet.record_fidelity(0.9, source="judge")
    assert list(quiet.alerts) == []
    quiet.record_fidelity(0.5, source="judge")
    assert [a.name for a in quiet.alerts] == ["low-fidelity"] and "judge" in quiet.alerts[0].detail
    with pytest.raises(UsageError, match="between 0.0 and 1.0"):
        quiet.record_fidelity(1.5)


def test_disabled_alerts_are_neither_delivered_nor_counted() -> None:
    session = Session(window=8000, counter="heuristic")
    rules = AlertRules(enabled=frozenset({"critical-utilization"}))
    monitor = HealthMonitor(session, rules=rules, fidelity=lambda before, after: 0.1, process=ProcessHealth())
    _healthy(session, 60)
    assert list(monitor.alerts) == [] and not monitor.alert_counts


def test_rules_refuse_values_that_mean_nothing() -> None:
    with pytest.raises(ConfigError, match="critical_utilization"):
        AlertRules(critical_utilization=1.5)
    with pytest.raises(ConfigError, match="unknown alerts"):
        AlertRules(enabled=frozenset({"loud"}))  # type: ignore[arg-type]


def test_one_monitor_per_session_and_detach_stops_collecting() -> None:
    process = ProcessHealth()
    session = Session(window=8000, counter="heuristic")
    monitor = HealthMonitor(session, process=process)
    assert process.monitors() == [monitor]
    with pytest.raises(UsageError, match="detach"):
        monitor.attach(Session(window=6000))
    _healthy(session, 5)
    monitor.detach()
    assert process.monitors() == []
    session.add(_round(99))
    session.prepare()
    assert monitor.snapshot() is not None and monitor.snapshot().turn == 5  # type: ignore[union-attr]
    assert process.totals.turns == 5


class _DownSummarizer:
    """A summarizer whose model is down: every summary fails."""

    def summarize(self, request: object) -> str:
        raise RuntimeError("model down")


def test_summarizer_failures_and_the_open_breaker_are_reported() -> None:
    session = Session(window=8000, counter="heuristic", summarizer=_DownSummarizer())
    monitor = HealthMonitor(session, process=ProcessHealth())
    _healthy(session, 150)
    snap = monitor.snapshot()
    assert snap is not None
    assert snap.breaker == "open" and snap.summarizer_failures >= 3
    assert monitor.alert_counts["breaker-open"] == 1
    assert monitor.process.totals.summarizer_failures == 1  # breaker trips, process-wide


@pytest.mark.anyio
async def test_an_async_session_is_monitored_alike() -> None:
    sync_session = Session("twin", window=8000, counter="heuristic")
    async_session = AsyncSession("twin", window=8000, counter="heuristic")
    monitors = [HealthMonitor(s, process=ProcessHealth()) for s in (sync_session, async_session)]
    _healthy(sync_session, 80)
    task = "Fix tests/test_app.py::test_refund in src/app.py for ticket PAY-1234. The public API must not change."
    async_session.add([Message.system("You are a coding agent."), Message.user(task)])
    for i in range(80):
        async_session.add(_round(i))
        await async_session.prepare()
    a, b = (m.snapshot() for m in monitors)
    assert a is not None and b is not None
    assert (a.turn, a.utilization, a.compactions, a.burn_rate) == (b.turn, b.utilization, b.compactions, b.burn_rate)

"""Each alert on a constructed event stream (a monitor fed events alone), and none on a steady one."""

from __future__ import annotations

from contextwarden.events import Alert, CompactionFinished, CompactionStarted, ContextStatus, Event
from contextwarden.health import AlertRules, HealthMonitor, ProcessHealth

BUDGET = 10_000


class _Stream:
    """Builds the events a session emits: a status per turn, compaction events when one runs."""

    def __init__(self, monitor: HealthMonitor) -> None:
        self.monitor = monitor
        self.turn = 0
        self.used = 0

    def emit(self, event: Event) -> None:
        self.monitor.observe(event)

    def grow(self, tokens: int, *, compact_to: int | None = None, evicted: int = 0) -> None:
        self.turn += 1
        self.used += tokens
        if compact_to is not None:
            self.emit(CompactionStarted(session_id="s", layer="evict", trigger="high-water", tokens_before=self.used,
                                        target=compact_to))  # fmt: skip
            self.emit(CompactionFinished(session_id="s", layer="evict", trigger="high-water",
                                         tokens_before=self.used, tokens_after=compact_to, duration_ms=1.0,
                                         items=evicted))  # fmt: skip
            self.used = compact_to
        ratio = self.used / BUDGET
        state = "overflow" if ratio > 1 else "normal"
        self.emit(ContextStatus(session_id="s", used=self.used, budget=BUDGET, ratio=ratio, state=state,
                                turn=self.turn))  # fmt: skip


def _monitor(**rules: object) -> tuple[HealthMonitor, _Stream]:
    monitor = HealthMonitor(rules=AlertRules(**rules), process=ProcessHealth())  # type: ignore[arg-type]
    return monitor, _Stream(monitor)


def _steady(stream: _Stream, turns: int) -> None:
    """Growth of 200 tokens a turn, compacting from ~100% to 45% (the default band)."""
    for _ in range(turns):
        if stream.used + 200 > BUDGET:
            stream.grow(200, compact_to=int(0.45 * BUDGET), evicted=20)
        else:
            stream.grow(200)


def test_a_steady_session_raises_nothing() -> None:
    monitor, stream = _monitor()
    _steady(stream, 300)
    assert list(monitor.alerts) == []
    snap = monitor.snapshot()
    assert snap is not None and snap.burn_rate == 200.0
    assert snap.compression_ratio is not None and snap.compression_ratio > 2
    assert snap.breaker == "unknown" and snap.tool_result_share is None  # events alone do not carry these


def test_critical_utilization_once_per_episode() -> None:
    monitor, stream = _monitor()
    stream.used = 9_500
    for _ in range(6):
        stream.grow(0, compact_to=9_400)  # every compaction leaves the view above 0.90
    assert [a.name for a in monitor.alerts if a.name == "critical-utilization"] == ["critical-utilization"]
    stream.grow(0, compact_to=4_000)
    for _ in range(3):
        stream.grow(0, compact_to=9_400)
    assert monitor.alert_counts["critical-utilization"] == 2  # a new episode after the view came down


def test_critical_utilization_needs_the_configured_turns() -> None:
    monitor, stream = _monitor(critical_turns=5)
    stream.used = 9_500
    for _ in range(4):
        stream.grow(0, compact_to=9_400)
    assert monitor.alert_counts["critical-utilization"] == 0
    stream.grow(0, compact_to=9_400)
    assert monitor.alert_counts["critical-utilization"] == 1


def test_high_eviction_frequency() -> None:
    monitor, stream = _monitor()
    _steady(stream, 30)
    assert not monitor.alert_counts
    for _ in range(3):
        stream.grow(6_000, compact_to=4_000, evicted=60)
    alerts = [a for a in monitor.alerts if a.name == "high-eviction-frequency"]
    assert len(alerts) == 1 and alerts[0].value is not None and alerts[0].value > 5


def test_low_compression_between_one_and_the_minimum_ratio() -> None:
    monitor, stream = _monitor()
    stream.grow(9_000)
    stream.grow(1_000, compact_to=8_000)  # 10,000 -> 8,000: ratio 1.25
    assert [a.name for a in monitor.alerts] == ["low-compression"]
    assert monitor.alerts[0].value == 1.25
    stream.grow(2_000, compact_to=4_000)  # ratio 2.5: fine
    assert len(monitor.alerts) == 1


def test_burn_rate_spike_on_a_runaway_loop_not_on_one_large_output() -> None:
    monitor, stream = _monitor()
    for _ in range(20):
        stream.grow(100)
    stream.grow(1_000)  # one large tool output: the window's mean (190) stays under 2x 100
    for _ in range(9):
        stream.grow(100)
    assert not monitor.alert_counts
    for _ in range(10):
        stream.grow(400)  # a loop re-reading large outputs
    spikes = [a for a in monitor.alerts if a.name == "burn-rate-spike"]
    assert len(spikes) == 1 and "runaway" in spikes[0].detail


def test_engine_alerts_are_counted_not_reraised() -> None:
    monitor, stream = _monitor()
    stream.grow(100)
    monitor.observe(Alert(session_id="s", alert="thrashing", detail="refilled"))
    monitor.observe(Alert(session_id="s", alert="breaker-open", detail="summarizer failed 3 times"))
    monitor.observe(Alert(session_id="s", alert="subscriber-error", detail="not a health alert"))
    stream.grow(100)
    assert [a.name for a in monitor.alerts] == ["thrashing", "breaker-open"]
    snap = monitor.snapshot()
    assert snap is not None and snap.summarizer_failures == 1
    assert snap.alerts == {"thrashing": 1, "breaker-open": 1}


def test_layer_steps_do_not_count_as_turns() -> None:
    monitor, stream = _monitor()
    stream.grow(100)
    monitor.observe(ContextStatus(session_id="s", used=50, budget=BUDGET, ratio=0.005, state="normal",
                                  layer="clear"))  # fmt: skip
    assert len(monitor.history) == 1

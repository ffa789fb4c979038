"""`HealthMonitor`: a session's health, collected from its events, with alerts and a bounded history.

The monitor subscribes to the session's `EventBus`; each ``context.status`` of a prepared view
closes a turn: the compaction events before it are folded into one `TurnSample`, the alert rules
look at it, and a `HealthSnapshot` goes into the history. With the session at hand it also reads
what events do not carry: the share of the view taken by tool results, prompt-cache prefix reuse
(the view against the previous one), the token counter's calibration error, the summarizer's
breaker, and the fidelity probes of each compaction (`probes.probe_fidelity`). Fed events alone
(`observe`, e.g. from another process's SSE stream) it reports what the events carry.

Alerts are delivered as ``alert`` events on the session's bus (so subscribers, the SSE stream and
the store's audit log get them), counted in the monitor and in `process_health()`.
"""

from __future__ import annotations

import logging
import statistics
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..events import Alert, CompactionFinished, CompactionStarted, ContextStatus, Event, EventBus
from ..exceptions import UsageError
from ..messages import Message
from .alerts import ALERT_NAMES, AlertRules, AlertState, HealthAlert
from .probes import probe_fidelity
from .process import ProcessHealth, process_health
from .samples import HealthSnapshot, HealthTrend, TurnSample, trend

if TYPE_CHECKING:
    from ..session import AsyncSession, Session
    from ..session_state import SessionState

__all__ = ["HealthMonitor"]

logger = logging.getLogger(__name__)

_RECENT = 10
"""Turns that burn rate, eviction frequency and prefix reuse average over."""

FidelityProbe = Callable[[Sequence[Message], Sequence[Message]], float | None]

_MIN_PROBES = 3
"""Fewer facts than this in a compaction's input give no score: one lost fact of one is noise, not a trend."""


def _probe_score(before: Sequence[Message], after: Sequence[Message]) -> float | None:
    report = probe_fidelity(before, after)
    return report.score if len(report.probes) >= _MIN_PROBES else None


class HealthMonitor:
    """Health metrics, alerts and a bounded snapshot history of one session.

    Args:
        session: The session to watch (`attach` later when omitted).
        rules: Alert thresholds.
        history: Snapshots kept (the oldest go first).
        fidelity: Scores a compaction: ``fidelity(input, view)`` -> share of facts kept (None: no
            score). The default runs the deterministic probes and scores inputs with 3 facts or more;
            None skips scoring (the probes cost a few ms per compaction).
        process: Where process-wide totals go (default: `process_health()`).
    """

    def __init__(
        self,
        session: Session | AsyncSession | None = None,
        *,
        rules: AlertRules | None = None,
        history: int = 256,
        fidelity: FidelityProbe | None = _probe_score,
        process: ProcessHealth | None = None,
    ) -> None:
        self.rules = rules if rules is not None else AlertRules()
        self.history: deque[HealthSnapshot] = deque(maxlen=max(1, history))
        """Snapshots, one per turn, oldest first (bounded)."""
        self.samples: deque[TurnSample] = deque(maxlen=max(1, history))
        """The turns behind the snapshots."""
        self.alerts: deque[HealthAlert] = deque(maxlen=max(1, history))
        """Alerts raised, oldest first (bounded)."""
        self.alert_counts: Counter[str] = Counter()
        self.fidelity_probe = fidelity
        self.process = process if process is not None else process_health()
        self.session_id = ""
        self._session: Session | AsyncSession | None = None
        self._events: EventBus | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._state = AlertState(rules=self.rules)
        self._raising = False
        self._turn_before: int | None = None
        self._turn_ms = 0.0
        self._turn_layers: Counter[str] = Counter()
        self._turn_evictions = 0
        self._last_used: int | None = None
        self._growths: deque[int] = deque(maxlen=self.rules.burn_window)
        self._growth_sum = 0
        self._growth_turns = 0
        self._compactions: Counter[str] = Counter()
        self._comp_before = 0
        self._comp_after = 0
        self._last_ratio: float | None = None
        self._fidelity: float | None = None
        self._summarizer_failures = 0
        self._breaker = "unknown"
        self._prev_view: tuple[Sequence[Message], int, int, int] | None = None
        """The engine's view list at the last turn, its length then, its generation, its tokens."""
        self._prev_transcript = 0
        self.latest: HealthSnapshot | None = None
        """The snapshot of the last turn (None before the first)."""
        if session is not None:
            self.attach(session)

    # --- wiring ---------------------------------------------------------------------------------
    def attach(self, session: Session | AsyncSession) -> None:
        """Watch ``session``: subscribe to its events and count it among the process's live sessions."""
        if self._session is not None:
            raise UsageError(
                f"this HealthMonitor already watches session {self.session_id!r}: detach() it first, "
                "or create one monitor per session."
            )
        self._session = session
        self.session_id = session.session_id
        self._events = session.events
        self._unsubscribe = session.events.subscribe(self.observe)
        self.process.register(self)

    def detach(self) -> None:
        """Stop watching; the history and counts stay readable."""
        if self._unsubscribe is not None:
            self._unsubscribe()
        self._unsubscribe = None
        self._session = None
        self._events = None
        self.process.unregister(self)

    # --- events ---------------------------------------------------------------------------------
    def observe(self, event: Event) -> None:
        """Take one event (the session's subscription calls this; feed events from elsewhere by hand)."""
        if not self.session_id:
            self.session_id = event.session_id
        if isinstance(event, ContextStatus):
            if event.turn is not None:
                self._close_turn(event)
        elif isinstance(event, CompactionStarted):
            if self._turn_before is None:
                self._turn_before = event.tokens_before
        elif isinstance(event, CompactionFinished):
            self._turn_ms += event.duration_ms
            if event.items:
                self._turn_layers[event.layer] += 1
                self._compactions[event.layer] += 1
                self.process.layer(event.layer, event.items)
                if event.layer == "evict":
                    self._turn_evictions += event.items
        elif isinstance(event, Alert) and not self._raising:
            self._engine_alert(event)

    def _engine_alert(self, event: Alert) -> None:
        if event.alert == "breaker-open":
            self._summarizer_failures += 1
            self.process.summarizer_failure()
        name = event.alert
        if name in ALERT_NAMES:
            self._count(HealthAlert(session_id=event.session_id, name=name, detail=event.detail, ts=event.ts))

    def _reset_turn(self) -> None:
        self._turn_before = None
        self._turn_ms = 0.0
        self._turn_layers = Counter()
        self._turn_evictions = 0

    def _close_turn(self, event: ContextStatus) -> None:
        try:
            sample = self._sample(event)
        finally:
            self._reset_turn()
        self.samples.append(sample)
        self.process.turn()
        if sample.compaction_before is not None and sample.compaction_after is not None:
            self._comp_before += sample.compaction_before
            self._comp_after += sample.compaction_after
            self._last_ratio = sample.compression_ratio
            self.process.compaction(
                before=sample.compaction_before, after=sample.compaction_after, seconds=sample.compaction_ms / 1000
            )
        if sample.fidelity is not None:
            self._fidelity = sample.fidelity
            self.process.fidelity(sample.fidelity)
        if sample.growth is not None:
            growths = self._growths
            if len(growths) == growths.maxlen:  # the oldest of the window joins the history
                self._growth_sum += growths[0]
                self._growth_turns += 1
            growths.append(max(0, sample.growth))
        full = len(self._growths) == self._growths.maxlen
        burn = statistics.fmean(self._growths) if full else None
        mean = self._growth_sum / self._growth_turns if self._growth_turns >= self.rules.burn_min_history else None
        window = list(self.samples)[-self.rules.eviction_window :]
        evictions = sum(r.evictions for r in window) / len(window)
        raised = self._state.check(
            sample, session_id=self.session_id, burn_rate=burn, growth_mean=mean, eviction_frequency=evictions
        )
        self.latest = self._snapshot(sample)
        self.history.append(self.latest)
        for alert in raised:
            self._raise(alert)

    def _sample(self, event: ContextStatus) -> TurnSample:
        session = self._session
        used, budget = event.used, event.budget
        tool_share: float | None = None
        reuse: float | None = None
        fidelity: float | None = None
        if session is not None:
            reading = session.state.reading()  # the figures, without building a whole status
            used, effective = reading.used, reading.budget.effective
            budget = effective if used and effective else budget
            tool_share = reading.tool_results / used if used else 0.0
            self._breaker = reading.breaker
            # every failed summary, not only those that opened the breaker
            self._summarizer_failures = max(self._summarizer_failures, session.state.summarizer_failures)
            reuse, fidelity = self._view_checks(session, used, compacted=self._turn_before is not None)
        start = self._turn_before if self._turn_before is not None else used
        growth = start - self._last_used if self._last_used is not None else None
        self._last_used = used
        return TurnSample(
            turn=event.turn or 0,
            ts=event.ts,
            used=used,
            budget=budget,
            utilization=event.ratio,
            state=event.state,
            growth=growth,
            evictions=self._turn_evictions,
            layers=dict(self._turn_layers),
            compaction_before=self._turn_before,
            # the view as sent, not the last layer's figure: the context block is rendered after the layers
            compaction_after=used if self._turn_before is not None else None,
            compaction_ms=round(self._turn_ms, 3),
            tool_result_share=tool_share,
            prefix_reuse=reuse,
            fidelity=fidelity,
        )

    def _view_checks(
        self, session: Session | AsyncSession, used: int, *, compacted: bool
    ) -> tuple[float | None, float | None]:
        """Prefix reuse against the previous view; the fidelity probes when this turn compacted.

        Between compactions the engine only appends to its view list (same generation), so the
        previous request is a prefix and reuse is a ratio of two totals: no per-turn walk over
        the view. After a compaction the engine holds a new list, and the old one (kept by
        reference, cut to its length at the last turn) is compared message by message.
        """
        state = session.state
        view = state.view
        generation = state.view_generation
        prev = self._prev_view
        reuse: float | None = None
        fidelity: float | None = None
        if prev is not None:
            prev_list, prev_len, prev_generation, prev_used = prev
            if generation == prev_generation and view is prev_list:
                reuse = min(1.0, prev_used / used) if used else 1.0
            else:
                old = prev_list[:prev_len]
                shared = 0
                for a, b in zip(old, view, strict=False):
                    if a is not b and a != b:
                        break
                    shared += 1
                count = session.accountant.count_message
                total = sum(count(m) for m in view)
                reuse = sum(count(m) for m in view[:shared]) / total if total else 1.0
                if compacted and self.fidelity_probe is not None:
                    fidelity = self._probe(state, old, view)
        self._prev_view = (view, len(view), generation, used)
        self._prev_transcript = state.transcript_length
        return reuse, fidelity

    def _probe(self, state: SessionState, old: Sequence[Message], view: Sequence[Message]) -> float | None:
        # the input's own messages: the previous context block and stand-ins were probed
        # when they were made, and would count the engine's words as the user's
        assert self.fidelity_probe is not None
        transcript = state.messages()
        known = {m.message_id for m in transcript}
        compaction_input = [m for m in old if m.message_id in known]
        compaction_input += transcript[self._prev_transcript :]
        try:
            return self.fidelity_probe(compaction_input, view)
        except Exception:  # a probe bug must never stop the agent
            logger.exception("fidelity probe failed for session %s", self.session_id)
            return None

    def _snapshot(self, s: TurnSample) -> HealthSnapshot:
        recent = list(self.samples)[-_RECENT:]
        burn = statistics.fmean(self._growths) if self._growths else 0.0
        left = (s.budget - s.used) / burn if burn > 0 else None
        reuses = [r.prefix_reuse for r in recent if r.prefix_reuse is not None]
        calibration: float | None = None
        if self._session is not None and self._session.accountant.calibration.samples:
            calibration = round(self._session.accountant.calibration.error, 4)
        return HealthSnapshot(
            session_id=self.session_id,
            turn=s.turn,
            ts=s.ts,
            utilization=s.utilization,
            used=s.used,
            budget=s.budget,
            state=s.state,
            burn_rate=round(burn, 2),
            turns_until_overflow=round(max(0.0, left), 2) if left is not None else None,
            eviction_frequency=round(sum(r.evictions for r in recent) / len(recent), 4) if recent else 0.0,
            compactions=dict(self._compactions),
            compression_ratio=round(self._last_ratio, 4) if self._last_ratio is not None else None,
            overall_compression_ratio=round(self._comp_before / self._comp_after, 4) if self._comp_after else None,
            tool_result_share=round(s.tool_result_share, 4) if s.tool_result_share is not None else None,
            prefix_reuse=round(statistics.fmean(reuses), 4) if reuses else None,
            summarizer_failures=self._summarizer_failures,
            breaker=self._breaker,
            calibration_error=calibration,
            fidelity=round(self._fidelity, 4) if self._fidelity is not None else None,
            alerts=dict(self.alert_counts),
        )

    # --- alerts ---------------------------------------------------------------------------------
    def _count(self, alert: HealthAlert) -> None:
        if alert.name not in self.rules.enabled:
            return
        self.alerts.append(alert)
        self.alert_counts[alert.name] += 1
        self.process.alert(alert.name)

    def _raise(self, alert: HealthAlert) -> None:
        """Count ``alert`` and deliver it as an ``alert`` event (which the store's audit log keeps)."""
        if alert.name not in self.rules.enabled:
            return
        self._count(alert)
        if self._events is None:
            return
        self._raising = True
        try:
            self._events.emit(Alert(session_id=alert.session_id, alert=alert.name, detail=alert.detail, ts=alert.ts))
        finally:
            self._raising = False

    def record_fidelity(self, score: float, *, source: str = "evaluation") -> None:
        """Feed a fidelity score measured elsewhere (an LLM judge, an evaluation); may raise ``low-fidelity``."""
        if not 0.0 <= score <= 1.0:
            raise UsageError(f"fidelity score {score!r} is not a share: pass a value between 0.0 and 1.0.")
        self._fidelity = score
        self.process.fidelity(score)
        if score < self.rules.min_fidelity:
            turn = self.latest.turn if self.latest is not None else None
            self._raise(self._state.low_fidelity(self.session_id, score, turn=turn, what=source))

    # --- reading --------------------------------------------------------------------------------
    def snapshot(self) -> HealthSnapshot | None:
        """The health as of the last turn (None before the first prepared view)."""
        return self.latest

    def trend(self, last: int = 20) -> HealthTrend:
        """How the last ``last`` snapshots moved (see `HealthTrend`)."""
        snaps = list(self.history)[-last:] if last > 0 else []
        return trend(snaps)

"""The view engine: transcript in, view out, with the cheapest-first cascade and hysteresis.

The transcript is append-only; every message is counted once when it arrives. The view is a
cached list derived from it: between compactions a turn only appends the new messages to that
list, so the prefix the provider cached stays byte-identical. When the view passes the high-water
mark, layers run in order until it is under the low-water mark:

1. clear  — old tool outputs become a stand-in (head, key lines, identifiers, snapshot id);
2. evict  — old rounds leave the view; the progress ledger stands in for them;
3. summarize — the evicted span is folded into a running summary (sans-IO: yields a request);
then, only when the budget itself is at stake, the newest rounds shrink to previews and an
oversized item is offloaded to a snapshot. Rounds are atomic: a tool call never leaves without
all its results, and a result never stays without its call.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..budget import Budget
from ..events import (
    Alert,
    CompactionFinished,
    CompactionStarted,
    ContextStatus,
    EventBus,
    SnapshotWritten,
    Trigger,
)
from ..exceptions import BudgetExceeded, MessageError, SchemaError, SummaryRejected
from ..keyinfo import fact_rank, is_error_line, key_lines, preview, rank_facts, salient_facts
from ..ledger import Ledger, LedgerEntry, entry_for_round, request_facts
from ..messages import Message, TextPart, ThinkingPart
from ..notes import Notes
from ..snapshots import SnapshotStore, encode_snapshot, make_snapshot_id
from ..summarize.extractive import fit_summary
from ..tokens.accountant import TokenAccountant
from ..workingset import WorkingSet
from ._intake import abandon_open_calls, check_batch, take_late_result
from ._resume import check_state, context_id, export_view, import_view, saved_stand_ins
from .breaker import CircuitBreaker
from .config import CompactionConfig, Strategy
from .policies import Candidate, order_for_eviction
from .summarizer import SummaryReply, SummaryRequest, check_summary

__all__ = ["ContextEngine", "ViewStatus"]

logger = logging.getLogger(__name__)

RoundKind = Literal["system", "user", "exchange", "tool-call", "message"]
RoundState = Literal["full", "cleared", "evicted"]
CONTEXT_HEADER = "[contextkeeper] Earlier conversation was compacted"


@dataclass(eq=False, slots=True)
class _Round:
    ordinal: int
    kind: RoundKind
    indices: list[int]
    tokens: int
    tool_tokens: int = 0
    pending: set[str] = field(default_factory=set)
    state: RoundState = "full"
    shown: list[Message] | None = None
    """Stand-ins shown instead of the transcript messages (cleared or shrunk rounds)."""
    shown_tokens: int = 0
    shown_tool_tokens: int = 0
    pinned: bool = False
    facts: tuple[str, ...] | None = None
    ledger_step: int | None = None
    snapshot_id: str | None = None
    ready: list[Message] | None = None
    """Stand-ins prepared ahead of the next compaction (see `_prepare_ahead`)."""
    entry: LedgerEntry | None = None
    """Ledger entry prepared ahead, appended when the round leaves the view."""
    prepared: bool = False
    snapshot_written: bool = False
    fillers: list[Message] | None = None
    """Stand-in results of abandoned calls, shown after the round's other results (see `_intake`)."""
    filler_tokens: int = 0

    @property
    def view_tokens(self) -> int:
        if self.state == "evicted":
            return 0
        return (self.shown_tokens if self.shown is not None else self.tokens) + self.filler_tokens

    @property
    def view_tool_tokens(self) -> int:
        if self.state == "evicted":
            return 0
        return (self.shown_tool_tokens if self.shown is not None else self.tool_tokens) + self.filler_tokens


@dataclass(frozen=True, kw_only=True)
class ViewStatus:
    """Accounting of one prepared view.

    ``used`` and ``budget`` are in the provider's tokens: the counter's count times the applied
    calibration (``calibration``, 1.0 until enough usage was reported); ``used_raw`` is the
    counter's own count and ``breakdown`` is in the counter's tokens too.
    """

    used: int
    budget: int
    ratio: float
    state: str
    layer: str | None
    """The last layer that ran in this prepare (None: the view only appended)."""
    breakdown: dict[str, int]
    """Tokens by component: system, context (summary + ledger), history, tool_results."""
    turn: int
    compactions: dict[str, int]
    """Layer runs so far in this session."""
    transcript_messages: int
    view_messages: int
    breaker: str
    subscriber_errors: int = 0
    hook_errors: int = 0
    used_raw: int = 0
    """The view's tokens as the counter counts them (before calibration)."""
    calibration: float = 1.0
    """The calibration factor applied to the counts (provider tokens per counted token)."""
    window: int = 0
    """The context window the budget uses: the configured one, or the smaller one the server serves."""
    served_window: int | None = None
    """The window a context-length error reported, when the session adopted it (smaller than configured)."""
    degraded: str | None = None
    """Why the session's store does not have this view: ``store-unavailable`` (compacted in memory, saved
    when the store is back) or ``store-lost`` (see `Session.restore_to_store`); None when it has it."""


class ContextEngine:
    """Transcript, rounds and the cached view of one session; no I/O besides snapshot writes."""

    def __init__(
        self,
        *,
        session_id: str,
        accountant: TokenAccountant,
        budget: Budget | Callable[[], Budget],
        config: CompactionConfig,
        snapshots: SnapshotStore,
        events: EventBus,
    ) -> None:
        self.session_id = session_id
        self.accountant = accountant
        # a session passes a function: its budget follows calibration and the window the server serves
        self._budget_source = budget if callable(budget) else None
        self._budget = budget if isinstance(budget, Budget) else budget()
        self.config = config
        self.snapshots = snapshots
        self.events = events
        self.ledger = Ledger(max_entries=config.ledger_max_entries)
        self.notes = Notes()
        """Structured notes (decisions, finished subtasks, lessons, open items), shown in the context block."""
        self.working_set = WorkingSet()
        """Files, commands, errors and symbols the agent acted on, ranked; shown in the context block."""
        self.breaker = CircuitBreaker(max_failures=config.max_summarizer_failures, cooldown_s=config.breaker_cooldown_s)
        self.transcript: list[Message] = []
        self.counts: list[int] = []
        self.rounds: list[_Round] = []
        self._ids: dict[str, int] = {}
        """Transcript index by message id."""
        self._abandoned: dict[str, _Round] = {}
        """Calls a later message abandoned before their result came, by call id (see `_intake`)."""
        self._replies = 0
        """Assistant messages in the transcript: the turns thrashing is measured in (derived on replay)."""
        self._open_calls: dict[str, _Round] = {}
        """Calls without a result yet, by call id (ids may be reused once answered, as real traces do)."""
        self._answered: set[str] = set()
        self._last_user_round: _Round | None = None
        self.summary: str | None = None
        self.summary_span: tuple[str, str] | None = None
        self._summarized_upto = -1  # ordinal of the newest round folded into the summary
        self._context_msg: Message | None = None
        self._context_tokens = 0
        self._view: list[Message] = []
        self._view_tokens = 0
        self._dirty = True
        self.view_generation = 0
        """Bumped whenever the view is re-rendered (not when it only appends)."""
        # running totals over rounds in view, so accounting never walks the history
        self._rounds_total = 0
        self._tool_total = 0
        self._system_total = 0
        self._n_evicted = 0
        self._msg_facts: dict[int, list[str]] = {}
        self._msg_key_lines: dict[int, list[str]] = {}
        self.summarizer_enabled = False
        self.summarizer_checks_identifiers = False
        """Set for summarizers that keep identifiers by their own rules (extractive, LLM with validation)."""
        """Set by the session when a summarizer drives the summary layer."""
        self.summarizer_degrades = False
        """Set by the session when its summarizer answers ``degraded`` requests without a model: the
        summary layer then keeps running (deterministically) while the breaker is open."""
        self.summary_merger: Any = None
        """Set by the session to a summarizer with ``take_ready(summary, span) -> str | None`` (background
        mode): at each compaction, a better summary of exactly the current span replaces the current one."""
        self._pre_ratio = 0.0
        self._gate_floor = 0.0
        """After a compaction the cascade table held above high water: the utilization that may retry."""
        self._last_assistant_index = -1
        self._prep_cursor = 0
        self._evicted_at_render = 0
        self._tight = False
        self._floor = 0
        self._prep_cost = 0.0001
        self._compaction_fixed_ms = 1.0
        """Measured time of a compaction besides preparing rounds (moving average)."""
        """Measured seconds to prepare one round (moving average), to size the slices."""
        self._turn_tokens = 0.0
        """Recent growth of the view per turn (moving average), to see a compaction coming."""
        self._last_rounds_total = 0
        self._system_rounds: list[_Round] = []
        self._live_from = 0
        """Every round before this ordinal is evicted or a system round: loops start here."""
        self.turn = 0
        self.compactions: dict[str, int] = {}
        self._last_compaction_reply: int | None = None
        self._thrash_streak = 0
        self._deepen = 0.0
        self._work_need = 0
        """Tokens the working set needs in the context block, measured when a compaction starts."""
        self.hook_errors = 0

    @property
    def budget(self) -> Budget:
        """The budget the view is held to, in the counter's tokens (see `Budget.scale`)."""
        source = self._budget_source
        return self._budget if source is None else source()

    # --- adding ---------------------------------------------------------------------------
    def add(self, messages: Sequence[Message]) -> int:
        """Append ``messages`` to the transcript; returns how many were new (ids already seen are skipped).

        All messages are checked before any is added: on error the session is unchanged.
        """
        fresh = self.check(messages)
        self.commit(fresh)
        return len(fresh)

    def check(self, messages: Sequence[Message]) -> list[Message]:
        """The messages `commit` would add (new ids only), after checking all of them; changes nothing.

        Raises:
            MessageError: a malformed message (index, field and fix named).
            ToolPairError: a result for an unknown call, a second result, one call id twice in a message.
        """
        return check_batch(self, messages)

    def commit(self, fresh: Sequence[Message]) -> None:
        """Append messages that `check` returned (a store write may sit between the two)."""
        for m in fresh:
            self._append(m)

    def _append(self, m: Message) -> None:
        index = len(self.transcript)
        # only instructions recur (the same system prompt in many sessions): the rest is counted
        # without hashing it for the shared cache
        n = self.accountant.count_message(m, shared=m.role in ("system", "developer"))
        self.transcript.append(m)
        self.counts.append(n)
        self._ids[m.message_id] = index
        if m.role == "assistant":
            self._last_assistant_index = index  # outputs before it have been used
            self._replies += 1
        if m.role != "tool" and self._open_calls:
            abandon_open_calls(self)
        last = self.rounds[-1] if self.rounds else None
        if m.role == "tool":
            r = self._open_calls.pop(m.tool_call_id or "", None) or take_late_result(self, m.tool_call_id or "")
            self._detach(r)
            r.indices.append(index)
            r.tokens += n
            r.tool_tokens += n
            if r.shown is not None:  # a late result for a shortened round is shown in full
                r.shown.append(m)
                r.shown_tokens += n
                r.shown_tool_tokens += n
            self._attach(r)
            r.pending.discard(m.tool_call_id or "")
            self._answered.add(m.tool_call_id or "")
            if r is not last or r.state != "full":
                self._dirty = True  # a late result must be rendered next to its call
        elif m.role == "assistant" and not m.tool_calls and last is not None and last.kind == "user":
            self._detach(last)
            last.kind = "exchange"
            last.indices.append(index)
            last.tokens += n
            if last.shown is not None:
                last.shown.append(m)
                last.shown_tokens += n
            self._attach(last)
            if last.state == "evicted" or last is not self.rounds[-1]:
                self._dirty = True
        else:
            kind: RoundKind
            if m.role in ("system", "developer"):
                kind = "system"
            elif m.role == "user":
                kind = "user"
            elif m.tool_calls:
                kind = "tool-call"
            else:
                kind = "message"
            r = _Round(ordinal=len(self.rounds), kind=kind, indices=[index], tokens=n)
            if kind == "tool-call":
                r.pending = {c.call_id for c in m.tool_calls}
                for c in m.tool_calls:
                    self._open_calls[c.call_id] = r
                    self._answered.discard(c.call_id)
                    self._abandoned.pop(c.call_id, None)  # the id belongs to the newer call now
            if kind == "user":
                self._last_user_round = r
            self.rounds.append(r)
            if kind == "system":
                self._system_rounds.append(r)
            self._attach(r)
        if m.pinned:
            owner = self.rounds[-1] if m.role != "tool" else r
            owner.pinned = True
        if not self._dirty:
            self._view.append(m)
            self._view_tokens += n

    def _detach(self, r: _Round) -> None:
        self._rounds_total -= r.view_tokens
        self._tool_total -= r.view_tool_tokens
        if r.kind == "system":
            self._system_total -= r.view_tokens
        if r.state == "evicted":
            self._n_evicted -= 1

    def _attach(self, r: _Round) -> None:
        self._rounds_total += r.view_tokens
        self._tool_total += r.view_tool_tokens
        if r.kind == "system":
            self._system_total += r.view_tokens
        if r.state == "evicted":
            self._n_evicted += 1

    def _set_shown(self, r: _Round, shown: list[Message]) -> None:
        self._detach(r)
        counts = [self.accountant.count_message(m) for m in shown]
        r.shown = shown
        r.shown_tokens = sum(counts)
        r.shown_tool_tokens = sum(c for m, c in zip(shown, counts, strict=True) if m.role == "tool")
        if r.state == "full":
            r.state = "cleared"
        self._attach(r)
        self._dirty = True

    def _set_evicted(self, r: _Round) -> None:
        if r.state == "evicted":
            return
        if r.ledger_step is None and r.kind != "system":
            self._record(r)
        self._detach(r)
        r.state = "evicted"
        self._attach(r)
        self._dirty = True

    # --- preparing ------------------------------------------------------------------------
    def has_open_calls(self) -> bool:
        """True while a tool call waits for its result (nothing may be inserted before it)."""
        return bool(self._open_calls)

    def needs_compaction(self) -> bool:
        """True when the next `prepare_flow` will run the cascade (the view passed high water)."""
        current = self._rounds_total + self._context_tokens + self.accountant.framing.reply_priming
        return current > self.config.high_water * self.budget.effective

    def prepare_flow(
        self, *, trigger: Trigger | None = None, low_water: float | None = None, keep_rounds: int | None = None
    ) -> Generator[SummaryRequest, SummaryReply, tuple[list[Message], ViewStatus]]:
        """Compute the view for the next call; yields a summary request when L3 runs."""
        self.turn += 1
        if self._dirty:
            self._rebuild()
        layer: str | None = None
        effective = self.budget.effective
        high = self.config.high_water * effective
        # a compaction the cascade table held above high water is retried only once another strategy
        # opens (or the view would not fit), not on every turn
        refilled = self._view_tokens > max(high, self._gate_floor * effective)
        if trigger is not None or refilled:
            if trigger is None:
                self._check_thrashing()
            low = (
                low_water
                if low_water is not None
                else max(self.config.min_low_water, self.config.low_water - self._deepen)
            )
            if keep_rounds is None:
                # after thrashing, the deeper cut may also take the newest rounds (down to the current one)
                steps = round(self._deepen / self.config.thrash_deepen_by) if self.config.thrash_deepen_by else 0
                keep_rounds = max(1, self.config.keep_recent_rounds - steps)
            started = time.perf_counter()
            unprepared = self._pending_rounds()
            layer = yield from self._compact(
                trigger=trigger or "high-water", target=int(low * effective), keep_rounds=keep_rounds
            )
            self._gate_floor = self._closed_gate() if self._view_tokens > high else 0.0
            if not self.summarizer_enabled:  # a summarizer's own time is not the compaction's
                # what the compaction costs besides the rounds nobody prepared (render, eviction...)
                fixed = (time.perf_counter() - started) * 1000 - unprepared * self._prep_cost * 1000
                self._compaction_fixed_ms = 0.7 * self._compaction_fixed_ms + 0.3 * max(0.0, fixed)
            self._last_compaction_reply = self._replies
        else:
            self._track_growth(high)
        return self._turn_result(layer)

    def prepare_appended(self) -> tuple[list[Message], ViewStatus] | None:
        """The view when it only appended since the last call; None when `prepare_flow` must run.

        The common turn, without the generator `prepare_flow` needs for summary requests.
        """
        if self._dirty:
            return None
        effective = self.budget.effective
        high = self.config.high_water * effective
        if self._view_tokens > max(high, self._gate_floor * effective):
            return None
        self.turn += 1
        self._track_growth(high)
        return self._turn_result(None)

    def _track_growth(self, high: float) -> None:
        grown = self._rounds_total - self._last_rounds_total
        if grown > 0:
            self._turn_tokens = 0.8 * self._turn_tokens + 0.2 * grown if self._turn_tokens else float(grown)
        self._maybe_prepare_ahead(high)

    def _turn_result(self, layer: str | None) -> tuple[list[Message], ViewStatus]:
        self._last_rounds_total = self._rounds_total
        status = self.status(layer)
        if self.events.listening:
            errors = self.events.subscriber_errors
            self.events.emit(self._status_event(status))
            if self.events.subscriber_errors != errors:  # report this prepare's own subscriber failures
                status = replace(status, subscriber_errors=self.events.subscriber_errors)
        return list(self._view), status

    def status(self, layer: str | None = None) -> ViewStatus:
        """Accounting of the current view (constant time: totals are kept as messages arrive)."""
        budget = self.budget
        effective = budget.effective
        # the running totals, not the cached list: right even before the first prepare
        used = self._rounds_total + self._context_tokens + self.accountant.framing.reply_priming
        history = used - self._system_total - self._context_tokens - self._tool_total
        return ViewStatus(
            used=budget.calibrated(used),
            used_raw=used,
            budget=budget.calibrated_effective,
            calibration=budget.scale,
            window=budget.window,
            served_window=self.accountant.calibration.served_window,
            ratio=round(used / effective, 4) if effective else 0.0,
            state=budget.state(used),
            layer=layer,
            breakdown={
                "system": self._system_total,
                "context": self._context_tokens,
                "history": history,
                "tool_results": self._tool_total,
            },
            turn=self.turn,
            compactions=dict(self.compactions),
            transcript_messages=len(self.transcript),
            view_messages=len(self._view),
            breaker=self.breaker.state,
            subscriber_errors=self.events.subscriber_errors,
            hook_errors=self.hook_errors,
        )

    def _status_event(self, s: ViewStatus) -> ContextStatus:
        state: Any = s.state
        return ContextStatus(
            session_id=self.session_id, used=s.used, budget=s.budget, ratio=s.ratio, state=state, compact_layer=s.layer
        )

    def _turns_left(self, high: float) -> float:
        """Turns until the view passes high water at the recent growth rate."""
        if self._turn_tokens <= 0:
            return float("inf")
        return (high - self._view_tokens) / self._turn_tokens

    def _maybe_prepare_ahead(self, high: float) -> None:
        """Prepare ahead on as few turns as possible, just before a compaction that would be too slow.

        The next compaction's time is estimated from the rounds not yet prepared (at the measured
        cost per round) plus what the last compactions spent besides them (rendering the ledger,
        evicting, rebuilding the view). What exceeds ``compaction_budget_ms`` is prepared on the
        last turns before it, each taking at most ``prepare_slice_ms``, starting only as early as
        that requires. Turns far from a compaction pay nothing; where compactions are cheap (small
        windows compact often and little) no turn prepares at all.
        """
        newest_clearable = self._newest_clearable()
        pending_ms = self._pending_rounds() * self._prep_cost * 1000
        excess = pending_ms + self._compaction_fixed_ms - self.config.compaction_budget_ms
        if excess <= 0:
            return
        slice_ms = self.config.prepare_slice_ms
        turns_left = self._turns_left(high)
        # As late and on as few turns as possible (every turn that prepares is a slower turn), with
        # a turn and a half of slack because turns come in uneven sizes; slices of at least a millisecond.
        if turns_left > excess / slice_ms + 2.5:
            return
        self._prepare_ahead(min(slice_ms, max(1.0, excess / max(1.0, turns_left - 0.5))), newest_clearable)

    def _newest_clearable(self) -> int:
        """Ordinal of the newest round old enough to be cleared."""
        return len(self.rounds) - 1 - self.config.clear_after_rounds

    def _pending_rounds(self) -> int:
        """Rounds old enough to be cleared that are not prepared yet."""
        return max(0, self._newest_clearable() - self._prep_cursor)

    def _prepare_ahead(self, slice_ms: float, newest_clearable: int) -> None:
        """Build stand-ins, snapshots and ledger entries for waiting rounds, for ``slice_ms``.

        The view itself does not change (the cached prefix stays valid); the compaction then only
        swaps in what is ready.
        """
        started = time.perf_counter()
        deadline = started + slice_ms / 1000
        done = 0
        i = self._prep_cursor
        while i < len(self.rounds) and i <= newest_clearable:
            r = self.rounds[i]
            i += 1
            if r.prepared or r.state == "evicted" or r.kind == "system" or r.pending:
                continue
            self._facts(r)
            if r.kind == "tool-call":
                self._write_snapshot(r)
                if r.state == "full":
                    r.ready = self._build_stand_ins(r, force=False)
            r.entry = self._entry(r)
            if r.entry is not None:
                self.ledger.warm(r.entry)  # so the compaction's render finds its sizes known
            r.prepared = True
            done += 1
            if time.perf_counter() >= deadline:
                break
        self._prep_cursor = i
        if done:
            per_round = (time.perf_counter() - started) / done
            self._prep_cost = 0.7 * self._prep_cost + 0.3 * per_round

    def _check_thrashing(self) -> None:
        last = self._last_compaction_reply
        if last is not None and self._replies - last <= self.config.thrash_window_turns:
            self._thrash_streak += 1
            if self._thrash_streak >= self.config.thrash_repeats:
                self._deepen = min(self._deepen + self.config.thrash_deepen_by, self.config.low_water)
                self._thrash_streak = 0
                self.events.emit(
                    Alert(
                        session_id=self.session_id,
                        alert="thrashing",
                        detail=(
                            f"view refilled to high water within {self.config.thrash_window_turns} turns of a "
                            f"compaction {self.config.thrash_repeats} times in a row; next compactions cut to "
                            f"{max(self.config.min_low_water, self.config.low_water - self._deepen):.2f}"
                        ),
                    )
                )
        else:
            self._thrash_streak = 0

    # --- the cascade ----------------------------------------------------------------------
    def _compact(
        self, *, trigger: Trigger, target: int, keep_rounds: int
    ) -> Generator[SummaryRequest, SummaryReply, str | None]:
        effective = self.budget.effective
        layer: str | None = None
        protected = self._protected(keep_rounds)
        self._pre_ratio = self._total() / effective if effective else 1.0
        hard = self._protected(0)
        floor = sum(self.rounds[o].view_tokens for o in hard) + self.accountant.framing.reply_priming
        self._floor = floor
        self._tight = floor + min(self._ledger_cap(), effective // 10) > target
        self._work_need = self._working_set_need()
        if "clear" in self.config.layers and self._open("tool-results", trigger) and self._total() > target:
            layer = self._run_layer("clear", trigger, target, lambda: self._clear(protected, target))
        if "evict" in self.config.layers and self._open("progressive", trigger) and self._total() > target:
            layer = self._run_layer("evict", trigger, target, lambda: self._evict(protected, target))
        self._merge_ready_summary()
        if "summarize" in self.config.layers and self._open("conversation", trigger) and self._summary_due():
            before = self._total()
            started = time.perf_counter()
            self.events.emit(
                CompactionStarted(
                    session_id=self.session_id, layer="summarize", trigger=trigger, tokens_before=before, target=target
                )
            )
            done = yield from self._summarize(target)
            if done:
                layer = "summarize"
                self._count_layer("summarize")
            self._finish_layer("summarize", trigger, before, started, int(done))
        self._render_context(effective, target)
        if "evict" in self.config.layers and self._open("progressive", trigger):
            # The context block is only estimated while evicting; once rendered it may leave the view
            # above the target: evict a little more and render again (it converges in a step or two).
            for _ in range(3):
                if self._rendered_total() <= target or not self._evict(protected, target):
                    break
                self._render_context(effective, target)
        if self._total() > effective:  # under a tight budget this includes the ledger's quarter
            layer = self._run_layer("shrink", trigger, effective, lambda: self._shrink(effective))
            self._render_context(effective, target)
        self._rebuild()
        if self._view_tokens > effective:
            raise self._budget_error(effective)
        return layer

    def _open(self, strategy: Strategy, trigger: Trigger) -> bool:
        """Whether the cascade table lets ``strategy`` run in this compaction.

        By the utilization the compaction started from; a view that would not fit and an
        emergency compaction may use every strategy.
        """
        return trigger == "reactive" or self._pre_ratio > 1.0 or self._pre_ratio >= self.config.threshold(strategy)

    def _closed_gate(self) -> float:
        """The lowest utilization at which a strategy the last compaction could not use opens (1.0 at most)."""
        by_layer: tuple[tuple[Strategy, str], ...] = (
            ("tool-results", "clear"),
            ("progressive", "evict"),
            ("conversation", "summarize"),
        )
        gates = [self.config.threshold(strategy) for strategy, layer in by_layer if layer in self.config.layers]
        return min([g for g in gates if g > self._pre_ratio] + [1.0])

    def _run_layer(self, name: str, trigger: Trigger, target: int, fn: Any) -> str | None:
        before = self._total()
        started = time.perf_counter()
        self.events.emit(
            CompactionStarted(
                session_id=self.session_id, layer=name, trigger=trigger, tokens_before=before, target=target
            )
        )
        items = int(fn())
        self._finish_layer(name, trigger, before, started, items)
        if items:
            self._count_layer(name)
            return name
        return None

    def _finish_layer(self, name: str, trigger: Trigger, before: int, started: float, items: int) -> None:
        after = self._total()
        duration = (time.perf_counter() - started) * 1000
        if self.events.listening:
            effective = self.budget.effective
            self.events.emit(
                ContextStatus(
                    session_id=self.session_id,
                    used=self.budget.calibrated(after),
                    budget=self.budget.calibrated_effective,
                    ratio=round(after / effective, 4) if effective else 0.0,
                    state=self.budget.state(after),
                    compact_layer=name,
                )
            )
        self.events.emit(
            CompactionFinished(
                session_id=self.session_id,
                layer=name,
                trigger=trigger,
                tokens_before=before,
                tokens_after=after,
                duration_ms=round(duration, 3),
                items=items,
            )
        )
        logger.info(
            "compaction session=%s layer=%s trigger=%s tokens %d->%d items=%d in %.2f ms",
            self.session_id,
            name,
            trigger,
            before,
            after,
            items,
            duration,
        )

    def _count_layer(self, name: str) -> None:
        self.compactions[name] = self.compactions.get(name, 0) + 1

    def _rendered_total(self) -> int:
        """Tokens of the view with the context block as last rendered."""
        return self._rounds_total + self._context_tokens + self.accountant.framing.reply_priming

    def _total(self) -> int:
        """Tokens of the view as it would be rendered now (context block at its expected size)."""
        return self._rounds_total + self._context_reserve() + self.accountant.framing.reply_priming

    def _ledger_cap(self) -> int:
        return min(self.config.ledger_max_tokens, int(self.config.ledger_share * self.budget.effective))

    def _context_reserve(self) -> int:
        """Expected size of the context block: as last rendered, plus a line per newly evicted round.

        Under a tight budget (the low-water target cannot be reached) the block is what remembers
        the evicted rounds, so it is given a quarter of the budget before the newest rounds are.
        """
        if not self._n_evicted and self.summary is None:
            return self._context_tokens
        grown = self._n_evicted - self._evicted_at_render
        base = self._context_tokens or 48  # the header of a first block
        expected = min(max(self._ledger_cap(), self._context_tokens), base + 24 * max(0, grown))
        if self._tight:
            expected = max(expected, min(self._ledger_cap(), self.budget.effective // 4))
        # the working set is kept ahead of the newest rounds' bulk: a large recent output shrinks first
        return max(expected, self._work_need)

    def _working_set_cap(self) -> int:
        return int(self._ledger_cap() * self.config.working_set_share)

    def _working_set_need(self) -> int:
        """Tokens the context block needs to show the working set (with its header), within its cap."""
        cap = self._working_set_cap()
        if cap <= 0:
            return 0
        self.working_set.catch_up(self.transcript)
        text = self.working_set.render(max_tokens=cap, count=self.accountant.count_text)
        return self.accountant.count_text(text) + 48 if text else 0

    def _protected(self, keep_rounds: int) -> set[int]:
        """Ordinals of rounds no layer may touch: system, pinned, current request, in flight, newest."""
        keep: set[int] = {r.ordinal for r in self._system_rounds}
        conversation = self._age_order()
        for r in conversation:
            if r.pinned or r.pending:
                keep.add(r.ordinal)
        if self._last_user_round is not None:
            keep.add(self._last_user_round.ordinal)
        keep.update(r.ordinal for r in conversation[-keep_rounds:] if keep_rounds > 0)
        if conversation:
            keep.add(conversation[-1].ordinal)
        return keep

    def _record(self, r: _Round) -> None:
        """Put the round in the progress ledger (once, when it first leaves the view)."""
        entry = r.entry if r.entry is not None else self._entry(r)
        if r.kind == "tool-call":
            self._snapshot(r, "evicted")
        if entry is not None:
            self.ledger.append(entry)
            r.ledger_step = entry.step
        r.entry = None

    def _entry(self, r: _Round) -> LedgerEntry | None:
        msgs = [self.transcript[i] for i in r.indices]
        snap = self._snapshot_id(r) if r.kind == "tool-call" else None
        return entry_for_round(msgs, snapshot_id=snap, facts=self._facts(r), step=r.ordinal)

    def _message_facts(self, index: int) -> list[str]:
        facts = self._msg_facts.get(index)
        if facts is None:
            m = self.transcript[index]
            text = m.text
            # error lines travel with the facts of any output (a failing step need not be flagged)
            found = self._message_key_lines(index)
            facts = found[:2] if m.is_error else [line for line in found if is_error_line(line)][:2]
            facts += salient_facts(text, limit=self.config.cleared_max_facts * 3, scan_chars=self.config.scan_chars)
            self._msg_facts[index] = facts
        return facts

    def _message_key_lines(self, index: int) -> list[str]:
        """The first key lines of output ``index`` (one scan serves its facts and its stand-in)."""
        found = self._msg_key_lines.get(index)
        if found is None:
            found = self._msg_key_lines[index] = key_lines(self.transcript[index].text, limit=4, max_line_chars=160)
        return found

    def _facts(self, r: _Round) -> tuple[str, ...]:
        """Identifiers of the round (tool outputs; a long request's text past its first 200 characters)."""
        if r.facts is None:
            facts: list[str] = []
            for i in r.indices:
                m = self.transcript[i]
                if m.role == "tool":
                    facts.extend(self._message_facts(i))
                elif m.role == "user" and i == r.indices[0]:
                    facts.extend(request_facts(m.text))
            r.facts = tuple(dict.fromkeys(facts))
        return r.facts

    def rebuild_snapshot(self, snapshot_id: str) -> bytes | None:
        """A round's snapshot document made again from the transcript (which compaction never alters).

        Serves read-back when the snapshot store does not have it: a session resumed from a store
        whose snapshots were kept elsewhere, or a store that lost them.
        """
        for r in self.rounds:
            if r.kind == "tool-call" and self._snapshot_id(r) == snapshot_id:
                return encode_snapshot("round", [self.transcript[i] for i in r.indices])
        return None

    def _snapshot_id(self, r: _Round) -> str:
        if r.snapshot_id is None:
            r.snapshot_id = make_snapshot_id(self.session_id, self.transcript[r.indices[0]].message_id)
        return r.snapshot_id

    def _write_snapshot(self, r: _Round) -> None:
        """Store the round's full messages under its snapshot id (once its results are all in)."""
        if not r.snapshot_written:
            msgs = [self.transcript[i] for i in r.indices]
            put_lazy = getattr(self.snapshots, "put_snapshot_lazy", None)
            if put_lazy is not None and not r.pending:  # in memory: encoded when first read
                put_lazy(self.session_id, self._snapshot_id(r), functools.partial(encode_snapshot, "round", msgs))
            else:
                self.snapshots.put_snapshot(self.session_id, self._snapshot_id(r), encode_snapshot("round", msgs))
            r.snapshot_written = not r.pending

    def _snapshot(self, r: _Round, reason: Literal["cleared", "evicted", "offloaded", "summarized"]) -> str:
        """Make sure the round's snapshot exists and report that compaction now points to it."""
        announced = r.snapshot_written
        self._write_snapshot(r)
        if not announced or reason != "evicted":
            self.events.emit(
                SnapshotWritten(
                    session_id=self.session_id,
                    snapshot_id=self._snapshot_id(r),
                    reason=reason,
                    message_ids=tuple(self.transcript[i].message_id for i in r.indices),
                )
            )
        return self._snapshot_id(r)

    def _live(self) -> list[_Round]:
        """Rounds from the first one still in view (system rounds included), oldest first."""
        rounds, i = self.rounds, self._live_from
        while i < len(rounds) and (rounds[i].state == "evicted" or rounds[i].kind == "system"):
            i += 1
        self._live_from = i
        return rounds[i:]

    def _age_order(self) -> list[_Round]:
        """Conversation rounds still in view (or evicted after the first live one), oldest first."""
        return [r for r in self._live() if r.kind != "system"]

    def _clear(self, protected: set[int], target: int) -> int:
        """L1: replace old tool outputs by stand-ins, oldest first, until under ``target``."""
        conversation = self._age_order()
        limit = len(conversation) - self.config.clear_after_rounds
        cleared = 0
        total = self._total()
        for r in conversation[: max(limit, 0)]:
            if total <= target:
                break
            if r.kind != "tool-call" or r.state != "full" or r.ordinal in protected:
                continue
            saved = self._clear_round(r, reason="cleared")
            if saved > 0:
                total -= saved
                cleared += 1
        # Tool-result summarization: a large output the agent has already answered to is worth its
        # key findings only, however recent (the newest rounds stay whole: they are protected).
        for r in conversation[max(limit, 0) :]:
            if total <= target:
                break
            if r.kind != "tool-call" or r.state != "full" or r.ordinal in protected or not self._used_large_output(r):
                continue
            saved = self._clear_round(r, reason="cleared")
            if saved > 0:
                total -= saved
                cleared += 1
        return cleared

    def _used_large_output(self, r: _Round) -> bool:
        """The round has an output of ``tool_result_min_tokens`` or more that an assistant message followed."""
        return any(
            self.transcript[i].role == "tool"
            and self.counts[i] >= self.config.tool_result_min_tokens
            and i < self._last_assistant_index
            for i in r.indices
        )

    def _clear_round(
        self,
        r: _Round,
        *,
        reason: Literal["cleared", "offloaded"],
        force: bool = False,
        offload_above: int | None = None,
        preview_limit: int | None = None,
    ) -> int:
        """Show stand-ins for the round's large tool outputs; returns tokens saved."""
        if r.prepared and not force and offload_above is None and r.shown is None:
            shown = r.ready  # prepared ahead; None means nothing in it shrinks
        else:
            shown = self._build_stand_ins(r, force=force, offload_above=offload_above, preview_limit=preview_limit)
        r.ready = None
        if shown is None:
            return 0
        self._snapshot(r, reason)
        before = r.view_tokens
        self._set_shown(r, shown)
        return before - r.view_tokens

    def _build_stand_ins(
        self, r: _Round, *, force: bool, offload_above: int | None = None, preview_limit: int | None = None
    ) -> list[Message] | None:
        """The round's messages with large outputs replaced by stand-ins; None when nothing shrinks.

        ``force`` shortens every output to a head-and-tail preview (of at most ``preview_limit``
        tokens when given); ``offload_above`` does that only for outputs larger than that many
        tokens (an item that alone would not fit).
        """
        snapshot_id = self._snapshot_id(r)
        current = r.shown if r.shown is not None else [self.transcript[i] for i in r.indices]
        shown: list[Message] = []
        changed = False
        for i, m_shown in zip(r.indices, current, strict=True):
            m = self.transcript[i]
            if m.role == "tool" and (force or self.counts[i] >= self.config.min_clear_tokens):
                big = offload_above is not None and self.counts[i] > offload_above
                limit = offload_above if big else None
                if force:
                    limit = preview_limit if preview_limit is not None else max(64, self.budget.effective // 8)
                stand_in = self._stand_in(i, snapshot_id, shrink=force or big, max_tokens=limit)
                if self.accountant.count_message(stand_in) < self.accountant.count_message(m_shown):
                    shown.append(stand_in)
                    changed = True
                    continue
            shown.append(m_shown)
        return shown if changed else None

    def _stand_in(self, index: int, snapshot_id: str, *, shrink: bool, max_tokens: int | None = None) -> Message:
        """A stand-in for output ``index``: head (and tail, when ``shrink``), key lines, identifiers.

        ``max_tokens`` bounds a shrink preview: wide text (CJK: about a token per character)
        halves the head and tail until it fits.
        """
        cfg = self.config
        head, tail = cfg.preview_head_chars, cfg.preview_tail_chars
        while True:
            stand_in = self._stand_in_text(index, snapshot_id, shrink=shrink, head=head, tail=tail)
            if not shrink or max_tokens is None or self.accountant.count_message(stand_in) <= max_tokens:
                return stand_in
            if head <= 40:  # even a short preview does not fit: the reference alone remains
                return self._stand_in_text(index, snapshot_id, shrink=shrink, head=0, tail=0, bare=True)
            head, tail = head // 2, tail // 2

    def _stand_in_text(
        self, index: int, snapshot_id: str, *, shrink: bool, head: int, tail: int, bare: bool = False
    ) -> Message:
        m = self.transcript[index]
        tokens = self.counts[index]
        text = m.text
        cfg = self.config
        if shrink:
            body = preview(text, head_chars=head, tail_chars=tail)
        else:
            body = preview(text, head_chars=cfg.cleared_head_chars)
        lines = [f'[output shortened from {tokens} tokens; full text: read_context("{snapshot_id}")]', body]
        if bare:
            return self._tool_stand_in(m, lines[0], snapshot_id, shrink=shrink)
        found = self._message_key_lines(index)[:2]
        extra_keys = [k for k in found if k not in body]
        if extra_keys:
            lines.append("key lines: " + " | ".join(extra_keys))
        # facts the head or the key lines already show, whole lines or identifiers in them, are not repeated
        shown = body + "\n" + "\n".join(extra_keys)
        facts = [f for f in self._message_facts(index)[: cfg.cleared_max_facts] if f not in shown]
        if facts:
            lines.append("ids: " + " · ".join(facts))
        return self._tool_stand_in(m, "\n".join(lines), snapshot_id, shrink=shrink)

    @staticmethod
    def _tool_stand_in(m: Message, text: str, snapshot_id: str, *, shrink: bool) -> Message:
        """The tool message shown instead of ``m``: same call id, name and error flag, new text."""
        return Message(
            role="tool",
            parts=(TextPart(text=text),),
            message_id=f"{m.message_id}~{'p' if shrink else 'c'}",
            tool_call_id=m.tool_call_id,
            name=m.name,
            is_error=m.is_error,
            turn=m.turn,
            snapshot_id=snapshot_id,
            source_ids=(m.message_id,),
        )

    def _candidates(self, protected: set[int]) -> list[Candidate]:
        conversation = self._age_order()
        n = len(conversation)
        cands: list[Candidate] = []
        need_refs = self.config.eviction_policy in ("lru", "hybrid")
        need_words = self.config.eviction_policy == "semantic-merge"
        last_seen: dict[str, int] = {}
        if need_refs:
            for r in conversation:
                for f in self._facts(r):
                    last_seen[f] = r.ordinal
                for i in r.indices:
                    for c in self.transcript[i].tool_calls:
                        for f in salient_facts(c.arguments, limit=16):
                            last_seen[f] = r.ordinal
        for age_pos, r in enumerate(conversation):
            if r.state == "evicted" or r.ordinal in protected:
                continue
            first = self.transcript[r.indices[0]]
            facts = frozenset(self._facts(r)) if need_refs else frozenset()
            refs = max((last_seen.get(f, -1) for f in facts if last_seen.get(f, -1) > r.ordinal), default=-1)
            words: frozenset[str] = frozenset()
            if need_words:
                words = frozenset(" ".join(self.transcript[i].text[:2000] for i in r.indices).split())
            importance = float(first.extra.get("importance", 1.0)) if isinstance(first.extra, dict) else 1.0
            if any(self.transcript[i].is_error for i in r.indices):
                importance *= 2.0
            cands.append(
                Candidate(
                    ordinal=r.ordinal,
                    age=n - 1 - age_pos,
                    kind=r.kind,
                    role="tool" if r.kind == "tool-call" else first.role,
                    importance=importance,
                    has_thinking=any(isinstance(p, ThinkingPart) for i in r.indices for p in self.transcript[i].parts),
                    identifiers=facts,
                    words=words,
                    last_reference=refs,
                )
            )
        return cands

    def _evict(self, protected: set[int], target: int) -> int:
        """L2: drop whole rounds in policy order until under ``target`` (ledger included)."""
        evicted = 0
        total = self._total()
        if self.config.eviction_policy == "fifo":  # no scoring needed: walk the rounds oldest first
            for r in self._live():
                if total <= target:
                    break
                if r.kind == "system" or r.state == "evicted" or r.ordinal in protected:
                    continue
                self._set_evicted(r)
                total = self._total()
                evicted += 1
            return evicted
        ordered = order_for_eviction(self._candidates(protected), self.config)
        # progressive tiers: rounds past the one-line age leave first, whatever the policy prefers
        ordered.sort(key=lambda c: 0 if c.age > self.config.progressive_line_after else 1)
        for cand in ordered:
            if total <= target:
                break
            self._set_evicted(self.rounds[cand.ordinal])
            total = self._total()
            evicted += 1
        return evicted

    def _unsummarized(self) -> list[_Round]:
        return [r for r in self.rounds if r.state == "evicted" and r.ordinal > self._summarized_upto]

    def _summary_due(self) -> bool:
        """L3 runs when a summarizer is set, its breaker allows, and evicted rounds are not yet folded in."""
        if not self.summarizer_enabled or not self._n_evicted:
            return False
        if not self.breaker.allow() and not self.summarizer_degrades:
            return False
        if self._summary_tokens(None) < 64:  # no room worth a summary: the ledger is denser in facts
            return False
        return bool(self._unsummarized())

    def _summary_tokens(self, target: int | None) -> int:
        """The size the running summary is written for: its share of the context block (the ledger has the rest)."""
        return min(self.config.summary_max_tokens, int(self._context_room(self.budget.effective, target) * 0.4) - 48)

    def _summarize(self, target: int) -> Generator[SummaryRequest, SummaryReply, bool]:
        """Fold the newly evicted rounds into the running summary; False when the summarizer failed."""
        fresh = self._unsummarized()
        messages = [self.transcript[i] for r in fresh for i in r.indices]
        first = self.summary_span[0] if self.summary_span else messages[0].message_id
        span = (first, messages[-1].message_id)
        # the summary shares the context block with the ledger: ask for what will be shown
        degraded = not self.breaker.allow()
        request = SummaryRequest(
            previous=self.summary,
            messages=messages,
            max_tokens=max(64, self._summary_tokens(target)),
            span=span,
            degraded=degraded,
        )
        reply = yield request
        text: str | None = None
        fallback: str | None = None
        if isinstance(reply, SummaryRejected):  # a failure to count, with a summary to use
            problem: str | None = f"{reply.reason}: {reply}"
            fallback = reply.fallback
        else:
            text = reply
            problem = "the summarizer failed" if text is None else check_summary(text)
            if problem is None and text is not None:
                problem = (
                    None
                    if self.summarizer_checks_identifiers
                    else self._lost_identifiers(fresh, text, request.max_tokens)
                )
        if problem is not None and not degraded:
            opened = self.breaker.record_failure()
            logger.warning("summary rejected for session %s: %s", self.session_id, problem)
            if opened:
                self.events.emit(
                    Alert(
                        session_id=self.session_id,
                        alert="breaker-open",
                        detail=(
                            f"summary layer stopped after {self.breaker.failures} consecutive failures "
                            f"(last: {problem}); retrying in {self.config.breaker_cooldown_s:.0f}s. "
                            "Clearing and eviction keep working."
                        ),
                    )
                )
        if problem is not None:
            # the summarizer's own fallback (deterministic) still moves the summary forward
            text = fallback if fallback is not None and check_summary(fallback) is None else None
            if text is None:
                return False
        elif not degraded:
            self.breaker.record_success()
        assert text is not None
        self.summary = text.strip()
        self.summary_span = span
        self._summarized_upto = fresh[-1].ordinal
        return True

    def _merge_ready_summary(self) -> None:
        """Swap in a better summary of exactly the current span when a background summarizer has one."""
        if self.summary_merger is None or self.summary is None:
            return
        try:
            better = self.summary_merger.take_ready(self.summary, self.summary_span)
        except Exception:  # a merge hook must never break a compaction
            self.hook_errors += 1
            logger.exception("summary merge hook failed for session %s", self.session_id)
            return
        if isinstance(better, str) and check_summary(better) is None:
            self.summary = better.strip()

    def _lost_identifiers(self, fresh: Sequence[_Round], text: str, max_tokens: int) -> str | None:
        """Why a summary must be rejected for dropping the identifiers it was given, or None.

        Ids, dates and codes of the summarized rounds are what later steps need verbatim; a summary
        of ``max_tokens`` cannot hold them all, so it must keep a share of as many as it could.
        """
        given = [f for f in rank_facts(f for r in fresh for f in self._facts(r)) if fact_rank(f) <= 1]
        could_hold = min(len(given), max(5, max_tokens // 12))  # ids share the summary with its prose
        if could_hold < 5:
            return None
        kept = sum(1 for f in given if f in text)
        if kept < self.config.summary_min_identifiers * could_hold:
            return (
                f"the summary keeps {kept} of the {len(given)} identifiers it was given "
                f"(at least {self.config.summary_min_identifiers:.0%} of the {could_hold} it has room for)"
            )
        return None

    def _shrink(self, effective: int) -> int:
        """Tight budget: shrink the newest rounds' outputs, then drop newest rounds down to the current one."""
        changed = 0
        protected_hard = self._protected(0)
        conversation = self._age_order()
        for r in conversation:  # previews for large outputs, oldest of the kept rounds first
            if self._total() <= effective:
                return changed
            if r.state != "evicted" and r.kind == "tool-call":
                # compact stand-ins (results that arrived late are still full); an output that alone
                # would overflow gets a head + tail preview
                room = effective - self._rendered_total() + r.view_tokens
                if self._clear_round(r, reason="offloaded", offload_above=max(0, room // 2)) > 0:
                    changed += 1
        for r in conversation:
            if self._total() <= effective:
                return changed
            if r.state != "evicted" and r.ordinal not in protected_hard:
                self._set_evicted(r)
                changed += 1
        for r in conversation:  # the protected rounds themselves: offload what is oversized
            if self._total() <= effective:
                return changed
            if r.state != "evicted" and r.kind == "tool-call":
                # previews sized to the room this round has, shared by its outputs
                outputs = sum(1 for i in r.indices if self.transcript[i].role == "tool") or 1
                room = effective - (self._total() - r.view_tokens) - (r.view_tokens - r.view_tool_tokens)
                limit = max(16, room // outputs)
                if self._clear_round(r, reason="offloaded", force=True, preview_limit=limit) > 0:
                    changed += 1
        return changed

    def _context_room(self, effective: int, target: int | None) -> int:
        """Tokens the context block may take now (see `_render_context`)."""
        rest = self._rounds_total + self.accountant.framing.reply_priming
        room = max(0, min(self._ledger_cap(), effective - rest))
        if target is not None and not self._tight:
            # aim at the low-water mark, but the ledger keeps up to half its share (as far as the
            # rounds that must stay allow): the settle step evicts more rounds for it when its facts
            # need the room (only then: a short ledger renders short)
            half_share = min(self._ledger_cap(), int(effective * self.config.ledger_share / 2))
            if target < self.config.low_water * effective - 1:  # a deeper cut (thrashing, L4) must land
                half_share = min(half_share, target - self._floor)
            room = min(room, max(target - rest, half_share))
        return room

    def _render_context(self, effective: int, target: int | None = None) -> None:
        """Render the context block (summary + ledger) into the room left in the budget.

        The block aims at the low-water ``target``: when the rounds that may not leave the view fit
        under it, the block gets the room up to the target (but at least a tenth of the budget);
        when they do not (a tight budget), it gets whatever the budget still has.
        """
        self._evicted_at_render = self._n_evicted
        if not self._n_evicted and self.summary is None and not self.ledger.notes_added and not len(self.notes):
            self._context_msg, self._context_tokens = None, 0
            return
        room = self._context_room(effective, target)
        span = self._evicted_span()
        head = CONTEXT_HEADER + ('; read_context("#<step>") shows any step in full.' if span else ".")
        parts = [head]
        if self.summary and self.summary_span:
            a, b = self.summary_span
            summary = self.summary
            limit = max(0, int(room * 0.4) - 48)  # the rest of the room is the ledger's
            # a summary never pushes the view past the budget: shrunk by sections, identifiers first
            summary = fit_summary(summary, limit, counter=self.accountant.counter)
            parts.append(f"Summary of messages {a}..{b}:\n{summary}")
        if len(self.notes):  # the agent's structured notes come back after every compaction
            notes_text = self.notes.render(max_tokens=max(0, room // 4), counter=self.accountant.count_text)
            if notes_text:
                parts.append(notes_text)
        # what the agent acted on outranks what merely appeared in outputs: it comes before the ledger
        self.working_set.catch_up(self.transcript)
        work_text = self.working_set.render(
            max_tokens=min(self._working_set_cap(), room - 48), count=self.accountant.count_text
        )
        if work_text:
            parts.append(work_text)
        fixed = self.accountant.count_message(Message.user("\n".join(parts)))
        source_ids = span or ()
        ledger_room = room - fixed - 2
        for _ in range(4):  # the ledger's size is estimated; shrink its room until the exact count fits
            ledger_text = self.ledger.render(
                max_tokens=max(0, ledger_room),
                count=self.accountant.count_text,
                exact=False,
                exclude="\n".join(parts[1:]),  # facts the summary shows are not listed twice
            )
            text = "\n".join([*parts, ledger_text] if ledger_text else parts)
            msg = Message(
                role="user",
                parts=(TextPart(text=text),),
                message_id=context_id(text),
                source_ids=source_ids,
                extra={"contextkeeper": "context"},
            )
            tokens = self.accountant.count_message(msg)
            if ledger_text:
                self.ledger.calibrate(self.ledger.estimate(ledger_text), tokens - fixed)
            if tokens <= room or not ledger_text:
                break
            ledger_room -= tokens - room + 8
        if tokens > room and len(parts) > 1:  # no room for the ledger: keep the summary, drop the ledger
            msg = Message(
                role="user",
                parts=(TextPart(text="\n".join(parts)),),
                message_id=msg.message_id,
                source_ids=source_ids,
                extra={"contextkeeper": "context"},
            )
            tokens = self.accountant.count_message(msg)
        if tokens > room and self.config.require_user_first:
            # No room for summary or ledger: a bare header still gives the view the user turn that
            # Anthropic and Gemini require before the first kept assistant message.
            msg = Message(
                role="user",
                parts=(TextPart(text=head),),
                message_id=msg.message_id,
                source_ids=source_ids,
                extra={"contextkeeper": "context"},
            )
            tokens = self.accountant.count_message(msg)
        if tokens > room:
            self._context_msg, self._context_tokens = None, 0
            return
        self._context_msg, self._context_tokens = msg, tokens

    def _evicted_span(self) -> tuple[str, str] | None:
        """First and last transcript message id that left the view."""
        rounds = self.rounds
        first = next((r for r in rounds if r.state == "evicted"), None)
        # newest first, and only as far back as needed: sessions hold thousands of rounds
        last = next((rounds[i] for i in range(len(rounds) - 1, -1, -1) if rounds[i].state == "evicted"), None)
        if first is None or last is None:
            return None
        return self.transcript[first.indices[0]].message_id, self.transcript[last.indices[-1]].message_id

    def _rebuild(self) -> None:
        """Render the view list from the round states (after a compaction or a late tool result)."""
        head: list[Message] = []
        body: list[Message] = []
        kept_started = False
        tokens = self.accountant.framing.reply_priming
        live = self._live()
        start = live[0].ordinal if live else len(self.rounds)
        for r in [*(r for r in self._system_rounds if r.ordinal < start), *live]:
            if r.state == "evicted":
                continue
            msgs = r.shown if r.shown is not None else [self.transcript[i] for i in r.indices]
            if r.kind == "tool-call" and r.shown is None and len(r.indices) > 1:
                # a result may have arrived late: render results right after their call
                msgs = sorted(msgs, key=lambda m: 0 if m.role != "tool" else 1)
            if r.fillers:
                msgs = [*msgs, *r.fillers]
            tokens += r.view_tokens
            if r.kind == "system" and not kept_started:
                head.extend(msgs)
            else:
                kept_started = True
                body.extend(msgs)
        view = head
        if self._context_msg is not None:
            view.append(self._context_msg)
            tokens += self._context_tokens
        view.extend(body)
        self._view = view
        self._view_tokens = tokens
        self._dirty = False
        self.view_generation += 1

    def _budget_error(self, effective: int) -> BudgetExceeded:
        s = self.status()
        return BudgetExceeded(
            f"session {self.session_id!r}: the protected part of the view needs {self._view_tokens} tokens "
            f"but the effective budget is {effective} (window {self.budget.window} − reserved output "
            f"{self.budget.reserved_output} − tool schemas {self.budget.tool_schemas}"
            f"{f', counted tokens at calibration scale {self.budget.scale:g}' if self.budget.scale != 1 else ''}"
            f"); breakdown {s.breakdown}. "
            "Raise the window, lower the reserved output, shorten the system prompt or unpin messages.",
            budget=effective,
            used=self._view_tokens,
            breakdown=s.breakdown,
        )

    # --- persistence ------------------------------------------------------------------------
    def export_state(self) -> dict[str, Any]:
        """The view state as JSON: what compaction decided, not the transcript (stored apart)."""
        state: dict[str, Any] = {
            "format": 1,
            "transcript_messages": len(self.transcript),
            "evicted": [r.ordinal for r in self.rounds if r.state == "evicted"],
            "cleared": [r.ordinal for r in self.rounds if r.state == "cleared"],
            "ledger": self.ledger.to_dict(),
            "notes": self.notes.to_dict(),
            "working_set": self.working_set.to_dict(),
            "summary": self.summary,
            "summary_span": list(self.summary_span) if self.summary_span else None,
            "summarized_upto": self._summarized_upto,
            "turn": self.turn,
            "compactions": dict(self.compactions),
            "deepen": self._deepen,
            "breaker": {"failures": self.breaker.failures, "total_failures": self.breaker.total_failures},
            "calibration": self.accountant.calibration.to_dict(),
        }
        return export_view(self, state)

    def import_state(self, state: Mapping[str, Any]) -> None:
        """Restore what `export_state` saved onto a transcript that was replayed with `add`.

        Cleared rounds get their stand-ins rebuilt (deterministic), evicted rounds leave the view,
        and the ledger, running summary and counters come back as they were.
        """
        if state.get("format") != 1:
            raise SchemaError(
                f"session {self.session_id!r}: view state format {state.get('format')!r} is not known to this "
                "version of contextkeeper; upgrade contextkeeper or run `contextkeeper db migrate`.",
                session_id=self.session_id,
            )
        check_state(self.session_id, state)
        by_ordinal = {r.ordinal: r for r in self.rounds}
        saved = saved_stand_ins(self, state)
        for ordinal in state.get("cleared", []):
            r = by_ordinal.get(int(ordinal))
            if r is not None and r.state == "full":
                shown = saved.get(r.ordinal) or self._build_stand_ins(r, force=False)
                if shown is not None:
                    self._set_shown(r, shown)
        for ordinal in state.get("evicted", []):
            r = by_ordinal.get(int(ordinal))
            if r is not None:
                self._detach(r)
                r.state = "evicted"
                self._attach(r)
        self.ledger = Ledger.from_dict(state.get("ledger", {}), session_id=self.session_id)
        self.notes = Notes.from_dict(state["notes"], session_id=self.session_id) if "notes" in state else Notes()
        self.working_set = WorkingSet.from_dict(state.get("working_set") or {})
        for entry in self.ledger.entries:
            r = by_ordinal.get(entry.step)
            if r is not None:
                r.ledger_step = entry.step
        self.summary = state.get("summary")
        span = state.get("summary_span")
        self.summary_span = (str(span[0]), str(span[1])) if span else None
        self._summarized_upto = int(state.get("summarized_upto", -1))
        self.turn = int(state.get("turn", 0))
        self.compactions = {str(k): int(v) for k, v in state.get("compactions", {}).items()}
        self._deepen = float(state.get("deepen", 0.0))
        breaker = state.get("breaker", {})
        self.breaker.failures = int(breaker.get("failures", 0))
        self.breaker.total_failures = int(breaker.get("total_failures", 0))
        if "calibration" in state:
            self.accountant.calibration = type(self.accountant.calibration).from_dict(state["calibration"])
        if not import_view(self, state):
            self._render_context(self.budget.effective)
        self._rebuild()

    # --- reactive (L4) --------------------------------------------------------------------
    def reactive_flow(self) -> Generator[SummaryRequest, SummaryReply, tuple[list[Message], ViewStatus]]:
        """Emergency compaction after a provider context-length error: deeper cut, last rounds only."""
        self.turn -= 1  # the failed call does not count as a turn
        return (
            yield from self.prepare_flow(
                trigger="reactive",
                low_water=self.config.reactive_low_water,
                keep_rounds=self.config.reactive_keep_rounds,
            )
        )

    def pinned_copy(self, message_id: str) -> None:
        """Pin an existing transcript message (it will never be evicted)."""
        for i, m in enumerate(self.transcript):
            if m.message_id == message_id:
                self.transcript[i] = replace(m, pinned=True)
                for r in self.rounds:
                    if i in r.indices:
                        r.pinned = True
                        if r.state == "evicted":  # a pinned message is in every view: bring it back
                            self._detach(r)
                            r.state = "cleared" if r.shown is not None else "full"
                            self._attach(r)
                            self._live_from = min(self._live_from, r.ordinal)
                self._dirty = True
                return
        raise MessageError(f"no message {message_id!r} in session {self.session_id!r}", field="message_id")

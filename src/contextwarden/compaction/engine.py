"""The orchestrator: transcript in, view out, with the cheapest-first cascade and hysteresis.

The transcript is append-only; the round book (`book`) counts every message once when it
arrives and keeps the view as a cached list: between compactions a turn only appends the new
messages to it, so the prefix the provider cached stays byte-identical. When the view passes
the high-water mark, the layers run in order until it is under the low-water mark:

1. `clear` — old tool outputs become stand-ins (head, key lines, identifiers, snapshot id);
2. `evict` — old rounds leave the view; the progress ledger stands in for them;
3. `summarize` — the evicted span is folded into a running summary (sans-IO: yields a request);

then the context block (`context_block`) is rendered and, only when the budget itself is at
stake, `shrink` takes the newest rounds down to previews and offloads an oversized item.
`reactive` is the same cascade with a deeper plan, after a provider's context-length error.

This module decides *when* layers run: the high-water gate, the cascade table's per-layer
gates (by the utilization a compaction started from), thrash detection (a view that refills
within a few assistant replies of a compaction deepens the next cut) and the events of each layer run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..budget import Budget, PressureState
from ..events import (
    Alert,
    CompactionFinished,
    CompactionStarted,
    ContextStatus,
    EventBus,
    LayerName,
    OptionalLayer,
    Trigger,
)
from ..exceptions import BudgetExceeded, MessageError
from ..figures import measure
from ..instructions import UserInstructions
from ..ledger import Ledger
from ..messages import INSTRUCTION_ROLES, Message
from ..notes import Notes
from ..snapshots import SnapshotStore
from ..summarize.base import SummaryReply, SummaryRequest
from ..tokens.accountant import TokenAccountant
from ..workingset import WorkingSet
from . import clear, context_block, evict, reactive, shrink
from .ahead import PrepareAhead
from .base import Change, Plan, Room
from .book import RoundBook
from .bookround import BookRound
from .breaker import CircuitBreaker
from .config import CASCADE_LAYERS, CompactionConfig
from .state import Counters, export_state, import_state, saved_view
from .summarize import SummaryLayer
from .viewstatus import StatusReading, ViewStatus

__all__ = ["ContextEngine", "StatusReading", "ViewStatus"]

logger = logging.getLogger(__name__)


class ContextEngine:
    """The round book and layers of one session, run in cascade order; no I/O besides snapshot writes."""

    def __init__(
        self,
        *,
        session_id: str,
        accountant: TokenAccountant,
        budget: Budget | Callable[[], Budget],
        config: CompactionConfig,
        snapshots: SnapshotStore,
        events: EventBus,
        held: Callable[[], int] | None = None,
    ) -> None:
        self.session_id = session_id
        # tokens of the whole budget that ``budget`` holds back for recalled memories (see `Room.low_target`)
        self._held = held
        self.accountant = accountant
        # a session passes a function: its budget follows calibration and the window the server serves
        self._budget_source = budget if callable(budget) else None
        self._budget = budget if isinstance(budget, Budget) else budget()
        self.config = config
        self.events = events
        self.book = RoundBook(
            session_id=session_id,
            accountant=accountant,
            snapshots=snapshots,
            events=events,
            room=Room.of(self._budget.effective, config),
            ledger_max_entries=config.ledger_max_entries,
            max_facts=config.cleared_max_facts,
            scan_chars=config.scan_chars,
        )
        self.summary_layer = SummaryLayer(session_id=session_id, events=events, config=config)
        self.ahead = PrepareAhead()
        self.counters = Counters()
        self.hook_errors = 0
        self._pre_ratio = 0.0
        """Utilization the last compaction started from (it decides which gates are open)."""

    @property
    def budget(self) -> Budget:
        """The budget the view is held to, in the counter's tokens (see `Budget.scale`)."""
        source = self._budget_source
        return self._budget if source is None else source()

    # --- the session's view of the book -----------------------------------------------------
    @property
    def transcript(self) -> list[Message]:
        return self.book.transcript

    @property
    def rounds(self) -> list[BookRound]:
        return self.book.rounds

    @property
    def ledger(self) -> Ledger:
        return self.book.ledger

    @property
    def instructions(self) -> UserInstructions:
        """The user's instructions, with every round added so far read (see `contextwarden.instructions`)."""
        return self.book.read_instructions()

    @property
    def instructions_read(self) -> UserInstructions:
        """The user's instructions as last read (by a compaction, or a long turn: see `ahead`); nothing is read now."""
        return self.book.instructions

    @property
    def notes(self) -> Notes:
        return self.book.notes

    @property
    def working_set(self) -> WorkingSet:
        return self.book.working_set

    @property
    def summary(self) -> str | None:
        return self.book.summary

    @property
    def summary_span(self) -> tuple[str, str] | None:
        return self.book.summary_span

    @property
    def view_generation(self) -> int:
        return self.book.view_generation

    @property
    def turn(self) -> int:
        return self.counters.turn

    @property
    def compactions(self) -> dict[str, int]:
        return self.counters.compactions

    @property
    def breaker(self) -> CircuitBreaker:
        return self.summary_layer.breaker

    def use_summarizer(self, summarizer: object | None) -> None:
        """Let ``summarizer`` drive the summarize layer (None: the layer does not run)."""
        self.summary_layer.use(summarizer)

    def add(self, messages: Sequence[Message]) -> int:
        """Append ``messages`` to the transcript; returns how many were new (ids already seen are skipped).

        All messages are checked before any is added: on error the session is unchanged. A tool
        call whose result does not come before the next other message is abandoned: the view shows
        a marked stand-in result for it until the real one arrives (see `book`).

        Raises:
            MessageError: a malformed message (index, field and fix named), or an id already used
                by a different message.
            ToolPairError: a result for an unknown call, a second result, one call id twice in a message.
        """
        fresh = self.book.check(messages)
        self.book.commit(fresh)
        return len(fresh)

    def check(self, messages: Sequence[Message]) -> list[Message]:
        """The messages `commit` would add (see `RoundBook.check`); changes nothing.

        Raises:
            BudgetExceeded: system and developer messages (never compacted) that alone would pass
                the budget: no view could ever be served, so they are refused before anything is added.
        """
        fresh = self.book.check(messages)
        instructions = [m for m in fresh if m.role in INSTRUCTION_ROLES]
        if instructions:
            count = self.accountant.count_message
            needed = self.book.system_total + sum(count(m) for m in instructions)
            effective = self.budget.effective
            if needed > effective:
                raise self._budget_error(effective, system=needed, what="with these system and developer messages")
        return fresh

    def commit(self, fresh: Sequence[Message]) -> None:
        """Append messages that `check` returned (a store write may sit between the two)."""
        self.book.commit(fresh)

    def has_open_calls(self) -> bool:
        """True while a tool call waits for its result (nothing may be inserted before it)."""
        return self.book.has_open_calls()

    def rebuild_snapshot(self, snapshot_id: str) -> bytes | None:
        """A round's snapshot made again from the transcript (read-back when the store lost it)."""
        return self.book.rebuild_snapshot(snapshot_id)

    def pinned_copy(self, message_id: str) -> None:
        """Pin an existing transcript message (it will never be evicted)."""
        if not self.book.pin(message_id):
            raise MessageError(f"no message {message_id!r} in session {self.session_id!r}", field="message_id")

    # --- preparing ------------------------------------------------------------------------
    def needs_compaction(self) -> bool:
        """True when the next `prepare_flow` will run the cascade (the view passed high water)."""
        return self.book.rendered_total() > self.config.high_water * self.budget.effective

    def prepare_flow(
        self, *, plan: Plan | None = None
    ) -> Generator[SummaryRequest, SummaryReply, tuple[list[Message], StatusReading]]:
        """Compute the view for the next call; yields a summary request when the summarize layer runs.

        ``plan``: compact now with this plan (the reactive layer's); by default only when the
        view passed high water, to the low-water mark (deeper after thrashing).
        """
        self.counters.turn += 1
        book, config = self.book, self.config
        if book.dirty:
            book.rebuild()
        layer: LayerName | None = None
        effective = self.budget.effective
        high = config.high_water * effective
        # a compaction the cascade table held above high water is retried only once another gate
        # opens (or the view would not fit), not on every turn
        refilled = book.view_tokens > max(high, self.counters.gate_floor * effective)
        if plan is not None or refilled:
            if plan is None:
                self._check_thrashing()
                plan = self._plan()
            held = self.held()
            target = Room.of(effective, config, held=held).low_target(plan.low_water)
            layer = yield from self._compact(plan, target=target, held=held)
            self.counters.gate_floor = self._closed_gate() if book.view_tokens > high else 0.0
            self.counters.last_compaction_reply = book.replies
        else:
            self.ahead.track(book, config)
        return self._turn_result(layer)

    def prepare_appended(self) -> tuple[list[Message], StatusReading] | None:
        """The view when it only appended since the last call; None when `prepare_flow` must run.

        The common turn, without the generator `prepare_flow` needs for summary requests.
        """
        book = self.book
        if book.dirty:
            return None
        budget = self.budget
        effective = budget.effective
        high = self.config.high_water * effective
        if book.view_tokens > max(high, self.counters.gate_floor * effective):
            return None
        self.counters.turn += 1
        self.ahead.track(book, self.config)
        return self._turn_result(None, budget)

    def reactive_flow(self) -> Generator[SummaryRequest, SummaryReply, tuple[list[Message], StatusReading]]:
        """Emergency compaction after a provider context-length error (see `reactive`)."""
        self.counters.turn -= 1  # the failed call does not count as a turn
        return (yield from self.prepare_flow(plan=reactive.plan(self.config)))

    def _plan(self) -> Plan:
        """The plan of a high-water compaction: to low water, deeper (and keeping fewer rounds) after thrashing."""
        config, deepen = self.config, self.counters.deepen
        steps = round(deepen / config.thrash_deepen_by) if config.thrash_deepen_by else 0
        return Plan(
            low_water=max(config.min_low_water, config.low_water - deepen),
            keep_rounds=max(1, config.keep_recent_rounds - steps),
        )

    def _turn_result(
        self, layer: LayerName | None, budget: Budget | None = None
    ) -> tuple[list[Message], StatusReading]:
        self.ahead.turn_done(self.book)
        reading = self.read_status(layer, budget)
        if self.events.status_listening:
            errors = self.events.subscriber_errors
            self.events.emit(self._status_event(reading.status()))
            if self.events.subscriber_errors != errors:  # report this prepare's own subscriber failures
                reading.report_subscriber_errors(self.events.subscriber_errors)
        return list(self.book.view), reading

    def used(self) -> int:
        """Tokens of the view now, as the counter counts them (`ViewStatus.used_raw`), without a status."""
        return self.book.rendered_total()

    def status(self, layer: LayerName | None = None) -> ViewStatus:
        """Accounting of the current view (constant time: totals are kept as messages arrive)."""
        return self.read_status(layer).status()

    def read_status(self, layer: LayerName | None = None, budget: Budget | None = None) -> StatusReading:
        """What `status` is computed from, read now (a few attribute loads; see `StatusReading`).

        ``budget``: the budget this turn already read (`budget` asks the session each time).
        """
        book, counters, config = self.book, self.counters, self.config
        return StatusReading(
            budget=self.budget if budget is None else budget,
            # the running totals, not the cached list: right even before the first prepare
            used=book.rendered_total(),
            layer=layer,
            system=book.system_total,
            context=book.context_tokens,
            tool_results=book.tool_total,
            turn=counters.turn,
            compactions=counters.compactions,  # replaced, never changed in place: this turn's stays
            transcript_messages=len(book.transcript),
            view_messages=len(book.view),
            breaker=self.breaker.state,
            subscriber_errors=self.events.subscriber_errors,
            hook_errors=self.hook_errors,
            served_window=self.accountant.calibration.served_window,
            high_water=config.high_water,
            growth=self.ahead.turn_tokens,
            floor=book.room.floor,
            behind=book.room.tight or counters.thrash_streak > 0,
            mode=config.pressure_states,
            low_water=config.low_water,
            last_layer=counters.last_layer,
        )

    def _pressure(self, *, used: int) -> PressureState:
        """The pressure state the view would have at ``used`` tokens (during a compaction)."""
        reading = self.read_status()
        reading.used = used
        return reading.state()

    def _status_event(self, s: ViewStatus) -> ContextStatus:
        state: Any = s.state
        return ContextStatus(
            session_id=self.session_id,
            used=s.used,
            budget=s.budget,
            ratio=s.ratio,
            state=state,
            layer=s.layer,
            last_layer=s.last_layer,
            rule=s.rule.mode if s.rule is not None else None,
            turn=s.turn,
        )

    def _check_thrashing(self) -> None:
        config, counters = self.config, self.counters
        last = counters.last_compaction_reply
        if last is not None and self.book.replies - last <= config.thrash_window_turns:
            counters.thrash_streak += 1
            if counters.thrash_streak >= config.thrash_repeats:
                counters.deepen = min(counters.deepen + config.thrash_deepen_by, config.low_water)
                counters.thrash_streak = 0
                self.events.emit(
                    Alert(
                        session_id=self.session_id,
                        alert="thrashing",
                        detail=(
                            f"view refilled to high water within {config.thrash_window_turns} replies of a "
                            f"compaction {config.thrash_repeats} times in a row; next compactions cut to "
                            f"{max(config.min_low_water, config.low_water - counters.deepen):.2f}"
                        ),
                    )
                )
        else:
            counters.thrash_streak = 0

    # --- the cascade ----------------------------------------------------------------------
    def held(self) -> int:
        """Tokens of the whole budget that `budget` holds back for recalled memories (0 without memory)."""
        return max(0, self._held()) if self._held is not None else 0

    def _compact(
        self, plan: Plan, *, target: int, held: int = 0
    ) -> Generator[SummaryRequest, SummaryReply, LayerName | None]:
        book, config, trigger = self.book, self.config, plan.trigger
        effective = self.budget.effective
        layer: LayerName | None = None
        protected = book.protected(plan.keep_rounds)
        room = book.room
        book.room = Room.of(
            effective,
            config,
            tight=room.tight,
            floor=room.floor,
            work_need=room.work_need,
            user_need=room.user_need,
            held=held,
        )
        self._pre_ratio = book.total() / effective if effective else 1.0
        hard = book.protected(0)
        floor = sum(book.rounds[o].view_tokens for o in hard) + self.accountant.framing.reply_priming
        tight = floor + min(book.room.ledger_cap, effective // 10) > target
        book.room = Room.of(
            effective,
            config,
            tight=tight,
            floor=floor,
            work_need=book.room.work_need,
            user_need=book.room.user_need,
            held=held,
        )
        # a tight budget or a deeper cut (thrashing, reactive): the user's plain requests leave the
        # section to the ledger's denser lines; what they ruled, corrected and decided stays
        lean = tight or target < book.room.low_target(config.low_water) - 1
        book.room = replace(book.room, work_need=context_block.working_set_need(book), lean=lean)
        book.room = replace(book.room, user_need=context_block.instructions_need(book))
        if "clear" in config.layers and self._open("clear", trigger) and book.total() > target:
            layer = self._run("clear", trigger, target, lambda: clear.run(book, target, config, protected=protected))
        if "evict" in config.layers and self._open("evict", trigger) and book.total() > target:
            layer = self._run("evict", trigger, target, lambda: evict.run(book, target, config, protected=protected))
        if not self.summary_layer.merge_ready(book):
            self.hook_errors += 1
        if "summarize" in config.layers and self._open("summarize", trigger) and self.summary_layer.due(book, config):
            started = self._started("summarize", trigger, target)
            change = yield from self.summary_layer.run(book, target, config)
            if change.items:
                layer = "summarize"
                self._count("summarize")
            self._finished(change, trigger, started)
        context_block.render(book, config, target=target)
        if "evict" in config.layers and self._open("evict", trigger):
            # The context block is only estimated while evicting; once rendered it may leave the view
            # above the target: evict a little more and render again (it converges in a step or two).
            for _ in range(3):
                if book.rendered_total() <= target or not evict.run(book, target, config, protected=protected).items:
                    break
                context_block.render(book, config, target=target)
        if book.total() > effective:  # under a tight budget this includes the context block's quarter
            layer = self._run("shrink", trigger, effective, lambda: shrink.run(book, effective, config))
            context_block.render(book, config, target=target)
        book.rebuild()
        if book.view_tokens > effective:
            raise self._budget_error(effective)
        return layer

    def _open(self, layer: OptionalLayer, trigger: Trigger) -> bool:
        """Whether the cascade table lets ``layer`` run in this compaction.

        By the utilization the compaction started from; a view that would not fit and an
        emergency compaction may use every layer.
        """
        if reactive.opens_every_gate(trigger) or self._pre_ratio > 1.0:
            return True
        return self._pre_ratio >= self.config.gate(layer)

    def _closed_gate(self) -> float:
        """The lowest utilization at which a layer the last compaction could not use opens (1.0 at most)."""
        gates = [self.config.gate(layer) for layer in CASCADE_LAYERS if layer in self.config.layers]
        return min([g for g in gates if g > self._pre_ratio] + [1.0])

    def _run(self, layer: LayerName, trigger: Trigger, target: int, run: Callable[[], Change]) -> LayerName | None:
        """Run one layer with its events; its name when it changed something, else None."""
        started = self._started(layer, trigger, target)
        change = run()
        self._finished(change, trigger, started)
        if change.items:
            self._count(layer)
            return layer
        return None

    def _started(self, layer: LayerName, trigger: Trigger, target: int) -> float:
        before = self.book.total()
        started = time.perf_counter()
        self.events.emit(
            CompactionStarted(
                session_id=self.session_id, layer=layer, trigger=trigger, tokens_before=before, target=target
            )
        )
        return started

    def _finished(self, change: Change, trigger: Trigger, started: float) -> None:
        after = change.tokens_after
        duration = (time.perf_counter() - started) * 1000
        if self.events.listening:
            used, effective, ratio = measure(self.budget, after)
            self.events.emit(
                ContextStatus(
                    session_id=self.session_id,
                    used=used,
                    budget=effective,
                    ratio=ratio,
                    state=self._pressure(used=after),
                    layer=change.layer,
                    last_layer=change.layer if change.items else self.counters.last_layer,
                    rule=self.config.pressure_states,
                )
            )
        self.events.emit(
            CompactionFinished(
                session_id=self.session_id,
                layer=change.layer,
                trigger=trigger,
                tokens_before=change.tokens_before,
                tokens_after=after,
                duration_ms=round(duration, 3),
                items=change.items,
            )
        )
        logger.info(
            "compaction session=%s layer=%s trigger=%s tokens %d->%d items=%d in %.2f ms",
            self.session_id,
            change.layer,
            trigger,
            change.tokens_before,
            after,
            change.items,
            duration,
        )

    def _count(self, layer: LayerName) -> None:
        # a new mapping, not an update in place: readings of earlier turns hold the old one
        compactions = self.counters.compactions
        self.counters.compactions = {**compactions, layer: compactions.get(layer, 0) + 1}
        self.counters.last_layer = layer

    def _budget_error(self, effective: int, *, system: int | None = None, what: str = "") -> BudgetExceeded:
        """The protected part of the view does not fit ``effective``.

        ``system``: the system part's tokens with messages refused on `add` (the view as it would be
        with them; by default the view as it is); ``what`` names those messages.
        """
        breakdown = self.status().breakdown
        if system is None:
            used = self.book.view_tokens
        else:
            breakdown = {**breakdown, "system": system}
            used = sum(breakdown.values())
        budget = self.budget
        scale = f", counted tokens at calibration scale {budget.scale:g}" if budget.scale != 1 else ""
        part = f" {what}" if what else ""
        return BudgetExceeded(
            f"session {self.session_id!r}: the protected part of the view needs {used} tokens{part} "
            f"but the effective budget is {effective} (window {budget.window} − reserved output "
            f"{budget.reserved_output} − tool schemas {budget.tool_schemas}{scale}); breakdown {breakdown}. "
            "Raise the window, lower the reserved output, shorten the system prompt or unpin messages.",
            budget=effective,
            used=used,
            breakdown=breakdown,
        )

    # --- persistence ------------------------------------------------------------------------
    def export_state(self) -> dict[str, Any]:
        """The view state as JSON (see `state`)."""
        breaker = self.breaker
        counters = replace(
            self.counters, breaker_failures=breaker.failures, breaker_total_failures=breaker.total_failures
        )
        return export_state(self.book, counters, self.accountant.calibration)

    def import_state(self, state: Mapping[str, Any]) -> None:
        """Restore what `export_state` saved onto a transcript that was replayed with `add` (see `state`)."""
        counters, self.accountant.calibration = import_state(self.book, state, self.config, self.accountant.calibration)
        self.breaker.failures = counters.breaker_failures
        self.breaker.total_failures = counters.breaker_total_failures
        self.counters = replace(counters, breaker_failures=0, breaker_total_failures=0)  # the breaker keeps them
        book = self.book
        room = book.room
        book.room = Room.of(
            self.budget.effective,
            self.config,
            tight=room.tight,
            floor=room.floor,
            work_need=room.work_need,
            user_need=room.user_need,
            held=self.held(),
        )
        if not saved_view(state):  # saved by a version that did not keep the context block
            context_block.render(book, self.config)
        book.rebuild()

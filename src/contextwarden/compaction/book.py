"""The round book: the transcript, its rounds, running totals, and what each round shows.

Every message is counted once when it arrives and joins a round (`contextwarden.rounds`: the
same kinds and rule as `group_rounds`). A round is in one of three states: ``full`` (its
transcript messages are shown), ``cleared`` (stand-ins are shown instead, see `shown`) or
``evicted`` (not shown; the progress ledger stands in for it). Totals over what the view shows
are kept as rounds change state, so accounting never walks the history.

The layers (`clear`, `evict`, `summarize`, `shrink`) read the book and change round states only
through `show` and `evict`; the context block (`context_block`) renders the book's records
(ledger, notes, running summary) into the first message; the orchestrator (`engine`) decides
when layers run. The cached view list lives here too: between compactions a turn only appends
to it, so the prefix a provider cached stays byte-identical.

What may enter (`check`): see `intake` (ids are idempotent, tool results must answer a
waiting or abandoned call; an abandoned call shows a stand-in result until its real one arrives).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from .._json import BadJSON, has_lone_surrogate, loads
from ..events import EventBus, SnapshotWritten
from ..instructions import UserInstructions
from ..keyinfo import is_error_line, key_lines, salient_facts
from ..ledger import Ledger
from ..ledger_entries import LedgerEntry, entry_for_round, request_facts
from ..messages import INSTRUCTION_ROLES, Message
from ..notes import Notes
from ..rounds import is_reply, opening_kind
from ..snapshots import LazySnapshotStore, SnapshotStore, encode_snapshot, make_snapshot_id
from ..tokens.accountant import TokenAccountant
from ..toolpairs import abandoned_result
from ..workingset import WorkingSet
from .base import Room
from .bookround import BookRound
from .intake import fresh_messages

__all__ = ["RoundBook"]

SnapshotReason = Literal["cleared", "evicted", "offloaded", "summarized"]


class RoundBook:
    """Transcript, rounds, running totals and records of one session; no I/O besides snapshot writes."""

    def __init__(
        self,
        *,
        session_id: str,
        accountant: TokenAccountant,
        snapshots: SnapshotStore,
        events: EventBus,
        room: Room,
        ledger_max_entries: int = 200,
        max_facts: int = 12,
        scan_chars: int = 600,
    ) -> None:
        self.session_id = session_id
        self.accountant = accountant
        self.snapshots = snapshots
        self.lazy_snapshots = snapshots if isinstance(snapshots, LazySnapshotStore) else None
        """The same store when it can make documents on first read (checked once: the check is slow)."""
        self.events = events
        self.room = room
        self.transcript: list[Message] = []
        self.counts: list[int] = []
        self.rounds: list[BookRound] = []
        self.system_rounds: list[BookRound] = []
        self.last_user_round: BookRound | None = None
        self.last_assistant_index = -1
        """Index of the newest assistant message (outputs before it have been used)."""
        self._ids: dict[str, int] = {}
        """Transcript index by message id."""
        self._open_calls: dict[str, BookRound] = {}
        """Calls without a result yet, by call id (ids may be reused once answered, as real traces do)."""
        self._abandoned: dict[str, BookRound] = {}
        """Calls a later message abandoned before their result came, by call id."""
        self.replies = 0
        """Assistant messages in the transcript: the turns thrashing is measured in (derived on replay)."""
        self._answered: set[str] = set()
        self._live_from = 0
        """Every round before this ordinal is evicted or a system round: loops start here."""
        # running totals over rounds in view, so accounting never walks the history
        self.rounds_total = 0
        self.tool_total = 0
        self.system_total = 0
        self.n_evicted = 0
        self.max_facts = max_facts
        """Identifiers a cleared output's stand-in keeps (three times as many are found per output)."""
        self.scan_chars = scan_chars
        """Characters of an output scanned for identifiers (a cost bound)."""
        self._msg_facts: dict[int, list[str]] = {}
        self._msg_key_lines: dict[int, list[str]] = {}
        # records the context block shows
        self.ledger = Ledger(max_entries=ledger_max_entries)
        self.notes = Notes()
        """Structured notes (decisions, finished subtasks, lessons, open items), shown in the context block."""
        self.working_set = WorkingSet()
        """Files, commands, errors and symbols the agent acted on, ranked; shown in the context block."""
        self.instructions = UserInstructions()
        """The user's own words (rules, corrections, values, the task), shown first in the context block."""
        self.summary: str | None = None
        self.summary_span: tuple[str, str] | None = None
        self.summarized_upto = -1
        """Ordinal of the newest round folded into the summary."""
        self.context: Message | None = None
        """The rendered context block (first message after the system prompt), or None."""
        self.context_tokens = 0
        self.evicted_at_render = 0
        # the cached view
        self.view: list[Message] = []
        self.view_tokens = 0
        self.dirty = True
        """The view must be rebuilt from the round states before it is served."""
        self.view_generation = 0
        """Bumped whenever the view is re-rendered (not when it only appends)."""

    # --- adding ---------------------------------------------------------------------------
    def check(self, messages: Sequence[Message]) -> list[Message]:
        """The messages `commit` would add (new ids only, in order), after checking all of them; changes nothing.

        Raises:
            MessageError: a malformed message, or an id already used by a different message.
            ToolPairError: a result for an unknown call, a second result for a call, or a message
                that makes two calls with the same id.
        """
        return fresh_messages(
            messages,
            transcript=self.transcript,
            ids=self._ids,
            open_calls=self._open_calls.keys(),
            abandoned=self._abandoned.keys(),
            answered=self._answered,
            session_id=self.session_id,
        )

    def commit(self, fresh: Sequence[Message]) -> None:
        """Append messages that `check` returned (a store write may sit between the two)."""
        for m in fresh:
            self._append(m)

    def has_open_calls(self) -> bool:
        """True while a tool call waits for its result (nothing may be inserted before it)."""
        return bool(self._open_calls)

    def _append(self, m: Message) -> None:
        index = len(self.transcript)
        role = m.role
        # only instructions recur (the same system prompt in many sessions): the rest is counted
        # without hashing it for the shared cache
        n = self.accountant.count_message(m, shared=role in INSTRUCTION_ROLES)
        self.transcript.append(m)
        self.counts.append(n)
        self._ids[m.message_id] = index
        if role == "tool":
            r = self._append_result(m, index, n)
        else:
            if role == "assistant":
                self.last_assistant_index = index
                self.replies += 1
            if self._open_calls:
                self._abandon_open_calls()
            last = self.rounds[-1] if self.rounds else None
            if last is not None and last is self.last_user_round and last.kind == "message" and is_reply(m):
                self._detach(last)
                last.kind = "exchange"
                last.add_index(index)
                last.tokens += n
                if last.shown is not None:
                    last.shown.append(m)
                    last.shown_tokens += n
                self._attach(last)
                if last.state == "evicted":
                    self.dirty = True
                r = last
            else:
                r = self._open_round(m, index, n)
        if m.pinned:
            r.pinned = True
        if not self.dirty:
            self.view.append(m)
            self.view_tokens += n

    def _open_round(self, m: Message, index: int, n: int) -> BookRound:
        """A new round that ``m`` begins: full, shown, and without tool tokens yet."""
        kind = opening_kind(m)
        r = BookRound(index, index + 1, kind, ordinal=len(self.rounds), tokens=n)
        if kind == "tool-call":
            r.call_ids = r.pending = tuple(dict.fromkeys(c.call_id for c in m.tool_calls))
            for cid in r.call_ids:
                self._open_calls[cid] = r
                self._answered.discard(cid)
                self._abandoned.pop(cid, None)  # the id belongs to the newer call now
        elif kind == "system":
            self.system_rounds.append(r)
            self.system_total += n
        elif m.role == "user":
            self.last_user_round = r
        self.rounds.append(r)
        self.rounds_total += n  # what `_attach` adds for a round in this state
        return r

    def _append_result(self, m: Message, index: int, n: int) -> BookRound:
        """A tool result joins the round of its call (a late one replaces its stand-in there)."""
        cid = m.tool_call_id or ""
        r = self._open_calls.pop(cid, None) or self._take_late_result(cid)
        r.add_index(index)
        if r.state == "full" and r.shown is None:  # the common case: the result adds to the running totals
            r.tokens += n
            r.tool_tokens += n
            self.rounds_total += n
            self.tool_total += n
        else:
            self._detach(r)
            r.tokens += n
            r.tool_tokens += n
            if r.shown is not None:  # a late result for a shortened round is shown in full
                r.shown.append(m)
                r.shown_tokens += n
                r.shown_tool_tokens += n
            self._attach(r)
        pending = r.pending
        # results mostly come in the order of their calls (and a round's call ids are distinct)
        r.pending = pending[1:] if pending and pending[0] == cid else tuple(c for c in pending if c != cid)
        self._answered.add(cid)
        if r is not self.rounds[-1] or r.state != "full":
            self.dirty = True  # a late result must be rendered next to its call
        return r

    def _abandon_open_calls(self) -> None:
        """A message other than a tool result arrived: every call still waiting is abandoned.

        Its round shows a stand-in result after its other results (appended to the cached view when
        the view only grows, which it does: waiting calls always belong to the newest round).
        """
        for cid, r in self._open_calls.items():
            call_message = self.transcript[r.start]
            call = next(c for c in call_message.tool_calls if c.call_id == cid)
            stand_in = abandoned_result(call_message, call)
            n = self.accountant.count_message(stand_in)
            self._detach(r)
            r.pending = tuple(c for c in r.pending if c != cid)
            r.fillers = [*(r.fillers or ()), stand_in]
            r.filler_tokens += n
            self._attach(r)
            self._abandoned[cid] = r
            if not self.dirty and r.state != "evicted":
                self.view.append(stand_in)
                self.view_tokens += n
        self._open_calls.clear()

    def _take_late_result(self, call_id: str) -> BookRound:
        """The round of an abandoned call whose result arrived after all, its stand-in removed.

        What was prepared from the round while the result was missing (stand-ins, ledger entry,
        facts) is made again from the transcript when next needed; the view is rendered again.
        """
        r = self._abandoned.pop(call_id)
        self._detach(r)
        fillers = r.fillers or []
        stand_in = next(f for f in fillers if f.tool_call_id == call_id)
        fillers.remove(stand_in)
        r.filler_tokens -= self.accountant.count_message(stand_in)
        r.fillers = fillers or None
        r.prepared, r.ready, r.entry, r.facts = False, None, None, None
        self._attach(r)
        self.dirty = True
        return r

    # --- round states ---------------------------------------------------------------------
    def _detach(self, r: BookRound) -> None:
        self.rounds_total -= r.view_tokens
        self.tool_total -= r.view_tool_tokens
        if r.kind == "system":
            self.system_total -= r.view_tokens
        if r.state == "evicted":
            self.n_evicted -= 1

    def _attach(self, r: BookRound) -> None:
        self.rounds_total += r.view_tokens
        self.tool_total += r.view_tool_tokens
        if r.kind == "system":
            self.system_total += r.view_tokens
        if r.state == "evicted":
            self.n_evicted += 1

    def show(self, r: BookRound, shown: list[Message]) -> None:
        """Show ``shown`` (stand-ins) instead of the round's messages; a full round becomes cleared."""
        self._detach(r)
        counts = [self.accountant.count_message(m) for m in shown]
        r.shown = shown
        r.shown_tokens = sum(counts)
        r.shown_tool_tokens = sum(c for m, c in zip(shown, counts, strict=True) if m.role == "tool")
        if r.state == "full":
            r.state = "cleared"
        self._attach(r)
        self.dirty = True

    def evict(self, r: BookRound, *, record: bool = True) -> None:
        """Take the round out of the view; ``record``: list it in the ledger first (once)."""
        if r.state == "evicted":
            return
        if record and r.ledger_step is None and r.kind != "system":
            self.record(r)
        self._detach(r)
        r.state = "evicted"
        self._attach(r)
        self.dirty = True
        # the outputs' facts served the stand-ins and the ledger entry; a round brought back finds
        # them again from the transcript (a long session would otherwise keep every output's facts)
        for i in r.indices:
            self._msg_facts.pop(i, None)
            self._msg_key_lines.pop(i, None)

    def restore(self, r: BookRound) -> None:
        """Bring an evicted round back into the view (a pinned message is in every view)."""
        if r.state != "evicted":
            return
        self._detach(r)
        r.state = "cleared" if r.shown is not None else "full"
        self._attach(r)
        self._live_from = min(self._live_from, r.ordinal)
        self.dirty = True

    def pin(self, message_id: str) -> bool:
        """Pin transcript message ``message_id`` and its round (brought back if evicted); False: no such message."""
        for i, m in enumerate(self.transcript):
            if m.message_id == message_id:
                self.transcript[i] = replace(m, pinned=True)
                for r in self.rounds:
                    if i in r.indices:
                        r.pinned = True
                        self.restore(r)
                self.dirty = True
                return True
        return False

    def live(self) -> list[BookRound]:
        """Rounds from the first one still in view (system rounds included), oldest first."""
        rounds, i = self.rounds, self._live_from
        while i < len(rounds) and (rounds[i].state == "evicted" or rounds[i].kind == "system"):
            i += 1
        self._live_from = i
        return rounds[i:]

    def conversation(self) -> list[BookRound]:
        """Conversation rounds still in view (or evicted after the first live one), oldest first."""
        return [r for r in self.live() if r.kind != "system"]

    def protected(self, keep_rounds: int) -> set[int]:
        """Ordinals of rounds no layer may touch: system, pinned, current request, in flight, newest."""
        keep: set[int] = {r.ordinal for r in self.system_rounds}
        conversation = self.conversation()
        for r in conversation:
            if r.pinned or r.pending:
                keep.add(r.ordinal)
        if self.last_user_round is not None:
            keep.add(self.last_user_round.ordinal)
        keep.update(r.ordinal for r in conversation[-keep_rounds:] if keep_rounds > 0)
        if conversation:
            keep.add(conversation[-1].ordinal)
        return keep

    def read_instructions(self) -> UserInstructions:
        """The user's instructions, with every round added so far read (each message once, see `ahead`)."""
        rounds, transcript = self.rounds, self.transcript
        self.instructions.catch_up(len(rounds), lambda step: transcript[rounds[step].start])
        return self.instructions

    def messages(self, r: BookRound) -> list[Message]:
        """The round's transcript messages."""
        return [self.transcript[i] for i in r.indices]

    # --- totals ---------------------------------------------------------------------------
    def rendered_total(self) -> int:
        """Tokens of the view with the context block as last rendered."""
        return self.rounds_total + self.context_tokens + self.accountant.framing.reply_priming

    def total(self) -> int:
        """Tokens of the view as it would be rendered now (context block at its expected size)."""
        return self.rounds_total + self.context_reserve() + self.accountant.framing.reply_priming

    def context_reserve(self) -> int:
        """Expected size of the context block: as last rendered, plus a line per newly evicted round.

        Under a tight budget (the low-water target cannot be reached) the block is what remembers
        the evicted rounds, so it is given a quarter of the budget before the newest rounds are.
        """
        if not self.n_evicted and self.summary is None:
            return self.context_tokens
        room = self.room
        grown = self.n_evicted - self.evicted_at_render
        base = self.context_tokens or 48  # the header of a first block
        sections = room.work_need + room.user_need
        expected = min(max(room.ledger_cap + sections, self.context_tokens), base + 24 * max(0, grown))
        if room.tight:
            expected = max(expected, min(room.ledger_cap, room.effective // 4))
        # the user's words and the working set are kept ahead of the newest rounds' bulk: a large
        # recent output shrinks first
        return max(expected, sections)

    # --- facts ----------------------------------------------------------------------------
    def message_facts(self, index: int) -> list[str]:
        """Identifiers of output ``index`` (error lines first), computed once."""
        facts = self._msg_facts.get(index)
        if facts is None:
            m = self.transcript[index]
            # error lines travel with the facts of any output (a failing step need not be flagged)
            found = self.key_lines(index)
            facts = found[:2] if m.is_error else [line for line in found if is_error_line(line)][:2]
            facts += salient_facts(m.text, limit=self.max_facts * 3, scan_chars=self.scan_chars)
            facts += _name_facts(m.text)
            self._msg_facts[index] = facts
        return facts

    def key_lines(self, index: int) -> list[str]:
        """The first key lines of output ``index`` (one scan serves its facts and its stand-in)."""
        found = self._msg_key_lines.get(index)
        if found is None:
            found = self._msg_key_lines[index] = key_lines(self.transcript[index].text, limit=4, max_line_chars=160)
        return found

    def facts(self, r: BookRound) -> tuple[str, ...]:
        """Identifiers of the round (tool outputs; a long request's text past its first 200 characters)."""
        if r.facts is None:
            facts: list[str] = []
            for i in r.indices:
                m = self.transcript[i]
                if m.role == "tool":
                    facts.extend(self.message_facts(i))
                elif m.role == "user" and i == r.indices[0]:
                    facts.extend(request_facts(m.text))
            r.facts = tuple(dict.fromkeys(facts))
        return r.facts

    # --- records: ledger and snapshots ------------------------------------------------------
    def record(self, r: BookRound) -> None:
        """Put the round in the progress ledger (once, when it first leaves the view)."""
        entry = r.entry if r.entry is not None else self.entry(r)
        if r.kind == "tool-call":
            self.snapshot(r, "evicted")
        if entry is not None:
            self.ledger.append(entry)
            r.ledger_step = entry.step
        r.entry = None

    def entry(self, r: BookRound) -> LedgerEntry | None:
        """The ledger entry that stands in for the round once it left the view."""
        snap = self.snapshot_id(r) if r.kind == "tool-call" else None
        return entry_for_round(self.messages(r), snapshot_id=snap, facts=self.facts(r), step=r.ordinal)

    def snapshot_id(self, r: BookRound) -> str:
        if r.snapshot_id is None:
            r.snapshot_id = make_snapshot_id(self.session_id, self.transcript[r.start].message_id)
        return r.snapshot_id

    def write_snapshot(self, r: BookRound) -> None:
        """Store the round's full messages under its snapshot id (once its results are all in)."""
        if not r.snapshot_written:
            msgs = self.messages(r)
            if self.lazy_snapshots is not None and not r.pending:  # in memory: encoded when first read
                make = functools.partial(encode_snapshot, "round", msgs)
                self.lazy_snapshots.put_snapshot_lazy(self.session_id, self.snapshot_id(r), make)
            else:
                self.snapshots.put_snapshot(self.session_id, self.snapshot_id(r), encode_snapshot("round", msgs))
            r.snapshot_written = not r.pending

    def snapshot(self, r: BookRound, reason: SnapshotReason) -> str:
        """Make sure the round's snapshot exists and report that compaction now points to it."""
        announced = r.snapshot_written
        self.write_snapshot(r)
        if not announced or reason != "evicted":
            self.events.emit(
                SnapshotWritten(
                    session_id=self.session_id,
                    snapshot_id=self.snapshot_id(r),
                    reason=reason,
                    message_ids=tuple(m.message_id for m in self.messages(r)),
                )
            )
        return self.snapshot_id(r)

    def rebuild_snapshot(self, snapshot_id: str) -> bytes | None:
        """A round's snapshot document made again from the transcript (which compaction never alters)."""
        for r in self.rounds:
            if r.kind == "tool-call" and self.snapshot_id(r) == snapshot_id:
                return encode_snapshot("round", self.messages(r))
        return None

    # --- the view -------------------------------------------------------------------------
    def evicted_span(self) -> tuple[str, str] | None:
        """First and last transcript message id that left the view."""
        rounds = self.rounds
        first = next((r for r in rounds if r.state == "evicted"), None)
        # newest first, and only as far back as needed: sessions hold thousands of rounds
        last = next((rounds[i] for i in range(len(rounds) - 1, -1, -1) if rounds[i].state == "evicted"), None)
        if first is None or last is None:
            return None
        return self.transcript[first.indices[0]].message_id, self.transcript[last.indices[-1]].message_id

    def rebuild(self) -> None:
        """Render the view list from the round states (after a compaction or a late tool result)."""
        head: list[Message] = []
        body: list[Message] = []
        kept_started = False
        tokens = self.accountant.framing.reply_priming
        live = self.live()
        start = live[0].ordinal if live else len(self.rounds)
        for r in [*(r for r in self.system_rounds if r.ordinal < start), *live]:
            if r.state == "evicted":
                continue
            msgs = r.shown if r.shown is not None else self.messages(r)
            if r.kind == "tool-call" and r.shown is None and len(r) > 1:
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
        if self.context is not None:
            view.append(self.context)
            tokens += self.context_tokens
        view.extend(body)
        self.view = view
        self.view_tokens = tokens
        self.dirty = False
        self.view_generation += 1


_NAMED = 8
"""Names a JSON output gives by its keys that its facts keep (labelled, see `_name_facts`)."""


def _name_facts(text: str) -> list[str]:
    """What a JSON output names by its keys (``"first_name": "Omar"``), labelled: ``first_name=Omar``.

    A person's or a place's name is a plain word that ranks below any id; its key says that it
    names someone, and the label keeps that (and ranks it with the ids) where the key data lists it.
    """
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "[{" or len(text) > 65536:
        return []
    try:
        doc = loads(text)
    except BadJSON:
        return []
    found: list[str] = []
    stack: list[object] = [doc]
    while stack and len(found) < _NAMED:
        node = stack.pop(0)
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, str) and (key == "name" or key.endswith("_name")) and 0 < len(value) <= 40:
                    if " " not in value and not has_lone_surrogate(value):
                        found.append(f"{key}={value}")
                elif isinstance(value, dict | list):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return list(dict.fromkeys(found))[:_NAMED]

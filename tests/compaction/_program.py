"""A session as a program for property tests: steps (user turns, tool rounds, prepares, overflows, notes,
pins), their strategies, and a runner that checks every view it prepares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio
from hypothesis import event, strategies as st

from contextwarden.compaction.config import EVICTION_POLICIES, CompactionConfig
from contextwarden.exceptions import BudgetExceeded
from contextwarden.keyinfo import extract_identifiers
from contextwarden.messages import Message, ThinkingPart, ToolCall
from contextwarden.session import PreparedView, Session
from contextwarden.summarize.base import SummaryRequest

from ._helpers import Recorder, book_totals_ok, check_view, make_text, protected_floor

WINDOWS = (2000, 3000, 6000, 12000, 32000)


@dataclass(frozen=True)
class Text:
    size: str
    seed: int
    chinese: bool

    def render(self, window: int, error: bool = False) -> str:
        chars = {
            "tiny": 4 + self.seed % 30,
            "small": 40 + self.seed % 500,
            "medium": 600 + self.seed % 2400,
            "large": 3000 + self.seed % 9000,
            # more tokens than the whole window, English (~4 chars/token) or Chinese (~1 token/char)
            "huge": window * (2 if self.chinese else 6),
        }[self.size]
        return make_text(chars, seed=self.seed, chinese=self.chinese, error=error)


def _size(n: int) -> str:
    return "tiny" if n < 6 else "small" if n < 12 else "medium" if n < 16 else "large" if n < 19 else "huge"


def texts(top: int = 19) -> st.SearchStrategy[Text]:
    """Sizes from tiny to larger than the window (``top`` 19 allows huge, 18 large, 15 medium...)."""
    return st.builds(
        Text, st.integers(0, top).map(_size), st.integers(0, 10**6), st.integers(0, 4).map(lambda n: n == 0)
    )


# requests and replies are mostly short (a huge pinned request makes every later prepare fail)
requests = st.one_of(texts(15), texts(15), texts(15), texts(19))


@dataclass(frozen=True)
class User:
    text: Text
    pinned: bool


@dataclass(frozen=True)
class Reply:
    text: Text
    thinking: bool = False


@dataclass(frozen=True)
class Tools:
    outputs: tuple[Text, ...]
    errors: tuple[bool, ...]
    reuse_ids: bool
    in_flight: int | None
    """Prepare after this many results arrived (None: no prepare while calls are in flight)."""


@dataclass(frozen=True)
class Developer:
    seed: int


@dataclass(frozen=True)
class Prepare:
    pass


@dataclass(frozen=True)
class Overflow:
    """The provider said the prompt was too long: on_context_overflow()."""


@dataclass(frozen=True)
class Note:
    """on_turn_end(usage, step=...): a ledger note and a calibration sample."""

    failed: bool


@dataclass(frozen=True)
class Pin:
    """Pin the k-th user message so far (modulo their number) with Session.pin()."""

    k: int


@st.composite
def tools_ops(draw: st.DrawFn) -> Tools:
    k = draw(st.integers(1, 3))
    outputs = tuple(draw(texts()) for _ in range(k))
    errors = tuple(draw(st.integers(0, 5)) == 0 for _ in range(k))
    in_flight = draw(st.one_of(st.none(), st.integers(0, k - 1)))
    return Tools(outputs=outputs, errors=errors, reuse_ids=draw(st.booleans()), in_flight=in_flight)


ops = st.lists(
    st.one_of(
        st.builds(User, requests, st.integers(0, 6).map(lambda n: n == 0)),
        st.builds(Reply, requests, st.booleans()),
        tools_ops(),
        tools_ops(),
        st.builds(Developer, st.integers(0, 100)),
        st.just(Prepare()),
        st.just(Prepare()),
        st.just(Overflow()),
        st.builds(Pin, st.integers(0, 50)),
        st.builds(Note, st.booleans()),
    ),
    min_size=6,
    max_size=50,
)


@st.composite
def configs(draw: st.DrawFn) -> CompactionConfig:
    overrides: dict[str, Any] = {
        "eviction_policy": draw(st.sampled_from(EVICTION_POLICIES)),
        "keep_recent_rounds": draw(st.integers(1, 4)),
        "clear_after_rounds": draw(st.integers(1, 6)),
        "tool_result_min_tokens": draw(st.sampled_from([50, 500, 10**6])),
    }
    overrides["progressive_line_after"] = overrides["clear_after_rounds"] + draw(st.integers(0, 20))
    if draw(st.booleans()):  # any cascade table: gates may hold a compaction above high water
        gate = st.sampled_from([0.5, 0.7, 0.8, 0.9, 0.95, 1.0, 1.5])
        overrides["cascade"] = {name: draw(gate) for name in ("clear", "evict", "summarize")}
    return CompactionConfig.profile(draw(st.sampled_from(["default", "seed"])), **overrides)


class EchoSummarizer:
    """A deterministic summarizer: the identifiers of the span, bounded."""

    def summarize(self, request: SummaryRequest) -> str:
        ids = extract_identifiers(" ".join(m.text[:2000] for m in request.messages), limit=20)
        previous = (request.previous or "")[:200]
        return f"Task so far ({len(request.messages)} messages). {previous} Ids: {', '.join(ids)}"


class AsyncEchoSummarizer:
    async def summarize(self, request: SummaryRequest) -> str:
        await anyio.sleep(0)
        return EchoSummarizer().summarize(request)


Step = list[Message] | None | Overflow | Pin | Note


def build_messages(program: list[Any], window: int) -> list[Step]:
    """The program as batches of messages to add; None stands for a prepare()."""
    batches: list[Step] = []
    counter = 0
    for op in program:
        if isinstance(op, Prepare):
            batches.append(None)
        elif isinstance(op, Overflow | Pin | Note):
            batches.append(op)
        elif isinstance(op, User):
            batches.append([Message.user(op.text.render(window), pinned=op.pinned)])
        elif isinstance(op, Reply):
            reply = Message.assistant(op.text.render(window))
            if op.thinking:
                reply = Message(role="assistant", parts=(ThinkingPart(text="Let me weigh the options."), *reply.parts))
            batches.append([reply])
        elif isinstance(op, Developer):
            batches.append([Message(role="developer", parts=Message.user(f"Note {op.seed}: be brief.").parts)])
        else:
            calls = []
            for j, out in enumerate(op.outputs):
                cid = f"call_{j}" if op.reuse_ids else f"call_u{counter}"
                counter += 1
                calls.append(ToolCall(call_id=cid, name="search", arguments=f'{{"q": "item {out.seed}", "n": {j}}}'))
            results = [
                Message.tool_result(c.call_id, out.render(window, error=err), name=c.name, is_error=err)
                for c, out, err in zip(calls, op.outputs, op.errors, strict=True)
            ]
            if op.in_flight is None:
                batches.append([Message.assistant("Looking it up.", tool_calls=calls), *results])
            else:
                batches.append([Message.assistant("", tool_calls=calls), *results[: op.in_flight]])
                batches.append(None)
                batches.append(results[op.in_flight :])
    batches.append(None)
    return batches


def run_program(s: Session, batches: list[Step]) -> list[PreparedView | BudgetExceeded]:
    rec = Recorder()
    s.subscribe(rec)
    added: list[Message] = []
    outcomes: list[PreparedView | BudgetExceeded] = []
    prev: PreparedView | None = None
    new: list[Message] = []
    for batch in batches:
        high = s.config.high_water * s.budget.effective  # reported usage calibrates the budget as it goes
        if isinstance(batch, list):
            s.add(batch)
            added.extend(batch)
            new.extend(batch)
            continue
        if isinstance(batch, Note):
            if prev is None:  # usage before any prepare: see test_regressions
                continue
            used = prev.status.used_raw
            s.on_turn_end(
                {"prompt_tokens": used + 7}, step="checked the records", status="failed" if batch.failed else "done"
            )
            continue
        if isinstance(batch, Pin):
            # only messages still in the view (pinning an evicted one: see test_regressions)
            shown = {m.message_id for m in prev.view} if prev is not None else set()
            users = [i for i, m in enumerate(added) if m.role == "user" and m.message_id in shown]
            if users:
                i = users[batch.k % len(users)]
                s.pin(added[i].message_id)
                pinned = s.transcript[i]
                assert pinned.message_id == added[i].message_id and pinned.parts == added[i].parts and pinned.pinned
                added[i] = pinned  # pin() swaps in a pinned copy; nothing else changes
                prev = None
            continue
        mark = rec.mark()
        try:
            if isinstance(batch, Overflow):
                pv = s.on_context_overflow(format="internal")
            else:
                pv = s.prepare(format="internal")
        except BudgetExceeded as exc:
            # the floor estimates stand-in sizes; allow 2% for that estimate
            floor = protected_floor(s)
            assert floor > s.budget.effective * 0.98, (
                f"BudgetExceeded although the protected set needs only {floor} of {s.budget.effective} tokens: {exc}"
            )
            assert exc.breakdown and exc.budget == s.budget.effective
            assert s.transcript == added
            outcomes.append(exc)
            event("budget exceeded")
            prev, new = None, []
            continue
        check_view(s, pv, added)
        book = s.engine.book
        assert book_totals_ok(book), "the running totals drifted from the rounds"
        assert sorted(i for r in book.rounds for i in r.indices) == list(range(len(added))), "rounds must partition"
        compacted = bool(rec.since(mark, "compaction.started"))
        assert len(rec.since(mark, "compaction.started")) == len(rec.since(mark, "compaction.finished"))
        if compacted:
            event(f"compacted: {pv.status.layer}")
        if isinstance(batch, Overflow):
            event("overflow")
            starts = rec.since(mark, "compaction.started")
            assert all(e.trigger == "reactive" for e in starts)
        elif prev is not None:
            before = prev.status.used_raw + sum(s.accountant.count_message(m) for m in new)
            if before <= high:
                assert not compacted, f"compaction ran at {before} tokens, below high water {high:.0f}"
                assert len(pv.view) == len(prev.view) + len(new)
                assert all(a is b for a, b in zip(pv.view, [*prev.view, *new], strict=True)), "view did not append"
            elif s.config.high_water == 1.0:
                assert compacted, f"no compaction although the view needed {before} > {s.budget.effective}"
        statuses = rec.since(mark, "context.status")
        assert statuses and statuses[-1].used == pv.status.used
        outcomes.append(pv)
        prev, new = pv, []
    return outcomes

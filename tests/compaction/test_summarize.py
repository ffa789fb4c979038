"""The summarize layer: on a round book driven by hand (its request, its checks, its breaker), and in a session
(the running summary and its span, the circuit breaker, sync/async parity).
"""

from __future__ import annotations

import time

import anyio
import pytest

from contextwarden import toolpairs
from contextwarden.compaction.breaker import CircuitBreaker
from contextwarden.compaction.config import CompactionConfig
from contextwarden.compaction.summarize import SummaryLayer
from contextwarden.events import EventBus
from contextwarden.exceptions import SummaryRejected
from contextwarden.keyinfo import rank_facts, salient_facts
from contextwarden.messages import Message
from contextwarden.session import AsyncSession, PreparedView, Session
from contextwarden.summarize import AsyncExtractiveSummarizer, ExtractiveSummarizer, LLMSummarizer
from contextwarden.summarize.base import (
    AsyncSummarizer,
    Summarizer,
    SummarizerCapabilities,
    SummaryRequest,
    check_summary,
)

from ._helpers import COUNTER, Recorder, is_context_block, make_book, make_text, session, tool_round

CONFIG = CompactionConfig(keep_recent_rounds=1, max_summarizer_failures=2)


class Plain:
    """A summarizer that declares nothing besides `summarize`."""

    def summarize(self, request: SummaryRequest) -> str:
        return "done"


def evicted_book(n: int = 6, events: EventBus | None = None) -> object:
    msgs = [Message.system("You audit shards."), Message.user("Audit every shard.")]
    for i in range(n):
        msgs += tool_round(f"c{i}", f"shard SH-{100 + i} owner user_{i} checked\n" + make_text(300, seed=i))
    book = make_book(msgs, effective=8000, config=CONFIG, events=events)
    for r in book.rounds[2:-1]:
        book.evict(r)
    return book


def drive(layer: SummaryLayer, book: object, reply: object) -> tuple[SummaryRequest, object]:
    flow = layer.run(book, 4000, CONFIG)  # type: ignore[arg-type]
    request = next(flow)
    with pytest.raises(StopIteration) as stop:
        flow.send(reply)  # type: ignore[arg-type]
    return request, stop.value.value


def test_the_layer_asks_for_the_evicted_span_and_keeps_the_summary() -> None:
    book = evicted_book()
    layer = SummaryLayer(session_id="ses_book", events=EventBus(), config=CONFIG)
    assert not layer.due(book, CONFIG)  # no summarizer
    layer.use(Plain())
    assert layer.due(book, CONFIG)
    evicted = [m for r in book.rounds if r.state == "evicted" for m in book.messages(r)]
    ids = " ".join(f"SH-{100 + i} user_{i}" for i in range(5))
    request, change = drive(layer, book, f"Audited shards; {ids}.")
    assert [m.message_id for m in request.messages] == [m.message_id for m in evicted]
    assert request.span == (evicted[0].message_id, evicted[-1].message_id) and request.previous is None
    assert 64 <= request.max_tokens <= CONFIG.summary_max_tokens and not request.degraded
    assert change.layer == "summarize" and change.items == 1
    assert book.summary == f"Audited shards; {ids}." and book.summary_span == request.span
    assert not layer.due(book, CONFIG)  # everything evicted is folded in


def test_a_summary_that_drops_the_identifiers_is_rejected_and_the_breaker_opens() -> None:
    rec = Recorder()
    events = EventBus()
    events.subscribe(rec)
    book = evicted_book(events=events)
    layer = SummaryLayer(session_id="ses_book", events=events, config=CONFIG)
    layer.use(Plain())
    for _ in range(2):
        _, change = drive(layer, book, "All shards were audited and everything went fine as planned.")
        assert change.items == 0 and book.summary is None
    assert layer.breaker.state == "open" and [a.alert for a in rec.of("alert")] == ["breaker-open"]
    assert not layer.due(book, CONFIG)  # a plain summarizer cannot answer degraded requests


def test_a_rejection_with_a_fallback_still_moves_the_summary_forward() -> None:
    book = evicted_book()
    layer = SummaryLayer(session_id="ses_book", events=EventBus(), config=CONFIG)
    layer.use(Plain())
    rejected = SummaryRejected("the model timed out", reason="timeout", fallback="Shards SH-100..SH-104 audited.")
    _, change = drive(layer, book, rejected)
    assert change.items == 1 and book.summary == "Shards SH-100..SH-104 audited."
    assert layer.breaker.failures == 1


def test_capabilities_are_what_the_summarizer_declares() -> None:
    layer = SummaryLayer(session_id="s", events=EventBus(), config=CONFIG)
    for summarizer in (ExtractiveSummarizer(), AsyncExtractiveSummarizer()):
        assert isinstance(summarizer, SummarizerCapabilities)
        layer.use(summarizer)
        assert layer.degrades and layer.checks_identifiers
    assert LLMSummarizer.supports_degraded and LLMSummarizer.checks_identifiers and callable(LLMSummarizer.take_ready)
    layer.use(Plain())
    assert layer.enabled and not layer.degrades and not layer.checks_identifiers and layer.capabilities is None
    layer.use(None)
    assert not layer.enabled


def test_a_degrading_summarizer_keeps_the_layer_running_with_the_breaker_open() -> None:
    book = evicted_book()
    layer = SummaryLayer(session_id="ses_book", events=EventBus(), config=CONFIG)
    layer.use(ExtractiveSummarizer())
    layer.breaker.record_failure()
    layer.breaker.record_failure()
    assert layer.breaker.state == "open" and layer.due(book, CONFIG)
    request, change = drive(layer, book, "Audited SH-100.")
    assert request.degraded and change.items == 1 and layer.breaker.state == "open"


class Merging(Plain):
    supports_degraded = False
    checks_identifiers = True

    def __init__(self, better: str | Exception | None) -> None:
        self.better = better

    def take_ready(self, summary: str | None, span: tuple[str, str] | None = None) -> str | None:
        if isinstance(self.better, Exception):
            raise self.better
        return self.better


@pytest.mark.parametrize(
    ("better", "ok", "summary"),
    [("A better summary.", True, "A better summary."), (None, True, "first"), (RuntimeError("boom"), False, "first")],
)
def test_merge_ready_swaps_in_a_background_summary(better: str | Exception | None, ok: bool, summary: str) -> None:
    book = evicted_book()
    layer = SummaryLayer(session_id="ses_book", events=EventBus(), config=CONFIG)
    layer.use(Merging(better))
    assert layer.checks_identifiers and not layer.degrades
    drive(layer, book, "first")
    assert layer.merge_ready(book) is ok
    assert book.summary == summary


SESSION_CONFIG = CompactionConfig(keep_recent_rounds=1, breaker_cooldown_s=0.05)


class Scripted:
    """Answers with the scripted replies in turn (an Exception is raised); records every request.

    A non-blank reply is followed by the identifiers of the messages it covers, as a faithful
    summarizer would keep them (blank and error replies are returned as they are).
    """

    def __init__(self, *replies: str | Exception) -> None:
        self.replies = list(replies)
        self.requests: list[SummaryRequest] = []

    def next(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, Exception):
            raise reply
        if not reply.strip() or check_summary(reply) is not None:
            return reply
        ids = rank_facts(f for m in request.messages for f in salient_facts(m.text, scan_chars=2000, limit=40))
        return f"{reply}\nIdentifiers: {' '.join(ids)[: request.max_tokens * 2]}"


class SyncScripted(Scripted):
    def summarize(self, request: SummaryRequest) -> str:
        return self.next(request)


class AsyncScripted(Scripted):
    async def summarize(self, request: SummaryRequest) -> str:
        await anyio.sleep(0)
        return self.next(request)


def rounds(n: int, seed: int = 0) -> list[list[Message]]:
    return [tool_round(f"c{seed}_{i}", make_text(1500, seed=seed * 100 + i), q=f"q{i}") for i in range(n)]


def turns(s: Session, batches: list[list[Message]]) -> list[PreparedView]:
    views = []
    for b in batches:
        s.add(b)
        views.append(s.prepare(format="internal"))
    return views


def start(summarizer: Summarizer | None, config: CompactionConfig = SESSION_CONFIG) -> tuple[Session, Recorder]:
    s, rec = session(3000, summarizer=summarizer, config=config)
    s.add([Message.system("You are an auditor."), Message.user("Audit every shard.")])
    return s, rec


def context_block(pv: PreparedView) -> Message:
    return next(m for m in pv.view if is_context_block(m))


def test_protocols() -> None:
    assert isinstance(SyncScripted("x"), Summarizer)
    assert isinstance(AsyncScripted("x"), AsyncSummarizer)


def test_summary_enters_the_context_block_with_its_span() -> None:
    summ = SyncScripted("The audit covered shards 1-7; nothing failed.")
    s, rec = start(summ)
    views = turns(s, rounds(8))
    pv = views[-1]
    assert pv.status.layer == "summarize"
    assert pv.status.compactions.get("summarize") == 1
    request = summ.requests[0]
    assert request.previous is None
    assert request.max_tokens > 0
    ids = {m.message_id for m in pv.view}
    evicted = [m for m in s.transcript if m.message_id not in ids and m.role != "system"]
    assert [m.message_id for m in request.messages] == [m.message_id for m in evicted if m in request.messages]
    first, last = request.span
    assert first == request.messages[0].message_id and last == request.messages[-1].message_id
    block = context_block(pv).text
    assert f"Summary of messages {first}..{last}:" in block
    assert "The audit covered shards 1-7; nothing failed." in block
    assert all(m.message_id not in ids for m in request.messages)  # the summary stands for messages gone
    span = s.read_context(f"{first}..{last}")
    assert request.messages[-1].text[:200] in span  # the span can be rehydrated
    started = [e for e in rec.of("compaction.started") if e.layer == "summarize"]
    finished = [e for e in rec.of("compaction.finished") if e.layer == "summarize"]
    assert len(started) == len(finished) == 1 and finished[0].items == 1


def test_running_summary_folds_the_previous_one_and_extends_its_span() -> None:
    summ = SyncScripted("first summary of the audit", "second summary of the audit")
    s, _ = start(summ)
    views = turns(s, rounds(14))
    assert len(summ.requests) >= 2
    one, two = summ.requests[0], summ.requests[1]
    assert two.previous is not None and two.previous.startswith("first summary of the audit")
    assert two.span[0] == one.span[0]  # the new summary covers the old span too
    assert two.messages[0].message_id not in {m.message_id for m in one.messages}  # only new messages sent
    block = context_block(views[-1]).text
    assert "second summary of the audit" in block and "first summary" not in block


@pytest.mark.parametrize(
    "failure",
    [RuntimeError("model down"), "", "   ", "Error: rate limit exceeded, retry later"],
    ids=["raises", "empty", "blank", "error-text"],
)
def test_failures_open_the_breaker_after_three_in_a_row(failure: str | Exception) -> None:
    summ = SyncScripted(failure)
    # a cooldown no run reaches: the breaker stays open however slowly the machine runs
    s, rec = start(summ, CompactionConfig(keep_recent_rounds=1, breaker_cooldown_s=3600))
    seen = 0
    views: list[PreparedView] = []
    for batch in rounds(40):
        s.add(batch)
        views.append(s.prepare(format="internal"))
        if len(summ.requests) > seen:
            seen = len(summ.requests)
            assert views[-1].status.layer != "summarize"  # a failed summary is not a layer that ran
            assert "Summary of messages" not in context_block(views[-1]).text
            if seen < 3:
                assert views[-1].status.breaker == "closed"
                assert not [e for e in rec.of("alert") if e.alert == "breaker-open"]
        if seen == 3:
            break
    assert seen == 3
    assert views[-1].status.breaker == "open"
    alerts = [e for e in rec.of("alert") if e.alert == "breaker-open"]
    assert len(alerts) == 1 and "3" in alerts[0].detail
    # the deterministic layers keep working while the breaker is open; the summarizer is not called
    for batch in rounds(6, seed=1):
        s.add(batch)
        pv = s.prepare(format="internal")
        assert pv.status.used <= pv.status.budget
        assert toolpairs.validate(pv.view) == []
        if pv.status.breaker == "open":
            assert len(summ.requests) == 3
    assert s.status().compactions.get("evict", 0) >= 3


def test_half_open_trial_after_cooldown_closes_on_success_and_reopens_on_failure() -> None:
    boom = RuntimeError("down")
    summ = SyncScripted(boom, boom, boom, boom, "recovered summary")
    # a cooldown far longer than one prepare on a loaded machine, so "open" is read before it ends
    s, rec = start(summ, CompactionConfig(keep_recent_rounds=1, breaker_cooldown_s=0.5))
    batches = iter(rounds(80))

    def until_called(n: int) -> PreparedView:
        while True:
            s.add(next(batches))
            pv = s.prepare(format="internal")
            if len(summ.requests) >= n:
                return pv

    pv = until_called(3)
    assert pv.status.breaker == "open"
    time.sleep(0.6)
    assert s.status().breaker == "half-open"
    pv = until_called(4)  # the one trial fails: open again at once
    assert pv.status.breaker == "open"
    assert len([e for e in rec.of("alert") if e.alert == "breaker-open"]) == 2
    time.sleep(0.6)
    pv = until_called(5)  # this trial succeeds: closed, and the summary covers everything evicted so far
    assert pv.status.breaker == "closed"
    assert pv.status.layer == "summarize"
    assert "recovered summary" in context_block(pv).text
    assert summ.requests[-1].span[0] == summ.requests[0].span[0]


def test_circuit_breaker_with_an_injected_clock() -> None:
    now = [100.0]
    b = CircuitBreaker(max_failures=3, cooldown_s=10.0, clock=lambda: now[0])

    def state() -> str:  # read fresh each time (the state depends on the clock)
        return b.state

    assert b.allow()
    assert state() == "closed"
    assert not b.record_failure() and not b.record_failure()
    b.record_success()  # a success resets the count: failures must be consecutive
    assert not b.record_failure() and not b.record_failure()
    assert b.record_failure()
    assert not b.allow()
    now[0] += 9.9
    assert state() == "open"
    now[0] += 0.1
    assert state() == "half-open" and b.allow()
    assert b.record_failure()  # one failed trial re-opens
    assert state() == "open"
    now[0] += 10.0
    b.record_success()
    assert state() == "closed" and b.failures == 0
    assert b.total_failures == 6


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("The agent fixed the flaky test in tests/test_api.py and opened PR #42.", True),
        ("", False),
        ("  \n ", False),
        ("Error: upstream timed out", False),
        ("I'm sorry, I can't help with that.", False),
        ("Traceback (most recent call last):\n  File x", False),
        (42, False),
        (None, False),
    ],
)
def test_check_summary(text: object, ok: bool) -> None:
    assert (check_summary(text) is None) == ok


def test_no_summarizer_means_no_summary_layer() -> None:
    s, rec = start(None)
    views = turns(s, rounds(12))
    assert not [e for e in rec.of("compaction.started") if e.layer == "summarize"]
    assert all(v.status.layer != "summarize" for v in views)
    assert "evict" in views[-1].status.compactions


def test_seed_profile_summarizes_only_from_the_error_state() -> None:
    config = CompactionConfig.profile("seed", keep_recent_rounds=1)
    assert (config.high_water, config.low_water, config.gate("summarize")) == (0.70, 0.60, 0.90)
    # small steps: every crossing of 0.70 lands below 0.90, so clearing and eviction do the work
    small = SyncScripted("summary")
    s, rec = start(small, config)
    views = turns(s, rounds(12))
    assert views[-1].status.compactions.get("evict", 0) >= 2
    assert all(e.tokens_before < 0.9 * s.budget.effective for e in rec.of("compaction.started"))
    assert small.requests == []
    # one big step past 0.90: the summary layer runs
    big = SyncScripted("summary")
    s2, _ = start(big, config)
    for batch in rounds(9, seed=6):
        s2.add(batch)
    assert s2.accountant.count_messages(s2.transcript) > 0.9 * s2.budget.effective
    pv = s2.prepare(format="internal")
    assert len(big.requests) == 1
    assert pv.status.layer == "summarize"


async def _async_views(
    config: CompactionConfig, replies: tuple[str | Exception, ...], batches: list[list[Message]]
) -> list[tuple[object, ...]]:
    s = AsyncSession("twin", window=3000, counter=COUNTER, config=config, summarizer=AsyncScripted(*replies))
    out = []
    for batch in batches:
        s.add(batch)
        pv = await s.prepare(format="internal")
        out.append(_shape(pv))
    return out


def _sync_views(
    config: CompactionConfig, replies: tuple[str | Exception, ...], batches: list[list[Message]]
) -> list[tuple[object, ...]]:
    s = Session("twin", window=3000, counter=COUNTER, config=config, summarizer=SyncScripted(*replies))
    out = []
    for batch in batches:
        s.add(batch)
        out.append(_shape(s.prepare(format="internal")))
    return out


def _shape(pv: PreparedView) -> tuple[object, ...]:
    return (
        tuple((m.role, m.message_id, m.text, m.tool_call_id) for m in pv.view),
        pv.status.used,
        pv.status.layer,
        pv.status.breaker,
        tuple(sorted(pv.status.compactions.items())),
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    "replies",
    [("summary one", "summary two"), (RuntimeError("x"),), ("ok summary", "", "", "", "later summary")],
    ids=["succeeds", "raises", "mixed"],
)
async def test_async_session_matches_sync_session(replies: tuple[str | Exception, ...]) -> None:
    config = CompactionConfig(keep_recent_rounds=1, breaker_cooldown_s=3600)
    batches = rounds(30)
    head = [Message.system("You are an auditor."), Message.user("Audit every shard.")]
    expected = _sync_views(config, replies, [head, *batches])
    got = await _async_views(config, replies, [head, *batches])
    assert got == expected
    summarized = any(shape[2] == "summarize" for shape in got)
    assert summarized == (isinstance(replies[0], str) and bool(replies[0]))

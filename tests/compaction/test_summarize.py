"""The summarize layer on a round book, driven by hand: its request, its checks, its breaker."""

from __future__ import annotations

import pytest

from contextwarden.compaction.config import CompactionConfig
from contextwarden.compaction.summarize import SummaryLayer
from contextwarden.events import EventBus
from contextwarden.exceptions import SummaryRejected
from contextwarden.messages import Message
from contextwarden.summarize import AsyncExtractiveSummarizer, ExtractiveSummarizer, LLMSummarizer
from contextwarden.summarize.base import SummarizerCapabilities, SummaryRequest

from ._helpers import Recorder, make_book, make_text, tool_round

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

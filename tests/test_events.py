"""Typed events: what a session emits, the bus (callbacks, async iterator, audit log)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import AsyncGenerator
from typing import cast

import anyio
import pytest

from compaction._helpers import make_text, session, tool_round
from contextwarden.compaction.config import CompactionConfig
from contextwarden.compaction.viewstatus import ViewStatus
from contextwarden.events import (
    Alert,
    CompactionFinished,
    CompactionStarted,
    ContextStatus,
    Event,
    EventBus,
    SnapshotWritten,
    event_to_dict,
)
from contextwarden.exceptions import ConfigError
from contextwarden.messages import Message
from contextwarden.session import Session
from contextwarden.stores import open_store


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def busy_session() -> tuple[list[Event], list[ViewStatus]]:
    """Twelve turns of a session that compacts a few times; its events and statuses."""
    s, rec = session(3000, config=CompactionConfig(keep_recent_rounds=1, clear_after_rounds=2))
    s.add([Message.system("sys"), Message.user("Check every server.")])
    statuses = []
    for i in range(12):
        s.add(tool_round(f"c{i}", make_text(1500, seed=i), host=f"srv-{i}"))
        statuses.append(s.prepare(format="internal").status)
    return rec.events, statuses


def test_context_status_after_each_prepare_with_the_seed_schema() -> None:
    events, statuses = busy_session()
    finals = []
    it = iter(events)
    for status in statuses:  # the last context.status of each prepare matches its returned status
        last = None
        for e in it:
            if isinstance(e, ContextStatus):
                last = e
                if e.used == status.used and e.layer == status.layer:
                    break
        assert last is not None
        finals.append(last)
    assert len(finals) == len(statuses)
    for e in (e for e in events if isinstance(e, ContextStatus)):
        d = event_to_dict(e)
        assert {"used", "budget", "ratio", "state", "layer", "session_id", "ts", "kind"} <= set(d)
        assert d["kind"] == "context.status"
        assert d["budget"] == 3000 and abs(d["ratio"] - d["used"] / 3000) < 1e-3
        assert d["state"] in ("normal", "warning", "error", "critical", "overflow")
        json.dumps(d)


def test_compaction_events_come_in_started_finished_pairs() -> None:
    events, _ = busy_session()
    open_: CompactionStarted | None = None
    pairs = 0
    for e in events:
        if isinstance(e, CompactionStarted):
            assert open_ is None, "a layer started before the previous one finished"
            open_ = e
        elif isinstance(e, CompactionFinished):
            assert open_ is not None and open_.layer == e.layer and open_.trigger == e.trigger
            assert e.tokens_before == open_.tokens_before
            assert e.duration_ms >= 0 and e.items >= 0
            if e.items:
                assert e.tokens_after < e.tokens_before or e.layer == "summarize"
            open_ = None
            pairs += 1
    assert open_ is None and pairs >= 2
    assert {e.layer for e in events if isinstance(e, CompactionStarted)} >= {"clear", "evict"}
    assert all(e.trigger == "high-water" for e in events if isinstance(e, CompactionStarted))


def test_context_status_after_each_layer() -> None:
    events, _ = busy_session()
    checked = 0
    for i, e in enumerate(events):
        if isinstance(e, CompactionFinished) and e.items:
            start = max(j for j in range(i) if isinstance(events[j], CompactionStarted))
            between = [x for x in events[start:i] if isinstance(x, ContextStatus)]
            assert between, f"no context.status for layer {e.layer}"
            assert between[-1].layer == e.layer and between[-1].used == e.tokens_after
            checked += 1
    assert checked >= 2


def test_snapshot_written_names_the_messages() -> None:
    events, _ = busy_session()
    snaps = [e for e in events if isinstance(e, SnapshotWritten)]
    assert snaps
    for e in snaps:
        assert e.snapshot_id.startswith("snap_") and e.message_ids
        assert e.reason in ("cleared", "evicted", "offloaded", "summarized")
    assert len({(e.snapshot_id, e.reason) for e in snaps}) == len(snaps)  # not announced twice


def test_event_to_dict_is_json_ready() -> None:
    e = SnapshotWritten(session_id="s", snapshot_id="snap_" + "0" * 24, reason="cleared", message_ids=("a", "b"))
    d = event_to_dict(e)
    assert d["message_ids"] == ["a", "b"] and d["kind"] == "snapshot.written"
    assert json.loads(json.dumps(d)) == d


def test_bus_callbacks_audit_log_and_sinks() -> None:
    bus = EventBus(audit_limit=5)
    got: list[Event] = []
    sunk: list[dict[str, object]] = []
    bus.subscribe(got.append)
    bus.sinks.append(sunk.append)
    for i in range(8):
        bus.emit(Alert(session_id="s", alert="spike", detail=f"#{i}"))
    assert [e.detail for e in got] == [f"#{i}" for i in range(8)]  # type: ignore[union-attr]
    assert [d["detail"] for d in bus.audit] == [f"#{i}" for i in range(3, 8)]  # bounded, oldest dropped
    assert len(sunk) == 8 and sunk[0]["alert"] == "spike"


def test_audit_limit_can_be_changed_and_keeps_the_newest_events() -> None:
    bus = EventBus(audit_limit=4)
    for i in range(6):
        bus.emit(Alert(session_id="s", alert="spike", detail=f"#{i}"))
    bus.audit_limit = 2  # lowering drops the oldest at once
    assert bus.audit_limit == 2
    assert [d["detail"] for d in bus.audit] == ["#4", "#5"]
    bus.audit_limit = 3  # raising keeps what is there and lets the log grow again
    bus.emit(Alert(session_id="s", alert="spike", detail="#6"))
    bus.emit(Alert(session_id="s", alert="spike", detail="#7"))
    assert [d["detail"] for d in bus.audit] == ["#5", "#6", "#7"]
    bus.audit_limit = 0
    bus.emit(Alert(session_id="s", alert="spike", detail="#8"))
    assert bus.audit == []


def test_reading_the_audit_log_while_another_thread_emits() -> None:
    bus = EventBus(audit_limit=2_000)
    stop = threading.Event()

    def emit_forever() -> None:
        i = 0
        while not stop.is_set():
            bus.emit(Alert(session_id="s", alert="spike", detail=f"#{i}"))
            i += 1

    worker = threading.Thread(target=emit_forever)
    worker.start()
    try:
        for _ in range(40):  # each read converts up to 2,000 events while the worker keeps appending
            audit = bus.audit
            numbers = [int(str(d["detail"])[1:]) for d in audit]
            assert numbers == sorted(numbers) and len(numbers) <= 2_000
    finally:
        stop.set()
        worker.join()


def test_changing_the_audit_limit_while_another_thread_emits_loses_nothing() -> None:
    bus = EventBus(audit_limit=100_000)
    total = 5_000
    done = threading.Event()

    def emit_all() -> None:
        for i in range(total):
            bus.emit(Alert(session_id="s", alert="spike", detail=f"#{i}"))
        done.set()

    worker = threading.Thread(target=emit_all)
    worker.start()
    limits = [100_000, 90_000]  # both above the total: a change must keep every event
    while not done.is_set():
        bus.audit_limit = limits[0]
        limits.reverse()
    worker.join()
    assert [d["detail"] for d in bus.audit] == [f"#{i}" for i in range(total)]


@pytest.mark.parametrize("limit", [-1, 2.5, True, "10"])
def test_audit_limit_refuses_what_is_not_a_count(limit: object) -> None:
    with pytest.raises(ConfigError, match="audit_limit") as caught:
        EventBus(audit_limit=limit)  # type: ignore[arg-type]
    assert repr(limit) in str(caught.value) and caught.value.key == "audit_limit"
    bus = EventBus(audit_limit=3)
    with pytest.raises(ConfigError, match="audit_limit"):
        bus.audit_limit = limit  # type: ignore[assignment]
    assert bus.audit_limit == 3


def test_failing_subscriber_and_sink_are_counted_not_raised() -> None:
    bus = EventBus()
    got: list[Event] = []

    def bad(_: object) -> None:
        raise ValueError("boom")

    bus.subscribe(bad)
    bus.sinks.append(bad)
    bus.subscribe(got.append)
    bus.emit(Alert(session_id="s", alert="x", detail="y"))
    assert bus.subscriber_errors == 2
    assert len(got) == 1


@pytest.mark.anyio
async def test_stream_delivers_events_in_order() -> None:
    bus = EventBus()
    received: list[Event] = []
    ready = anyio.Event()

    async def consume() -> None:
        async with contextlib.aclosing(cast(AsyncGenerator[Event, None], bus.stream())) as stream:
            ready.set()
            async for event in stream:
                received.append(event)
                if len(received) == 3:
                    return

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await ready.wait()
        await anyio.sleep(0.01)  # the iterator registers its queue on its first step
        for i in range(3):
            bus.emit(Alert(session_id="s", alert="a", detail=str(i)))
    assert [e.detail for e in received] == ["0", "1", "2"]  # type: ignore[union-attr]
    bus.emit(Alert(session_id="s", alert="after", detail="closed"))  # no consumer left: nothing breaks


@pytest.mark.anyio
async def test_stream_receives_events_emitted_from_another_thread() -> None:
    s, _ = session(3000)
    s.add([Message.system("sys"), Message.user("go")])
    received: list[Event] = []

    async def consume() -> None:
        async with contextlib.aclosing(cast(AsyncGenerator[Event, None], s.events.stream())) as stream:
            async for event in stream:
                received.append(event)
                if event.kind == "context.status":
                    return

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await anyio.sleep(0.01)
        worker = threading.Thread(target=s.prepare)
        worker.start()
        await anyio.to_thread.run_sync(worker.join)
    assert received and received[-1].kind == "context.status"


def test_alert_for_a_spike_in_turn_cost() -> None:
    s, rec = session(100_000)
    s.add([Message.system("sys"), Message.user("go")])
    for i in range(6):
        s.add(tool_round(f"c{i}", make_text(400, seed=i)))
        s.prepare()
        s.on_turn_end({"prompt_tokens": 10})
    s.add(tool_round("big", make_text(20_000, seed=9)))
    s.prepare()
    s.on_turn_end()
    assert [e.alert for e in rec.of("alert")] == ["spike"]


def test_sinks_and_the_audit_log_get_every_event_but_the_per_turn_status() -> None:
    bus = EventBus()
    sunk: list[dict[str, object]] = []
    bus.sinks.append(sunk.append)
    assert bus.listening and not bus.status_listening  # a sink alone does not ask for statuses
    bus.emit(ContextStatus(session_id="s", used=1, budget=10, ratio=0.1, state="normal", turn=1))
    bus.emit(Alert(session_id="s", alert="spike", detail="d"))
    assert [d["kind"] for d in sunk] == ["alert"]
    assert [d["kind"] for d in bus.audit] == ["alert"]
    got: list[Event] = []
    bus.subscribe(got.append)
    assert bus.status_listening
    bus.emit(ContextStatus(session_id="s", used=2, budget=10, ratio=0.2, state="normal", turn=2))
    assert [e.kind for e in got] == ["context.status"] and len(sunk) == 1


def test_a_stored_session_without_subscribers_makes_no_status_events() -> None:
    s = Session("ses_quiet", store=open_store("memory://"), window=4000)
    s.add([Message.system("You help."), Message.user("hi")])
    s.prepare()
    assert not s.events.status_listening
    seen: list[Event] = []
    s.subscribe(seen.append)
    s.add(Message.assistant("hello"))
    s.prepare()
    assert any(e.kind == "context.status" for e in seen)

"""`Session` and `AsyncSession` bound to a session store, on every backend.

The sync session runs over each sync store, the async session over each async store (its
coroutines run on the blocking portal's event loop, where the store was made). Every scenario
reads the store back through its own API, or through a second session object that shares
nothing in memory with the first: what counts is what a restarted process or another replica
would see.

Compactions come from large tool outputs in a small window (tiktoken counting, no reserved
output): with `CONFIG` the first compaction clears old outputs into stand-ins that name their
snapshots, later ones evict rounds into the context block.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal

from compaction._helpers import Recorder
from contextwarden import toolpairs
from contextwarden.adapters import from_messages
from contextwarden.exceptions import SchemaError, SessionLost, SessionNotFound, SnapshotError
from contextwarden.messages import Message
from contextwarden.session import AsyncSession, PreparedView, Session
from contextwarden.snapshots import MemorySnapshotStore

from ._helpers import MAX_ROUNDS, OPTIONS, make_round, opening, shape
from .conftest import BACKENDS, Backend, FakeClock

SID = "ses_binding"
UNKNOWN_SNAPSHOT = "snap_" + "0" * 24


def ids(messages: Sequence[Message]) -> list[str]:
    return [m.message_id for m in messages]


def stand_ins(pv: PreparedView) -> list[Message]:
    return [m for m in pv.view if m.role == "tool" and m.snapshot_id is not None]


def snapshot_of(stand_in: Message) -> str:
    assert stand_in.snapshot_id is not None
    return stand_in.snapshot_id


def original_of(stand_in: Message, transcript: Sequence[Message]) -> Message:
    (source,) = stand_in.source_ids
    return next(m for m in transcript if m.message_id == source)


def snapshot_texts(data: bytes) -> list[str]:
    """The message texts a stored snapshot document holds."""
    return [Message.from_dict(d).text for d in json.loads(data)["messages"]]


def fits(pv: PreparedView, budget: int) -> None:
    assert pv.status.used <= budget, (pv.status.used, budget)
    assert toolpairs.validate(pv.view) == []


def recorded(session: Session | AsyncSession) -> Recorder:
    rec = Recorder()
    session.subscribe(rec)
    return rec


# --- sync: Session over the sync stores --------------------------------------------------------


def grow(
    s: Session, store: Any, *, compactions: int = 1, tag: str = "c", alone: bool = True
) -> tuple[PreparedView, list[int]]:
    """Add tool rounds, preparing after each, until ``compactions`` compactions ran.

    Returns the last prepared view and the stored state version after each compaction, checking
    on the way that a prepare that compacted saved a newer version and, for a session ``alone``
    on its stored session, that one that did not left it (a session that finds the stored state
    moved reloads and saves under the lock even when the reloaded view needs no compaction).
    """
    versions: list[int] = []
    for i in range(MAX_ROUNDS):
        before = store.load_state(SID)[1]
        s.add(make_round(tag, i))
        pv = s.prepare(format="internal")
        state, version = store.load_state(SID)
        if pv.status.layer is None:
            assert version == before or not alone, "a prepare that did not compact saved the state"
            continue
        assert state is not None and version > before, (before, version)
        versions.append(version)
        if len(versions) == compactions:
            return pv, versions
    pytest.fail(f"{compactions} compaction(s) expected within {MAX_ROUNDS} rounds, saw {len(versions)}")


def test_sync_adds_are_written_through_in_order_once(sync_backend: Backend) -> None:
    store = sync_backend.make()
    s = Session(SID, store=store, **OPTIONS)
    added = opening()
    assert s.add(added) == 2
    assert store.load_messages(SID) == added  # at once, before any prepare
    for i in range(8):  # across compactions too
        r = make_round("w", i)
        s.add(r)
        added += r
        assert store.load_messages(SID) == added
        s.prepare()
    assert s.status().compactions, "the scenario should have compacted"
    assert s.add(added[1]) == 0
    assert s.add(added[-2:]) == 0
    late = Session(SID, store=sync_backend.make(), **OPTIONS)  # does not know the next round
    new = make_round("w", 99)
    assert s.add([added[0], *new]) == 2  # only the new ones
    added += new
    late.add(new)  # new to this session, already stored by the other one
    assert store.load_messages(SID) == added
    # another session object on the same stored session finds them there, and adds none twice
    t = Session(SID, store=sync_backend.make(), **OPTIONS)
    assert t.transcript == added
    assert t.add(added[:4]) == 0
    assert ids(store.load_messages(SID)) == ids(added)


def test_sync_compaction_is_saved_and_a_new_session_resumes_its_view(sync_backend: Backend) -> None:
    store = sync_backend.make()
    s = Session(SID, store=store, **OPTIONS)
    s.add(opening())
    pv, versions = grow(s, store, compactions=2)
    assert versions == sorted(set(versions))
    assert pv.status.used < s.accountant.count_messages(s.transcript)  # a compacted view
    t = Session(SID, store=sync_backend.make(), **OPTIONS)
    rec = recorded(t)
    again = t.prepare(format="internal")
    assert shape(again.view) == shape(pv.view)
    assert again.status.used == pv.status.used
    assert again.status.layer is None and rec.of("compaction.started") == []
    assert store.load_state(SID)[1] == versions[-1]  # nothing saved: nothing compacted
    assert t.transcript == s.transcript


def test_sync_stand_ins_name_snapshots_the_store_keeps(sync_backend: Backend) -> None:
    store = sync_backend.make()
    s = Session(SID, store=store, **OPTIONS)
    s.add(opening())
    # opened before the rounds were added: it can read their snapshots only from the store
    t = Session(SID, store=sync_backend.make(), **OPTIONS)
    pv, _ = grow(s, store)
    shortened = stand_ins(pv)
    assert shortened, "the first compaction should clear old outputs into stand-ins"
    listed = store.list_snapshots(SID)
    for m in shortened:
        original = original_of(m, s.transcript)
        assert m.snapshot_id in listed
        assert original.text in snapshot_texts(store.get_snapshot(SID, snapshot_of(m)))
        assert original.text[:200] in t.read_context(snapshot_of(m))


def test_sync_read_context_rebuilds_snapshots_the_store_lacks(sync_backend: Backend) -> None:
    store = sync_backend.make()
    # the snapshots go to memory only: the store has the transcript and the view, not the snapshots
    s = Session(SID, store=store, snapshots=MemorySnapshotStore(), **OPTIONS)
    s.add(opening())
    pv, _ = grow(s, store)
    shortened = stand_ins(pv)
    assert shortened
    assert not {m.snapshot_id for m in shortened} & set(store.list_snapshots(SID))
    t = Session(SID, store=sync_backend.make(), **OPTIONS)  # reads snapshots from the store
    u = Session(SID, store=sync_backend.make(), snapshots=MemorySnapshotStore(), **OPTIONS)
    assert shape(t.prepare(format="internal").view) == shape(pv.view)
    for m in shortened:
        first = original_of(m, s.transcript).text[:200]
        assert first in t.read_context(snapshot_of(m))
        assert first in u.read_context(snapshot_of(m))
        assert u.read_context(snapshot_of(m)) == s.read_context(snapshot_of(m))  # the same document
    for session in (s, t, u):
        with pytest.raises(SnapshotError):
            session.read_context(UNKNOWN_SNAPSHOT)


def test_sync_session_with_its_own_snapshot_store_rebuilds_the_stored_ones(sync_backend: Backend) -> None:
    store = sync_backend.make()
    s = Session(SID, store=store, **OPTIONS)
    s.add(opening())
    pv, _ = grow(s, store)
    shortened = stand_ins(pv)
    assert shortened
    # keeps its snapshots elsewhere, opened after the compaction: it rebuilds them from the transcript
    u = Session(SID, store=sync_backend.make(), snapshots=MemorySnapshotStore(), **OPTIONS)
    for m in shortened:
        assert u.read_context(snapshot_of(m)) == s.read_context(snapshot_of(m))
    assert u.snapshots.list_snapshots(SID) == []
    with pytest.raises(SnapshotError):
        u.read_context(UNKNOWN_SNAPSHOT)


def test_sync_context_overflow_is_saved_and_resumed(sync_backend: Backend) -> None:
    store = sync_backend.make()
    s = Session(SID, store=store, **OPTIONS)
    s.add(opening())
    for i in range(3):  # below high water: prepare does not compact
        s.add(make_round("o", i))
    before = s.prepare(format="internal")
    assert before.status.layer is None
    state, version = store.load_state(SID)
    assert state is None and version == 0
    pv = s.on_context_overflow(format="internal")
    assert pv.status.used < before.status.used
    state, saved = store.load_state(SID)
    assert state is not None and saved > version
    t = Session(SID, store=sync_backend.make(), **OPTIONS)
    rec = recorded(t)
    again = t.prepare(format="internal")
    assert shape(again.view) == shape(pv.view)
    assert rec.of("compaction.started") == []
    assert store.load_state(SID)[1] == saved


def test_sync_stale_session_compacts_from_the_stored_state(sync_backend: Backend) -> None:
    """A session opened before another one compacted starts its own compaction from the stored state."""
    store = sync_backend.make()
    a = Session(SID, store=store, **OPTIONS)
    a.add(opening())
    b = Session(SID, store=sync_backend.make(), **OPTIONS)
    grow(a, store, tag="a")
    saved = store.load_state(SID)[1]
    pv, _ = grow(b, store, tag="b", alone=False)  # would raise VersionConflict if b saved over a's version
    assert store.load_state(SID)[1] > saved
    assert b.transcript == store.load_messages(SID)  # a's rounds too: b reloaded
    assert set(ids(a.transcript)) < set(ids(b.transcript))
    fits(pv, b.budget.effective)


def test_sync_stale_session_overflow_reloads_then_compacts_deeper(sync_backend: Backend) -> None:
    """`on_context_overflow` in a session that missed another one's compaction: reload, then the reactive cut."""
    store = sync_backend.make()
    a = Session(SID, store=store, **OPTIONS)
    a.add(opening())
    b = Session(SID, store=sync_backend.make(), **OPTIONS)
    stored, _ = grow(a, store, tag="a")
    saved = store.load_state(SID)[1]
    pv = b.on_context_overflow(format="internal")
    assert b.transcript == store.load_messages(SID)
    assert pv.status.layer is not None
    assert pv.status.used < stored.status.used  # deeper than the view it reloaded
    assert store.load_state(SID)[1] > saved
    c = Session(SID, store=sync_backend.make(), **OPTIONS)
    assert shape(c.prepare(format="internal").view) == shape(pv.view)


def test_sync_sessions_racing_on_one_stored_session_lose_nothing(sync_backend: Backend) -> None:
    head = opening()
    first = Session(SID, store=sync_backend.make(), **OPTIONS)
    first.add(head)
    sessions = {"A": first, "B": Session(SID, store=sync_backend.make(), **OPTIONS)}
    recorders = {tag: recorded(s) for tag, s in sessions.items()}
    added: dict[str, list[str]] = {tag: [] for tag in sessions}
    errors: list[BaseException] = []
    start = threading.Barrier(len(sessions))

    def writer(tag: str) -> None:
        s = sessions[tag]
        try:
            start.wait()
            for i in range(12):
                r = make_round(tag, i)
                s.add(r)
                added[tag] += ids(r)
                s.prepare()
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(tag,)) for tag in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for tag, rec in recorders.items():
        assert rec.of("compaction.finished"), f"session {tag} never compacted"
    store = sync_backend.make()
    stored = ids(store.load_messages(SID))
    assert len(stored) == len(set(stored))
    assert sorted(stored) == sorted(ids(head) + added["A"] + added["B"])  # every message, once
    for tag in sessions:  # each writer's rounds in its own order
        assert [i for i in stored if i in set(added[tag])] == added[tag]
    fresh = Session(SID, store=store, **OPTIONS)
    assert ids(fresh.transcript) == stored
    pv = fresh.prepare(format="internal")
    fits(pv, fresh.budget.effective)
    listed = set(store.list_snapshots(SID))
    for m in stand_ins(pv):
        assert m.snapshot_id in listed


def test_sync_prepared_messages_stay_the_view_across_reloads(sync_backend: Backend) -> None:
    a = Session(SID, store=sync_backend.make(), **OPTIONS)
    a.add(opening())
    b = Session(SID, store=sync_backend.make(), **OPTIONS)
    for step in range(36):  # three rounds each in turn: each session keeps finding the other's compactions
        s, tag = ((a, "a"), (b, "b"))[step // 3 % 2]
        s.add(make_round(tag, step))
        pv = s.prepare()  # the OpenAI format, the default
        assert pv.messages == from_messages(pv.view, format="openai"), f"step {step}: session {tag}"


# --- async: AsyncSession over the async stores -------------------------------------------------


@pytest.fixture(params=BACKENDS)
def async_backend(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Backend]:
    """Async stores of one backend; each is made on the portal's event loop, where the scenario runs."""
    made = Backend(request.param, "async", request=request, tmp_path=tmp_path, clock=clock)
    yield made
    made.close()


def async_store(backend: Backend) -> Any:
    """A new async store over the test's namespace (the portal wrapper's inner store)."""
    return backend.make().inner


async def agrow(
    s: AsyncSession, store: Any, *, compactions: int = 1, tag: str = "c", alone: bool = True
) -> tuple[PreparedView, list[int]]:
    """`grow` for the async session."""
    versions: list[int] = []
    for i in range(MAX_ROUNDS):
        before = (await store.load_state(SID))[1]
        s.add(make_round(tag, i))
        pv = await s.prepare(format="internal")
        state, version = await store.load_state(SID)
        if pv.status.layer is None:
            assert version == before or not alone, "a prepare that did not compact saved the state"
            continue
        assert state is not None and version > before, (before, version)
        versions.append(version)
        if len(versions) == compactions:
            return pv, versions
    pytest.fail(f"{compactions} compaction(s) expected within {MAX_ROUNDS} rounds, saw {len(versions)}")


def test_async_adds_are_written_by_prepare_and_flush_in_order_once(
    async_backend: Backend, portal: BlockingPortal
) -> None:
    store, other = async_store(async_backend), async_store(async_backend)

    async def scenario() -> None:
        s = await AsyncSession.open(SID, store=store, **OPTIONS)
        added = opening()
        s.add(added)
        await s.flush()
        assert await store.load_messages(SID) == added
        for i in range(8):
            r = make_round("w", i)
            s.add(r)
            added += r
            await s.prepare()
            assert await store.load_messages(SID) == added
        assert s.status().compactions, "the scenario should have compacted"
        assert s.add(added[1]) == 0
        assert s.add(added[-2:]) == 0
        late = await AsyncSession.open(SID, store=other, **OPTIONS)  # does not know the next round
        new = make_round("w", 99)
        assert s.add([added[0], *new]) == 2  # only the new ones
        added += new
        s.add(new)
        await s.flush()
        await s.flush()
        await s.prepare()
        late.add(new)  # new to this session, already stored by the other one
        await late.prepare()
        assert await store.load_messages(SID) == added
        t = await AsyncSession.open(SID, store=other, **OPTIONS)
        assert t.transcript == added
        assert t.add(added[:4]) == 0
        await t.prepare()
        assert ids(await store.load_messages(SID)) == ids(added)

    portal.call(scenario)


def test_async_compaction_is_saved_and_a_new_session_resumes_its_view(
    async_backend: Backend, portal: BlockingPortal
) -> None:
    store, other = async_store(async_backend), async_store(async_backend)

    async def scenario() -> None:
        s = await AsyncSession.open(SID, store=store, **OPTIONS)
        s.add(opening())
        pv, versions = await agrow(s, store, compactions=2)
        assert versions == sorted(set(versions))
        assert pv.status.used < s.accountant.count_messages(s.transcript)
        t = await AsyncSession.open(SID, store=other, **OPTIONS)
        rec = recorded(t)
        again = await t.prepare(format="internal")
        assert shape(again.view) == shape(pv.view)
        assert again.status.used == pv.status.used
        assert again.status.layer is None and rec.of("compaction.started") == []
        assert (await store.load_state(SID))[1] == versions[-1]
        assert t.transcript == s.transcript

    portal.call(scenario)


def test_async_compaction_copies_its_snapshots_to_the_store(async_backend: Backend, portal: BlockingPortal) -> None:
    store, other = async_store(async_backend), async_store(async_backend)

    async def scenario() -> None:
        s = await AsyncSession.open(SID, store=store, **OPTIONS)
        s.add(opening())
        await s.flush()
        # opened before the rounds were added: it can read their snapshots only from the store
        t = await AsyncSession.open(SID, store=other, **OPTIONS)
        pv, _ = await agrow(s, store)
        shortened = stand_ins(pv)
        assert shortened
        listed = await store.list_snapshots(SID)
        for m in shortened:
            original = original_of(m, s.transcript)
            assert m.snapshot_id in listed
            assert original.text in snapshot_texts(await store.get_snapshot(SID, snapshot_of(m)))
            assert original.text[:200] in await t.aread_context(snapshot_of(m))
        # later compactions' snapshots are copied too, for a replica that never saw their rounds
        u = await AsyncSession.open(SID, store=other, **OPTIONS)
        pv, _ = await agrow(s, store, tag="d")
        later = await store.list_snapshots(SID)
        assert len(later) > len(listed)
        assert set(s.snapshots.list_snapshots(SID)) <= set(later)
        for m in stand_ins(pv):
            assert m.snapshot_id in later
            assert original_of(m, s.transcript).text[:200] in await u.aread_context(snapshot_of(m))

    portal.call(scenario)


def test_async_read_context_rebuilds_snapshots_the_store_lost(async_backend: Backend, portal: BlockingPortal) -> None:
    store, other = async_store(async_backend), async_store(async_backend)

    async def scenario() -> None:
        s = await AsyncSession.open(SID, store=store, **OPTIONS)
        s.add(opening())
        pv, _ = await agrow(s, store)
        shortened = stand_ins(pv)
        assert shortened
        # the store loses the snapshots: the session comes back from an export without them
        lines = [line async for line in store.export_session(SID)]
        kept = [line for line in lines if json.loads(line).get("type") != "snapshot"]
        assert len(kept) < len(lines)
        await store.delete_session(SID)
        await store.import_session(kept)
        assert await store.list_snapshots(SID) == []
        t = await AsyncSession.open(SID, store=other, **OPTIONS)
        assert shape((await t.prepare(format="internal")).view) == shape(pv.view)
        for m in shortened:
            assert original_of(m, s.transcript).text[:200] in await t.aread_context(snapshot_of(m))
            assert await t.aread_context(snapshot_of(m)) == await s.aread_context(snapshot_of(m))
        for session in (s, t):
            with pytest.raises(SnapshotError):
                await session.aread_context(UNKNOWN_SNAPSHOT)

    portal.call(scenario)


def test_async_context_overflow_is_saved_and_resumed(async_backend: Backend, portal: BlockingPortal) -> None:
    store, other = async_store(async_backend), async_store(async_backend)

    async def scenario() -> None:
        s = await AsyncSession.open(SID, store=store, **OPTIONS)
        s.add(opening())
        for i in range(3):
            s.add(make_round("o", i))
        before = await s.prepare(format="internal")
        assert before.status.layer is None
        state, version = await store.load_state(SID)
        assert state is None and version == 0
        pv = await s.on_context_overflow(format="internal")
        assert pv.status.used < before.status.used
        state, saved = await store.load_state(SID)
        assert state is not None and saved > version
        t = await AsyncSession.open(SID, store=other, **OPTIONS)
        rec = recorded(t)
        again = await t.prepare(format="internal")
        assert shape(again.view) == shape(pv.view)
        assert rec.of("compaction.started") == []
        assert (await store.load_state(SID))[1] == saved

    portal.call(scenario)


def test_async_context_overflow_writes_pending_messages(async_backend: Backend, portal: BlockingPortal) -> None:
    store = async_store(async_backend)

    async def scenario() -> None:
        s = await AsyncSession.open(SID, store=store, **OPTIONS)
        added = opening() + [m for i in range(3) for m in make_round("o", i)]
        s.add(added)  # no prepare in between: on_context_overflow writes them before it saves the view
        pv = await s.on_context_overflow(format="internal")
        assert await store.load_messages(SID) == added
        t = await AsyncSession.open(SID, store=store, **OPTIONS)
        assert shape((await t.prepare(format="internal")).view) == shape(pv.view)

    portal.call(scenario)


def test_async_stale_session_compacts_from_the_stored_state(async_backend: Backend, portal: BlockingPortal) -> None:
    store, other = async_store(async_backend), async_store(async_backend)

    async def scenario() -> None:
        a = await AsyncSession.open(SID, store=store, **OPTIONS)
        a.add(opening())
        await a.flush()
        b = await AsyncSession.open(SID, store=other, **OPTIONS)
        await agrow(a, store, tag="a")
        saved = (await store.load_state(SID))[1]
        pv, _ = await agrow(b, store, tag="b", alone=False)
        assert (await store.load_state(SID))[1] > saved
        assert b.transcript == await store.load_messages(SID)
        assert set(ids(a.transcript)) < set(ids(b.transcript))
        fits(pv, b.budget.effective)

    portal.call(scenario)


def test_async_stale_session_overflow_reloads_then_compacts_deeper(
    async_backend: Backend, portal: BlockingPortal
) -> None:
    store, other = async_store(async_backend), async_store(async_backend)

    async def scenario() -> None:
        a = await AsyncSession.open(SID, store=store, **OPTIONS)
        a.add(opening())
        await a.flush()
        b = await AsyncSession.open(SID, store=other, **OPTIONS)
        stored, _ = await agrow(a, store, tag="a")
        saved = (await store.load_state(SID))[1]
        pv = await b.on_context_overflow(format="internal")
        assert b.transcript == await store.load_messages(SID)
        assert pv.status.layer is not None
        assert pv.status.used < stored.status.used
        assert (await store.load_state(SID))[1] > saved
        c = await AsyncSession.open(SID, store=other, **OPTIONS)
        assert shape((await c.prepare(format="internal")).view) == shape(pv.view)

    portal.call(scenario)


def test_async_sessions_racing_on_one_stored_session_lose_nothing(
    async_backend: Backend, portal: BlockingPortal
) -> None:
    stores = {"A": async_store(async_backend), "B": async_store(async_backend)}
    checker = async_store(async_backend)

    async def scenario() -> None:
        sessions = {tag: await AsyncSession.open(SID, store=store, **OPTIONS) for tag, store in stores.items()}
        head = opening()
        sessions["A"].add(head)
        await sessions["A"].flush()
        recorders = {tag: recorded(s) for tag, s in sessions.items()}
        added: dict[str, list[str]] = {tag: [] for tag in sessions}

        async def writer(tag: str) -> None:
            s = sessions[tag]
            for i in range(12):
                r = make_round(tag, i)
                s.add(r)
                added[tag] += ids(r)
                await s.prepare()
                await anyio.sleep(0)  # let the other writer in between two prepares even on the memory store

        async with anyio.create_task_group() as tg:
            for tag in sessions:
                tg.start_soon(writer, tag)
        for tag, rec in recorders.items():
            assert rec.of("compaction.finished"), f"session {tag} never compacted"
        stored = ids(await checker.load_messages(SID))
        assert len(stored) == len(set(stored))
        assert sorted(stored) == sorted(ids(head) + added["A"] + added["B"])  # every message, once
        for tag in sessions:
            assert [i for i in stored if i in set(added[tag])] == added[tag]
        fresh = await AsyncSession.open(SID, store=checker, **OPTIONS)
        assert ids(fresh.transcript) == stored
        pv = await fresh.prepare(format="internal")
        fits(pv, fresh.budget.effective)
        listed = set(await checker.list_snapshots(SID))
        for m in stand_ins(pv):
            assert m.snapshot_id in listed

    portal.call(scenario)


def test_async_prepared_messages_stay_the_view_across_reloads(async_backend: Backend, portal: BlockingPortal) -> None:
    store, other = async_store(async_backend), async_store(async_backend)

    async def scenario() -> None:
        a = await AsyncSession.open(SID, store=store, **OPTIONS)
        a.add(opening())
        await a.flush()
        b = await AsyncSession.open(SID, store=other, **OPTIONS)
        for step in range(36):
            s, tag = ((a, "a"), (b, "b"))[step // 3 % 2]
            s.add(make_round(tag, step))
            pv = await s.prepare()
            assert pv.messages == from_messages(pv.view, format="openai"), f"step {step}: session {tag}"

    portal.call(scenario)


# --- tenants and corrupted snapshots -------------------------------------------------------------


def test_sync_session_of_another_tenant_fails_like_a_missing_one(sync_backend: Backend) -> None:
    store = sync_backend.make()
    owner = Session(SID, store=store, tenant="acme", **OPTIONS)
    head = opening()
    owner.add(head)
    with pytest.raises(SessionNotFound) as info:
        Session(SID, store=sync_backend.make(), tenant="evil", **OPTIONS)
    assert info.value.session_id == SID
    assert store.load_messages(SID, tenant="acme") == head  # nothing was appended
    assert store.get_session(SID).tenant == "acme"
    # the id deleted, then taken by another tenant: the live session does not write into that session
    store.delete_session(SID)
    store.create_session(SID, tenant="evil")
    with pytest.raises(SessionLost):
        owner.add(make_round("x", 0))
    assert store.count_messages(SID) == 0


def test_async_session_of_another_tenant_fails_like_a_missing_one(
    async_backend: Backend, portal: BlockingPortal
) -> None:
    store, other = async_store(async_backend), async_store(async_backend)

    async def scenario() -> None:
        owner = await AsyncSession.open(SID, store=store, tenant="acme", **OPTIONS)
        head = opening()
        owner.add(head)
        await owner.flush()
        with pytest.raises(SessionNotFound):
            await AsyncSession.open(SID, store=other, tenant="evil", **OPTIONS)
        assert await store.load_messages(SID, tenant="acme") == head
        await store.delete_session(SID)
        await store.create_session(SID, tenant="evil")
        owner.add(make_round("x", 0))
        with pytest.raises(SessionLost):
            await owner.flush()
        assert await store.count_messages(SID) == 0

    portal.call(scenario)


def test_sync_corrupted_snapshot_is_a_schema_error_naming_it(sync_backend: Backend) -> None:
    store = sync_backend.make()
    s = Session(SID, store=store, **OPTIONS)
    s.add(opening())
    pv, _ = grow(s, store)
    target = snapshot_of(stand_ins(pv)[0])
    for blob, field in ((b"{not json", "not UTF-8 JSON"), (b"\xff\xfe", "not UTF-8 JSON"), (b"[1]", "not an object")):
        store.put_snapshot(SID, target, blob)
        with pytest.raises(SchemaError) as info:
            s.read_context(target)
        assert info.value.session_id == SID
        assert repr(target) in str(info.value) and field in str(info.value)
    store.put_snapshot(SID, target, json.dumps({"messages": [{"role": "user", "parts": 3}]}).encode())
    with pytest.raises(SchemaError, match=r"`messages\[0\]`"):
        s.read_context(target)

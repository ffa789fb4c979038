"""The store contract, run on memory, SQLite, Redis and Postgres, through the sync and async twins."""

from __future__ import annotations

import base64
import functools
import gc
import json
import os
import socket
import threading
import time
from typing import Any

import pytest

from contextwarden.exceptions import (
    LockTimeout,
    MessageError,
    MessageNotFound,
    SchemaError,
    SessionExists,
    SessionNotFound,
    SnapshotError,
    UsageError,
    VersionConflict,
)
from contextwarden.messages import ImagePart, Message, TextPart, ThinkingPart, ToolCall
from contextwarden.stores import MemoryStore, SessionInfo, StateWrite

from ._helpers import NASTY_IDS

Backend = Any
FakeClock = Any


def rounds(count: int, *, prefix: str = "m") -> list[Message]:
    """``count`` messages with every kind of part, and fixed ids."""
    messages: list[Message] = []
    for i in range(count):
        kind = i % 4
        message_id = f"{prefix}-{i}"
        if kind == 0:
            messages.append(Message.user(f"question {i} — ünïcödé 你好", message_id=message_id, turn=i))
        elif kind == 1:
            messages.append(
                Message(
                    role="assistant",
                    parts=(
                        ThinkingPart(text="let me think", signature="sig"),
                        TextPart(text="calling"),
                        ToolCall(call_id=f"c{i}", name="read_file", arguments=json.dumps({"path": f"/tmp/{i}"})),
                    ),
                    message_id=message_id,
                    extra={"provider": {"x": [1, 2, None]}},
                )
            )
        elif kind == 2:
            messages.append(
                Message.tool_result(f"c{i - 1}", "line\n" * 50, name="read_file", message_id=message_id, is_error=True)
            )
        else:
            messages.append(
                Message(
                    role="user",
                    parts=(TextPart(text="look"), ImagePart(url="data:image/png;base64,AAAA", width=10, height=20)),
                    message_id=message_id,
                    pinned=True,
                    source_ids=("a", "b"),
                    created_at=1.5,
                )
            )
    return messages


# --- sessions ------------------------------------------------------------------------------------


def test_create_is_idempotent_and_returns_the_existing_session(store: Any, clock: FakeClock) -> None:
    first = store.create_session("s1", tenant="acme", model="gpt-4.1", window=128_000, metadata={"k": [1, "v"]})
    assert first == SessionInfo(
        session_id="s1",
        tenant="acme",
        created_at=clock.now,
        last_active=clock.now,
        model="gpt-4.1",
        window=128_000,
        metadata={"k": [1, "v"]},
        message_count=0,
    )
    clock.advance(5)
    again = store.create_session("s1", tenant="acme", model="x", metadata={"new": True})
    assert again == first
    assert store.get_session("s1") == first


# --- tenants -------------------------------------------------------------------------------------


def _tenant_calls(store: Any, session_id: str, tenant: str) -> dict[str, Any]:
    """Every store call that names a session, made for ``tenant``."""
    return {
        "get_session": lambda: store.get_session(session_id, tenant=tenant),
        "touch": lambda: store.touch(session_id, tenant=tenant),
        "append_messages": lambda: store.append_messages(session_id, rounds(1, prefix="evil"), tenant=tenant),
        "load_messages": lambda: store.load_messages(session_id, tenant=tenant),
        "count_messages": lambda: store.count_messages(session_id, tenant=tenant),
        "get_message": lambda: store.get_message(session_id, "m-0", tenant=tenant),
        "load_state": lambda: store.load_state(session_id, tenant=tenant),
        "save_state": lambda: store.save_state(session_id, {"evil": True}, expected_version=1, tenant=tenant),
        "put_snapshot": lambda: store.put_snapshot(session_id, "snap", b"evil", tenant=tenant),
        "get_snapshot": lambda: store.get_snapshot(session_id, "snap", tenant=tenant),
        "list_snapshots": lambda: store.list_snapshots(session_id, tenant=tenant),
        "append_audit": lambda: store.append_audit(session_id, {"evil": True}, tenant=tenant),
        "read_audit": lambda: store.read_audit(session_id, tenant=tenant),
        "export_session": lambda: list(store.export_session(session_id, tenant=tenant)),
        "lock": lambda: store.lock(session_id, timeout=0.2, tenant=tenant).__enter__(),
        "archive": lambda: store.archive(session_id, tenant=tenant),
        "delete_session": lambda: store.delete_session(session_id, tenant=tenant),
    }


def test_another_tenants_session_fails_exactly_like_a_missing_one(store: Any) -> None:
    store.create_session("shared", tenant="acme", metadata={"owner": "acme"})
    store.append_messages("shared", rounds(3), tenant="acme")
    store.save_state("shared", {"v": 1}, expected_version=0, tenant="acme")
    store.put_snapshot("shared", "snap", b"acme's", tenant="acme")
    store.append_audit("shared", {"n": 1}, tenant="acme")
    before = list(store.export_session("shared"))

    for name, call in _tenant_calls(store, "shared", "evil").items():
        with pytest.raises(SessionNotFound) as foreign:
            call()
        with pytest.raises(SessionNotFound) as missing:
            _tenant_calls(store, "nowhere", "evil")[name]()
        # the same error: a tenant cannot even tell the other tenant's session exists
        assert str(foreign.value).replace("'shared'", "ID") == str(missing.value).replace("'nowhere'", "ID"), name
        assert foreign.value.session_id == "shared"
    with pytest.raises(SessionNotFound, match="another tenant"):
        store.create_session("shared", tenant="evil")
    assert store.list_sessions(tenant="evil") == ([], None)

    # nothing of acme's changed, and acme's own calls (naming acme, or no tenant) still work
    assert list(store.export_session("shared", tenant="acme")) == before
    assert store.get_session("shared", tenant="acme").metadata == {"owner": "acme"}
    assert store.count_messages("shared", tenant="acme") == 3
    with store.lock("shared", timeout=1.0, tenant="acme"):  # the failed lock call took nothing
        pass
    assert store.append_messages("shared", rounds(4), tenant="acme") == 1
    store.delete_session("shared", tenant="acme")
    with pytest.raises(SessionNotFound):
        store.get_session("shared")


def test_an_invalid_tenant_is_a_usage_error(store: Any) -> None:
    store.create_session("s")
    for bad in ("", "a\nb", 7):
        with pytest.raises(UsageError, match="tenant"):
            store.load_messages("s", tenant=bad)


def test_missing_session_raises_session_not_found(store: Any) -> None:
    for call in (
        lambda: store.get_session("nope"),
        lambda: store.touch("nope"),
        lambda: store.append_messages("nope", rounds(1)),
        lambda: store.load_messages("nope"),
        lambda: store.count_messages("nope"),
        lambda: store.load_state("nope"),
        lambda: store.save_state("nope", {}, expected_version=0),
        lambda: store.put_snapshot("nope", "s", b""),
        lambda: store.list_snapshots("nope"),
        lambda: store.append_audit("nope", {}),
        lambda: store.read_audit("nope"),
        lambda: store.archive("nope"),
        lambda: store.delete_session("nope"),
        lambda: list(store.export_session("nope")),
    ):
        with pytest.raises(SessionNotFound) as info:
            call()
        assert info.value.session_id == "nope"
        assert "create_session" in str(info.value)


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [("", "empty"), ("x" * 201, "201 characters"), ("a\nb", "control character"), ("a\x00", "control"), (5, "string")],
)
def test_invalid_session_ids_are_rejected(store: Any, bad: Any, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        store.create_session(bad)


def test_nasty_ids_are_stored_safely_and_stay_apart(store: Any) -> None:
    for index, session_id in enumerate(NASTY_IDS):
        store.create_session(session_id, metadata={"index": index})
        store.append_messages(session_id, [Message.user(session_id, message_id=f"only-{index}")])
        store.save_state(session_id, {"owner": session_id}, expected_version=0)
        store.put_snapshot(session_id, session_id, session_id.encode())
    for index, session_id in enumerate(NASTY_IDS):
        assert store.get_session(session_id).metadata == {"index": index}
        assert [m.text for m in store.load_messages(session_id)] == [session_id]
        assert store.load_state(session_id) == ({"owner": session_id}, 1)
        assert store.list_snapshots(session_id) == [session_id]
        assert store.get_snapshot(session_id, session_id) == session_id.encode()
    listed, _ = store.list_sessions(limit=100)
    assert sorted(NASTY_IDS) == [info.session_id for info in listed]


def test_touch_moves_last_active(store: Any, clock: FakeClock) -> None:
    store.create_session("s")
    clock.advance(30)
    store.touch("s")
    assert store.get_session("s").last_active == clock.now


def test_list_sessions_paginates_by_id_and_filters_tenant(store: Any) -> None:
    ids = [f"sess-{i:02d}" for i in range(23)]
    for i, session_id in enumerate(reversed(ids)):
        store.create_session(session_id, tenant="a" if i % 3 else "b")
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page, cursor = store.list_sessions(limit=5, cursor=cursor)
        pages += 1
        seen.extend(info.session_id for info in page)
        assert len(page) <= 5
        if cursor is None:
            break
    assert seen == ids
    assert pages == 5
    tenant_b, cursor = store.list_sessions(tenant="b", limit=100)
    assert cursor is None
    assert [info.session_id for info in tenant_b] == sorted(s for i, s in enumerate(reversed(ids)) if i % 3 == 0)
    assert all(info.tenant == "b" for info in tenant_b)
    assert store.list_sessions(tenant="nobody") == ([], None)
    with pytest.raises(UsageError):
        store.list_sessions(limit=0)


def test_archive_hides_from_listing_and_keeps_content(store: Any, clock: FakeClock) -> None:
    for session_id in ("a", "b", "c"):
        store.create_session(session_id)
    store.append_messages("b", rounds(2))
    clock.advance(10)
    store.archive("b")
    archived_at = clock.now
    clock.advance(10)
    store.archive("b")  # archiving twice keeps the first time
    assert store.get_session("b").archived_at == archived_at
    assert store.get_session("b").archived
    assert [i.session_id for i in store.list_sessions()[0]] == ["a", "c"]
    assert [i.session_id for i in store.list_sessions(include_archived=True)[0]] == ["a", "b", "c"]
    assert store.load_messages("b") == rounds(2)


def test_delete_removes_everything(store: Any) -> None:
    store.create_session("s", metadata={"old": True})
    store.append_messages("s", rounds(3))
    store.save_state("s", {"v": 1}, expected_version=0)
    store.put_snapshot("s", "snap", b"data")
    store.append_audit("s", {"event": 1})
    store.delete_session("s")
    with pytest.raises(SessionNotFound):
        store.get_session("s")
    assert store.list_sessions() == ([], None)
    fresh = store.create_session("s")
    assert fresh.metadata == {}
    assert store.load_messages("s") == []
    assert store.append_messages("s", rounds(3)) == 3  # the old ids are gone too
    assert store.load_state("s") == (None, 0)
    assert store.list_snapshots("s") == []
    assert store.read_audit("s") == []


def test_expire_idle_removes_idle_unarchived_sessions(store: Any, clock: FakeClock) -> None:
    for session_id in ("old", "archived", "busy", "touched"):
        store.create_session(session_id)
    store.append_messages("old", rounds(2))
    store.archive("archived")
    clock.advance(100)
    store.append_messages("busy", rounds(1))
    store.touch("touched")
    clock.advance(50)
    assert store.expire_idle(120) == ["old"]
    assert [i.session_id for i in store.list_sessions(include_archived=True)[0]] == ["archived", "busy", "touched"]
    with pytest.raises(SessionNotFound):
        store.load_messages("old")
    assert store.expire_idle(120) == []
    clock.advance(1000)
    assert store.expire_idle(120) == ["busy", "touched"]
    assert store.get_session("archived").archived


# --- transcript ----------------------------------------------------------------------------------


def test_append_and_load_round_trip_every_part_kind(store: Any) -> None:
    store.create_session("s")
    messages = rounds(12)
    assert store.append_messages("s", messages[:5]) == 5
    assert store.append_messages("s", messages[5:]) == 7
    assert store.load_messages("s") == messages
    assert store.count_messages("s") == 12
    assert store.get_session("s").message_count == 12
    assert store.get_message("s", "m-7") == messages[7]


def test_append_is_idempotent_by_message_id(store: Any) -> None:
    store.create_session("s")
    messages = rounds(6)
    assert store.append_messages("s", messages[:4]) == 4
    assert store.append_messages("s", messages[2:]) == 2
    assert store.append_messages("s", messages) == 0
    duplicate_in_batch = [Message.user("x", message_id="dup"), Message.user("y", message_id="dup")]
    assert store.append_messages("s", duplicate_in_batch) == 1
    assert store.append_messages("s", []) == 0
    loaded = store.load_messages("s")
    assert [m.message_id for m in loaded] == [f"m-{i}" for i in range(6)] + ["dup"]
    assert loaded[-1].text == "x"


def test_an_append_with_an_expected_count_writes_only_at_that_length(store: Any, clock: FakeClock) -> None:
    store.create_session("s")
    messages = rounds(6)
    assert store.append_messages("s", messages[:2], expected_count=0) == 2
    assert store.append_messages("s", messages[2:3], expected_count=2) == 1
    before = store.get_session("s").last_active
    clock.advance(5)
    with pytest.raises(VersionConflict) as info:
        store.append_messages("s", messages[3:5], expected_count=2)  # another writer appended meanwhile
    assert (info.value.expected, info.value.actual, info.value.session_id) == (2, 3, "s")
    with pytest.raises(VersionConflict):
        store.append_messages("s", messages[3:5], expected_count=4)  # ahead of the store: refused too
    with pytest.raises(VersionConflict):
        store.append_messages("s", messages[:1], expected_count=0)  # even when nothing would be new
    assert store.load_messages("s") == messages[:3]  # a refused append writes nothing
    assert store.get_session("s").last_active == before  # nor counts as activity
    assert store.append_messages("s", [], expected_count=3) == 0  # an empty batch only checks the length
    assert store.append_messages("s", messages[2:5], expected_count=3) == 2  # still idempotent by id
    assert store.count_messages("s") == 5
    with pytest.raises(UsageError):
        store.append_messages("s", messages[5:], expected_count=-1)
    with pytest.raises(SessionNotFound):
        store.append_messages("ghost", messages[5:], expected_count=0)
    store.create_session("t", tenant="other")
    with pytest.raises(SessionNotFound):  # another tenant's session: missing, whatever the count
        store.append_messages("t", messages[5:], tenant="default", expected_count=0)


def test_load_pages_by_position(store: Any) -> None:
    store.create_session("s")
    messages = rounds(10)
    store.append_messages("s", messages)
    assert store.load_messages("s", start=3, limit=4) == messages[3:7]
    assert store.load_messages("s", start=8) == messages[8:]
    assert store.load_messages("s", start=10) == []
    assert store.load_messages("s", start=50, limit=5) == []
    assert store.load_messages("s", limit=0) == []
    with pytest.raises(UsageError):
        store.load_messages("s", start=-1)


def test_get_message_missing(store: Any) -> None:
    store.create_session("s")
    with pytest.raises(MessageNotFound) as info:
        store.get_message("s", "ghost")
    assert info.value.message_id == "ghost"


def test_a_bad_message_rejects_the_whole_batch(store: Any) -> None:
    store.create_session("s")
    good = rounds(3)
    bad = Message.user("x", message_id="bad", extra={"not json": object()})
    with pytest.raises(MessageError, match="message 3"):
        store.append_messages("s", [*good, bad])
    with pytest.raises(MessageError, match="expected a `Message`"):
        store.append_messages("s", [*good, {"role": "user"}])
    with pytest.raises(MessageError, match="message_id"):
        store.append_messages("s", [Message.user("x", message_id="a\tb")])
    with pytest.raises(MessageError, match="surrogate"):
        store.append_messages("s", [*good, Message.user("half a pair: \ud83d")])
    assert store.load_messages("s") == []


def test_transcripts_of_sessions_are_isolated(store: Any) -> None:
    store.create_session("a")
    store.create_session("b")
    store.append_messages("a", rounds(3))
    assert store.append_messages("b", rounds(3)) == 3  # same ids, other session
    assert store.count_messages("a") == store.count_messages("b") == 3
    with pytest.raises(MessageNotFound):
        store.get_message("a", "only-in-b")


# --- state ---------------------------------------------------------------------------------------


def test_state_compare_and_set(store: Any) -> None:
    store.create_session("s")
    assert store.load_state("s") == (None, 0)
    state = {"summaries": [{"span": ["m-1", "m-9"], "text": "Σ résumé"}], "counters": {"turns": 3}, "f": 0.25}
    assert store.save_state("s", state, expected_version=0) == 1
    assert store.load_state("s") == (state, 1)
    assert store.save_state("s", {"v": 2}, expected_version=1) == 2
    with pytest.raises(VersionConflict) as info:
        store.save_state("s", {"stale": True}, expected_version=1)
    assert (info.value.expected, info.value.actual, info.value.session_id) == (1, 2, "s")
    with pytest.raises(VersionConflict) as info:
        store.save_state("s", {"stale": True}, expected_version=0)
    assert info.value.actual == 2
    with pytest.raises(VersionConflict):
        store.save_state("s", {"future": True}, expected_version=7)
    assert store.load_state("s") == ({"v": 2}, 2)


def test_an_append_saves_a_state_slot_in_the_same_write_over_any_version(store: Any) -> None:
    store.create_session("s")
    messages = rounds(3)
    figures = {"figures": {"used": 120, "turn": 1}}
    assert store.append_messages("s", messages[:2], state=StateWrite(slot="status", state=figures)) == 2
    assert store.load_state("s", slot="status") == (figures, 1)
    store.save_state("s", {"by": "another writer"}, expected_version=1, slot="status")
    later = {"figures": {"used": 180, "turn": 2}}
    stale = StateWrite(slot="status", state=later, version=1)  # the writer's version is behind: saved anyway
    assert store.append_messages("s", messages[2:], state=stale) == 1
    assert store.load_state("s", slot="status") == (later, 3)
    assert store.load_state("s") == (None, 0)  # other slots are untouched
    with pytest.raises(VersionConflict):  # a refused append saves nothing
        store.append_messages("s", rounds(4, prefix="n"), expected_count=0, state=StateWrite(slot="status", state={}))
    assert store.load_state("s", slot="status") == (later, 3) and store.count_messages("s") == 3


def test_state_slots_are_independent(store: Any) -> None:
    store.create_session("s")
    store.save_state("s", {"view": 1}, expected_version=0)
    assert store.load_state("s", slot="agent") == (None, 0)
    assert store.save_state("s", {"agent": 1}, expected_version=0, slot="agent") == 1
    assert store.save_state("s", {"view": 2}, expected_version=1) == 2
    assert store.load_state("s", slot="agent") == ({"agent": 1}, 1)


def test_state_must_be_a_json_object(store: Any) -> None:
    store.create_session("s")
    with pytest.raises(UsageError, match="dict"):
        store.save_state("s", [1, 2], expected_version=0)
    with pytest.raises(UsageError, match="JSON"):
        store.save_state("s", {"x": {1, 2}}, expected_version=0)
    with pytest.raises(UsageError, match="JSON"):
        store.save_state("s", {"x": float("nan")}, expected_version=0)
    with pytest.raises(UsageError, match="lone surrogate"):
        store.save_state("s", {"x": "bad \ud800"}, expected_version=0)
    with pytest.raises(UsageError, match="expected_version"):
        store.save_state("s", {}, expected_version=-1)
    assert store.load_state("s") == (None, 0)


# --- snapshots and audit -------------------------------------------------------------------------


def test_snapshots_store_bytes(store: Any) -> None:
    store.create_session("s")
    store.create_session("other")
    every_byte = bytes(range(256)) * 4
    store.put_snapshot("s", "snap_b", every_byte, metadata={"tool": "read"})
    store.put_snapshot("s", "snap_a", b"")
    assert store.get_snapshot("s", "snap_b") == every_byte
    assert store.get_snapshot("s", "snap_a") == b""
    assert store.list_snapshots("s") == ["snap_a", "snap_b"]
    store.put_snapshot("s", "snap_a", b"replaced")
    assert store.get_snapshot("s", "snap_a") == b"replaced"
    with pytest.raises(SnapshotError, match="list_snapshots"):
        store.get_snapshot("other", "snap_b")
    with pytest.raises(SnapshotError):
        store.get_snapshot("s", "x\ny")
    with pytest.raises(UsageError, match="bytes"):
        store.put_snapshot("s", "text", "not bytes")


def test_audit_log_appends_and_reads_in_order(store: Any) -> None:
    store.create_session("s")
    events = [{"type": "compaction.finished", "layer": i, "tokens": [100, 50]} for i in range(7)]
    for event in events:
        store.append_audit("s", event)
    assert store.read_audit("s") == events
    assert store.read_audit("s", since=5) == events[5:]
    assert store.read_audit("s", since=2, limit=3) == events[2:5]
    assert store.read_audit("s", since=20) == []
    with pytest.raises(UsageError):
        store.append_audit("s", ["not", "a", "dict"])


def test_writes_count_as_activity(store: Any, clock: FakeClock) -> None:
    store.create_session("s")
    for write in (
        lambda: store.append_messages("s", rounds(1)),
        lambda: store.save_state("s", {}, expected_version=store.load_state("s")[1]),
        lambda: store.put_snapshot("s", "x", b""),
        lambda: store.append_audit("s", {}),
    ):
        clock.advance(10)
        write()
        assert store.get_session("s").last_active == clock.now


# --- export / import -----------------------------------------------------------------------------


def _fill(store: Any, session_id: str) -> None:
    store.create_session(session_id, tenant="acme", model="m", window=1000, metadata={"k": "v"})
    store.append_messages(session_id, rounds(1203))
    store.save_state(session_id, {"format": 1, "summary": "x"}, expected_version=0)  # a view state a session opens
    store.save_state(session_id, {"format": 1, "summary": "y"}, expected_version=1)
    store.save_state(session_id, {"goal": "g"}, expected_version=0, slot="agent")
    store.put_snapshot(session_id, "snap_1", bytes(range(256)), metadata={"tool": "t"})
    for i in range(3):
        store.append_audit(session_id, {"n": i})


def test_export_import_round_trip(store: Any) -> None:
    _fill(store, "src")
    store.archive("src")
    lines = list(store.export_session("src"))
    assert all(line.endswith("\n") for line in lines)
    records = [json.loads(line) for line in lines]
    assert records[0]["type"] == "session" and records[0]["format"] == "contextwarden.session"
    assert sum(r["type"] == "message" for r in records) == 1203
    snapshot = next(r for r in records if r["type"] == "snapshot")
    assert base64.b64decode(snapshot["data_b64"]) == bytes(range(256))

    info = store.import_session(lines, session_id="copy")
    original = store.get_session("src")
    assert info.message_count == 1203
    assert (info.tenant, info.model, info.window, info.metadata) == ("acme", "m", 1000, {"k": "v"})
    assert info.archived_at == original.archived_at
    assert info.created_at == original.created_at
    assert store.load_messages("copy") == store.load_messages("src")
    assert store.load_state("copy") == ({"format": 1, "summary": "y"}, 2)
    assert store.load_state("copy", slot="agent") == ({"goal": "g"}, 1)
    assert store.get_snapshot("copy", "snap_1") == bytes(range(256))
    assert store.read_audit("copy") == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert list(store.export_session("copy"))[1:] == lines[1:]


def test_export_moves_between_backends(store: Any) -> None:
    _fill(store, "src")
    target = MemoryStore()
    target.import_session(store.export_session("src"))
    assert target.load_messages("src") == store.load_messages("src")
    back = list(target.export_session("src"))
    store.delete_session("src")
    store.import_session(back)
    assert store.load_state("src") == ({"format": 1, "summary": "y"}, 2)


def test_import_refuses_to_overwrite_and_bad_input(store: Any) -> None:
    store.create_session("s")
    store.append_messages("s", rounds(2))
    lines = list(store.export_session("s"))
    with pytest.raises(SessionExists):
        store.import_session(lines)
    with pytest.raises(SchemaError, match="header"):
        store.import_session(['{"type": "message"}'], session_id="t")
    with pytest.raises(SchemaError, match="empty"):
        store.import_session([], session_id="t")
    broken = [*lines[:2], "{not json\n", lines[2]]
    with pytest.raises(SchemaError, match="line 3"):
        store.import_session(broken, session_id="t")
    # A failed import leaves nothing behind.
    with pytest.raises(SessionNotFound):
        store.get_session("t")


# --- locks ---------------------------------------------------------------------------------------


def test_lock_excludes_and_times_out(backend: Backend) -> None:
    first = backend.make()
    second = backend.make()
    first.create_session("s")
    with first.lock("s", timeout=1.0):
        started = time.monotonic()
        with pytest.raises(LockTimeout) as info, second.lock("s", timeout=0.2):
            pass
        assert time.monotonic() - started >= 0.19
        assert info.value.session_id == "s" and info.value.timeout == 0.2
    with second.lock("s", timeout=1.0):
        pass
    with pytest.raises(SessionNotFound):
        with first.lock("ghost", timeout=0.1):
            pass


def test_lock_serializes_read_modify_write(backend: Backend) -> None:
    """Writers holding the lock never conflict: the lock orders their load/save pairs."""
    stores = [backend.make() for _ in range(3)]
    stores[0].create_session("s")
    conflicts: list[BaseException] = []

    def work(store: Any) -> None:
        for _ in range(5):
            with store.lock("s", timeout=20):
                state, version = store.load_state("s")
                count = (state or {}).get("count", 0)
                time.sleep(0.002)
                try:
                    store.save_state("s", {"count": count + 1}, expected_version=version)
                except VersionConflict as exc:  # pragma: no cover - the assertion below reports it
                    conflicts.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert conflicts == []
    assert stores[0].load_state("s") == ({"count": 15}, 15)


def test_a_live_holder_keeps_its_lock_past_its_lease_and_the_timeout_says_who(backend: Backend) -> None:
    """The holder's heartbeat renews its short lease, so a slow holder is never mistaken for a dead one."""
    holder = backend.make(lock_lease=0.5)
    other = backend.make(lock_lease=0.5)
    holder.create_session("s")
    # A full collection of the test process's heap (late in a long suite) can hold the GIL longer
    # than this test's half-second lease; the heartbeat is what is under test, not the collector.
    gc.collect()
    gc.disable()
    try:
        with holder.lock("s", timeout=1.0):
            deadline = time.monotonic() + 1.5  # three leases
            while time.monotonic() < deadline:
                with pytest.raises(LockTimeout) as info, other.lock("s", timeout=0.1):
                    pass
            text = str(info.value)
            assert "compacting" not in text  # only what is known
            if backend.name == "postgres":
                assert "held by Postgres backend pid" in text and "connected since" in text
                assert info.value.expires_in is None
            else:
                assert f"held by {socket.gethostname()} pid {os.getpid()} since " in text
                assert "lease expires in" in text
                assert info.value.holder == f"{socket.gethostname()} pid {os.getpid()}"
                assert info.value.since is not None and abs(info.value.since - time.time()) < 5
                assert info.value.expires_in is not None and 0 <= info.value.expires_in <= 0.5
    finally:
        gc.enable()
    with other.lock("s", timeout=1.0):
        pass


def test_the_lock_block_s_own_error_comes_out_unchanged(backend: Backend) -> None:
    store = backend.make()
    store.create_session("s")
    with pytest.raises(VersionConflict):
        with store.lock("s", timeout=1.0):
            store.save_state("s", {}, expected_version=0)
            store.save_state("s", {}, expected_version=0)
    with store.lock("s", timeout=1.0):  # released
        pass


def _run_op(store: Any, op: Any) -> Any:
    """Run one backend operation on a sync store or (through its portal) an async one."""
    inner = getattr(store, "inner", None)
    if inner is None:
        return store._run(op, write=True)
    return store.portal.call(functools.partial(inner._run, op, write=True))


def _ops(store: Any) -> Any:
    return getattr(store, "inner", store)._ops


def test_a_dead_holders_lease_runs_out_and_its_late_release_frees_nothing(backend: Backend) -> None:
    if backend.name == "postgres":
        pytest.skip("Postgres's advisory lock ends with its holder's connection (test_faults kills a holder)")
    holder, other = backend.make(), backend.make()
    holder.create_session("s")
    # A holder that died right after taking the lock: nobody renews its 1 s lease. Leases run on
    # the wall clock every process shares, not on the stores' (fake) clock.
    dead = "f00d|other-host|4242|1750000000.000"
    assert _run_op(holder, _ops(holder).try_lock("s", dead, lease=1.0, now=time.time()))
    with pytest.raises(LockTimeout, match="held by other-host pid 4242 since .*lease expires in 0") as info:
        with other.lock("s", timeout=0.05):
            pass
    assert info.value.holder == "other-host pid 4242" and info.value.since == 1_750_000_000.0
    started = time.monotonic()
    with other.lock("s", timeout=10):
        assert time.monotonic() - started < 3  # one lease, not the old 60 s
        _run_op(holder, _ops(holder).unlock("s", dead))  # the stale holder wakes up and releases
        with pytest.raises(LockTimeout):
            with holder.lock("s", timeout=0.05):
                pass

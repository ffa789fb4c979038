"""Snapshot stores: safe ids, sessions that cannot escape their directory, atomic writes, read-back."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from compaction._helpers import make_text, tool_round
from contextkeeper.compaction.config import CompactionConfig
from contextkeeper.exceptions import SnapshotError
from contextkeeper.messages import Message
from contextkeeper.session import Session
from contextkeeper.snapshots import (
    FileSnapshotStore,
    MemorySnapshotStore,
    SnapshotStore,
    encode_snapshot,
    make_snapshot_id,
    read_context,
    safe_session_dir,
)

GOOD = make_snapshot_id("ses_1", "msg_1")
BAD_IDS = [
    "../../etc/passwd",
    "snap_../../x",
    "snap_" + "A" * 24,
    "snap_" + "0" * 23,
    "snap_" + "0" * 25,
    "snap_" + "0" * 24 + "/",
    "/abs/path",
    "",
    "SNAP_" + "0" * 24,
    "snap_" + "0" * 22 + "..",
]
NASTY_SESSIONS = [
    "../../escape",
    "a/b",
    "a\\b",
    "/abs",
    "..",
    ".",
    'quo"te',
    "it's",
    "new\nline",
    "nul\x00byte",
    "x" * 10_000,
    "ünïcödé",
    "C:\\Windows",
    "",
]


def stores(tmp_path: Path) -> list[SnapshotStore]:
    return [MemorySnapshotStore(), FileSnapshotStore(tmp_path / "snaps")]


def test_generated_ids_are_deterministic_and_safe() -> None:
    a = make_snapshot_id("ses_1", "msg_1")
    assert a == make_snapshot_id("ses_1", "msg_1")
    assert a != make_snapshot_id("ses_2", "msg_1") != make_snapshot_id("ses_1", "msg_2")
    assert len(a) == 29 and a.startswith("snap_") and all(c in "0123456789abcdef" for c in a[5:])
    assert make_snapshot_id("../..", "\ud800").startswith("snap_")  # any input gives a safe id


@pytest.mark.parametrize("bad", BAD_IDS)
def test_stores_reject_ids_that_are_not_generated(tmp_path: Path, bad: str) -> None:
    for store in stores(tmp_path):
        with pytest.raises(SnapshotError):
            store.put_snapshot("ses_1", bad, b"{}")
        with pytest.raises(SnapshotError):
            store.get_snapshot("ses_1", bad)
    assert not list((tmp_path / "snaps").rglob("*")) or all(p.is_dir() for p in (tmp_path / "snaps").rglob("*"))


def test_round_trip_and_first_write_wins(tmp_path: Path) -> None:
    for store in stores(tmp_path):
        store.put_snapshot("ses_1", GOOD, b'{"v": 1}')
        store.put_snapshot("ses_1", GOOD, b'{"v": 2}')
        assert store.get_snapshot("ses_1", GOOD) == b'{"v": 1}'
        assert store.list_snapshots("ses_1") == [GOOD]
        assert store.list_snapshots("other") == []
        with pytest.raises(SnapshotError):
            store.get_snapshot("other", GOOD)  # another session cannot read it
        with pytest.raises(SnapshotError):
            store.get_snapshot("ses_1", make_snapshot_id("ses_1", "missing"))


@pytest.mark.parametrize("sid", NASTY_SESSIONS, ids=range(len(NASTY_SESSIONS)))
def test_session_ids_stay_inside_the_root(tmp_path: Path, sid: str) -> None:
    root = tmp_path / "snaps"
    outside = set(tmp_path.iterdir())
    store = FileSnapshotStore(root)
    snap = make_snapshot_id(sid, "m")
    store.put_snapshot(sid, snap, b"data")
    assert store.get_snapshot(sid, snap) == b"data"
    assert store.list_snapshots(sid) == [snap]
    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) == 1
    f = files[0].resolve()
    assert f.parent.parent == root.resolve()  # root/<one safe dir>/<id>.json
    assert f.name == f"{snap}.json"
    name = f.parent.name
    assert len(name) <= 64 and all(c.isalnum() and c.isascii() or c in "_-" for c in name)
    assert set(tmp_path.iterdir()) == outside | {root} or set(tmp_path.iterdir()) == outside
    assert safe_session_dir(sid) == name


def test_distinct_sessions_get_distinct_directories() -> None:
    names = {safe_session_dir(s) for s in NASTY_SESSIONS}
    assert len(names) == len(NASTY_SESSIONS)
    assert safe_session_dir("ses_abc-1") == "ses_abc-1"  # harmless ids stay readable


def test_writes_are_atomic_and_leave_no_temp_files(tmp_path: Path) -> None:
    store = FileSnapshotStore(tmp_path)
    payload = json.dumps({"messages": ["x" * 200_000]}).encode()
    ids = [make_snapshot_id("ses", f"m{i}") for i in range(8)]
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for snap in ids:
                store.put_snapshot("ses", snap, payload)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for snap in ids:
        assert store.get_snapshot("ses", snap) == payload  # complete, never half written
    leftovers = [p.name for p in tmp_path.rglob("*") if p.is_file() and not p.name.endswith(".json")]
    assert leftovers == []
    assert sorted(store.list_snapshots("ses")) == sorted(ids)


def test_read_context_cannot_leave_its_session(tmp_path: Path) -> None:
    store = FileSnapshotStore(tmp_path)
    msgs = [Message.user("secret of A")]
    snap = make_snapshot_id("A", msgs[0].message_id)
    store.put_snapshot("A", snap, encode_snapshot("round", msgs))
    assert "secret of A" in read_context(snap, session_id="A", snapshots=store).text
    with pytest.raises(SnapshotError):
        read_context(snap, session_id="B", snapshots=store)
    with pytest.raises(SnapshotError):
        read_context("../A/" + snap, session_id="B", snapshots=store)
    with pytest.raises(SnapshotError):
        read_context(f"{msgs[0].message_id}..{msgs[0].message_id}", session_id="B", snapshots=store)
    with pytest.raises(SnapshotError, match="transcript"):
        read_context("a..b", session_id="A", snapshots=store)


def test_session_with_a_file_store_writes_snapshots_under_its_directory(tmp_path: Path) -> None:
    store = FileSnapshotStore(tmp_path)
    s = Session(
        "../tenant/ses 1",
        window=3000,
        counter="heuristic",
        snapshots=store,
        config=CompactionConfig(keep_recent_rounds=1, clear_after_rounds=2),
    )
    s.add([Message.system("sys"), Message.user("go")])
    for i in range(12):
        s.add(tool_round(f"c{i}", make_text(1500, seed=i), q=f"q{i}"))
        s.prepare()
    written = store.list_snapshots(s.session_id)
    assert written
    for p in tmp_path.rglob("*.json"):
        assert p.resolve().parent == (tmp_path / safe_session_dir(s.session_id)).resolve()
    doc = json.loads(store.get_snapshot(s.session_id, written[0]))
    assert doc["kind"] == "round" and doc["messages"][0]["role"] == "assistant"
    assert "msg_" in s.read_context(written[0])

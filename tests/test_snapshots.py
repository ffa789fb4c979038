"""Snapshot stores: safe ids, sessions that cannot escape their directory, atomic writes, read-back."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from compaction._helpers import make_text, tool_round
from contextwarden.compaction.config import CompactionConfig
from contextwarden.exceptions import SnapshotError
from contextwarden.messages import Message
from contextwarden.session import Session
from contextwarden.snapshots import (
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


# --- documents made on first read (MemorySnapshotStore.put_snapshot_lazy) ----------------------


class _Maker:
    """A snapshot maker that counts its calls."""

    def __init__(self, kind: str, messages: list[Message]) -> None:
        self.kind, self.messages, self.calls = kind, messages, 0

    def __call__(self) -> bytes:
        self.calls += 1
        return encode_snapshot(self.kind, self.messages)


def test_lazy_snapshot_is_made_on_first_read_only_and_reads_like_an_eager_one() -> None:
    msgs = [Message.assistant("looking"), Message.user("订单 ORD-77 for Maria")]
    expected = encode_snapshot("round", msgs)
    store = MemorySnapshotStore()
    make = _Maker("round", msgs)
    store.put_snapshot_lazy("ses_1", GOOD, make)
    assert make.calls == 0  # writing costs nothing
    assert store.list_snapshots("ses_1") == [GOOD]  # listed before it is made
    assert store.list_snapshots("other") == []
    with pytest.raises(SnapshotError):
        store.get_snapshot("other", GOOD)  # another session cannot read it (nor make it)
    assert make.calls == 0
    assert store.get_snapshot("ses_1", GOOD) == expected
    assert make.calls == 1
    assert store.get_snapshot("ses_1", GOOD) == expected
    assert store.get_snapshot("ses_1", GOOD) == expected
    assert make.calls == 1  # made once, then kept
    assert "Maria" in read_context(GOOD, session_id="ses_1", snapshots=store).text


def test_lazy_snapshot_first_write_wins() -> None:
    first = [Message.user("first version")]
    second = [Message.user("second version")]
    store = MemorySnapshotStore()
    make_first, make_second = _Maker("round", first), _Maker("round", second)
    store.put_snapshot_lazy("ses_1", GOOD, make_first)
    store.put_snapshot_lazy("ses_1", GOOD, make_second)
    store.put_snapshot("ses_1", GOOD, b'{"v": 2}')
    assert store.get_snapshot("ses_1", GOOD) == encode_snapshot("round", first)
    assert (make_first.calls, make_second.calls) == (1, 0)
    # and a lazy write after an eager one keeps the eager document
    other = make_snapshot_id("ses_1", "msg_2")
    store.put_snapshot("ses_1", other, b'{"v": 1}')
    store.put_snapshot_lazy("ses_1", other, make_second)
    assert store.get_snapshot("ses_1", other) == b'{"v": 1}'
    assert make_second.calls == 0
    assert store.list_snapshots("ses_1") == sorted([GOOD, other])


@pytest.mark.parametrize("bad", BAD_IDS)
def test_lazy_put_rejects_ids_that_are_not_generated(bad: str) -> None:
    store = MemorySnapshotStore()
    make = _Maker("round", [Message.user("x")])
    with pytest.raises(SnapshotError):
        store.put_snapshot_lazy("ses_1", bad, make)
    assert store.list_snapshots("ses_1") == []
    assert make.calls == 0


class _CountingMemoryStore(MemorySnapshotStore):
    """A memory store that counts eager writes and how often each lazy document is made."""

    def __init__(self) -> None:
        super().__init__()
        self.eager: list[str] = []
        self.made: dict[str, int] = {}

    def put_snapshot(self, session_id: str, snapshot_id: str, data: bytes) -> None:
        self.eager.append(snapshot_id)
        super().put_snapshot(session_id, snapshot_id, data)

    def put_snapshot_lazy(self, session_id: str, snapshot_id: str, make: Callable[[], bytes]) -> None:
        self.made.setdefault(snapshot_id, 0)

        def counted() -> bytes:
            self.made[snapshot_id] += 1
            return make()

        super().put_snapshot_lazy(session_id, snapshot_id, counted)


def _small_window_session(snapshots: SnapshotStore) -> tuple[Session, dict[str, str], list[Message]]:
    """A 2,400-token session whose rounds are cleared and then evicted.

    Returns the session, the outputs by call id and the stand-ins its views showed.
    """
    s = Session(
        "ses_lazy",
        window=2400,
        reserved_output=0,
        counter="tiktoken:cl100k_base",
        snapshots=snapshots,
        config=CompactionConfig(keep_recent_rounds=1, clear_after_rounds=1),
    )
    s.add([Message.system("You audit accounts."), Message.user("Audit every account.")])
    outputs: dict[str, str] = {}
    stand_ins: dict[str, Message] = {}
    for i in range(14):
        out = f"account ACC-{i:03d} balance ${i}17.25\n" + make_text(1400, seed=i, chinese=i % 4 == 0)
        outputs[f"c{i}"] = out
        s.add(tool_round(f"c{i}", out, name="balance", account=f"ACC-{i:03d}"))
        for m in s.prepare(format="internal").view:
            if m.role == "tool" and m.snapshot_id is not None:
                stand_ins[m.message_id] = m
    return s, outputs, list(stand_ins.values())


def test_session_read_context_returns_the_full_output_behind_a_stand_in() -> None:
    store = _CountingMemoryStore()
    s, outputs, stand_ins = _small_window_session(store)
    assert stand_ins, "the small window must have cleared an output"
    evicted = [e for e in s.ledger.entries if e.snapshot_id is not None]
    assert evicted, "the small window must have evicted a round"
    referenced = {m.snapshot_id for m in stand_ins} | {e.snapshot_id for e in evicted}
    assert referenced <= set(s.snapshots.list_snapshots(s.session_id))
    # compaction in memory encodes nothing: every snapshot is made when it is first read
    assert store.eager == [] and set(store.made) >= referenced
    assert all(n == 0 for n in store.made.values())
    for m in stand_ins:
        assert m.snapshot_id is not None and m.tool_call_id is not None
        original = outputs[m.tool_call_id]
        assert original not in m.text  # shortened in the view...
        page = s.read_context(m.snapshot_id)
        assert original in page  # ...and whole in its snapshot
        assert (
            json.loads(s.snapshots.get_snapshot(s.session_id, m.snapshot_id))["messages"][1]["parts"][0]["text"]
            == original
        )
        assert store.made[m.snapshot_id] == 1
    for e in evicted:
        assert e.snapshot_id is not None
        call_id = next(c for c, out in outputs.items() if f"ACC-{int(c[1:]):03d}" in e.intention)
        assert outputs[call_id] in s.read_context(e.snapshot_id)
        assert store.made[e.snapshot_id] == 1
    s.read_context(stand_ins[0].snapshot_id or "")
    assert store.made[stand_ins[0].snapshot_id or ""] == 1  # read twice, made once
    unread = set(store.made) - referenced
    assert all(store.made[sid] == 0 for sid in unread)


def test_concurrent_first_reads_make_a_lazy_snapshot_once() -> None:
    store = MemorySnapshotStore()
    sid = make_snapshot_id("ses_1", "msg_1")
    calls: list[int] = []

    def make() -> bytes:
        calls.append(1)
        time.sleep(0.05)  # encoding a large round takes a while
        return encode_snapshot("round", [Message.user("x")])

    store.put_snapshot_lazy("ses_1", sid, make)
    barrier = threading.Barrier(4)

    def read() -> None:
        barrier.wait()
        store.get_snapshot("ses_1", sid)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1

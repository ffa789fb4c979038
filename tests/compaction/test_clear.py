"""The clear layer: old outputs become stand-ins (oldest first, down to the target) on a round book and in a
session, and the read-back tool answers for what was cleared.
"""

from __future__ import annotations

import json
import re

import pytest

from contextwarden import toolpairs
from contextwarden.compaction import clear
from contextwarden.compaction.config import CompactionConfig
from contextwarden.exceptions import SnapshotError
from contextwarden.messages import Message
from contextwarden.session import PreparedView, Session
from contextwarden.snapshots import READ_CONTEXT_TOOL

from ._helpers import CLEAR_ONLY, Recorder, book_totals_ok, make_book, make_text, session, tool_round

CONFIG = CompactionConfig(clear_after_rounds=2, keep_recent_rounds=1)


def tool_book(n: int, size: int = 2000, **kwargs: object) -> object:
    msgs = [Message.system("You audit shards."), Message.user("Audit every shard.")]
    for i in range(n):
        msgs += tool_round(f"c{i}", make_text(size, seed=i) + f"\nshard SH-{1000 + i} done", q=f"q{i}")
    return make_book(msgs, config=CONFIG, **kwargs)  # type: ignore[arg-type]


def test_clear_runs_oldest_first_and_stops_at_the_target() -> None:
    book = tool_book(8)
    before = book.total()
    target = before - 900
    change = clear.run(book, target, CONFIG, protected=book.protected(1))
    assert change.layer == "clear" and change.tokens_before == before and change.tokens_after == book.total()
    assert change.tokens_after <= target < change.tokens_before
    cleared = [r.ordinal for r in book.rounds if r.state == "cleared"]
    assert cleared == list(range(2, 2 + change.items))  # the oldest tool rounds, and only as many as needed
    assert change.items < 6
    assert book_totals_ok(book) and book.dirty


def test_clear_keeps_recent_and_protected_rounds_whole() -> None:
    book = tool_book(8)
    protected = book.protected(1) | {3}
    change = clear.run(book, 0, CONFIG, protected=protected)  # an unreachable target: clear all it may
    states = {r.ordinal: r.state for r in book.rounds if r.kind == "tool-call"}
    # rounds 2..9 are the tool rounds; the last two are too recent (clear_after_rounds=2)
    assert states == {
        2: "cleared",
        3: "full",
        4: "cleared",
        5: "cleared",
        6: "cleared",
        7: "cleared",
        8: "full",
        9: "full",
    }
    assert change.items == 5


def test_a_stand_in_keeps_head_identifiers_and_its_snapshot() -> None:
    book = tool_book(4)
    clear.run(book, 0, CONFIG, protected=set())
    r = book.rounds[2]
    original = book.transcript[r.indices[1]]
    stand_in = r.shown[1]  # type: ignore[index]
    sid = book.snapshot_id(r)
    assert stand_in.tool_call_id == original.tool_call_id and stand_in.source_ids == (original.message_id,)
    assert stand_in.snapshot_id == sid and f'read_context("{sid}")' in stand_in.text
    assert stand_in.text.split("\n")[1] in original.text  # the head
    assert book.accountant.count_message(stand_in) < book.counts[r.indices[1]]
    saved = json.loads(book.snapshots.get_snapshot("ses_book", sid))
    assert saved["kind"] == "round"
    assert [m["message_id"] for m in saved["messages"]] == [book.transcript[i].message_id for i in r.indices]


def test_a_used_large_output_is_cleared_however_recent() -> None:
    config = CompactionConfig(clear_after_rounds=5, tool_result_min_tokens=300)
    msgs = [Message.user("Read the log."), *tool_round("c0", make_text(3000, seed=3)), Message.assistant("Read it.")]
    msgs += [Message.user("Now summarize it.")]
    book = make_book(msgs, config=config)
    change = clear.run(book, 0, config, protected=book.protected(1))
    assert change.items == 1 and book.rounds[1].state == "cleared"


@pytest.mark.parametrize("limit", [40, 120, 400])
def test_a_preview_cut_fits_its_limit(limit: int) -> None:
    book = tool_book(1, size=6000)
    r = book.rounds[2]
    saved = clear.clear_round(book, r, CONFIG, reason="offloaded", cut=clear.Cut(mode="preview", limit=limit))
    assert saved > 0
    assert r.shown is not None and r.shown[1].message_id.endswith("~p")
    preview = r.shown[1]
    # within the limit, or (when even a short head does not fit) the snapshot reference alone
    assert book.accountant.count_message(preview) <= limit or "\n" not in preview.text


def test_small_outputs_are_not_worth_clearing() -> None:
    book = tool_book(6, size=100)
    change = clear.run(book, 0, CONFIG, protected=set())
    assert change.items == 0 and change.saved == 0
    assert all(r.state == "full" for r in book.rounds)


TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/billing.py", line 88, in charge\n'
    "ValueError: amount $12.50 rejected for INV-2024-0042\n"
)
IDS_TEXT = (
    "lookup finished without surprises for the nightly batch and every shard answered in time "
    "so nothing needed a retry today and the queue drained before the deadline as planned "
    "ORD-4411 /var/log/app/worker.log 2024-03-05 $1234.50 cust_99812\n"
)


def outputs() -> list[str]:
    outs = [make_text(2500, seed=i, error=(i == 1)) for i in range(8)]
    outs[2] = make_text(900, seed=2) + "\n" + TRACE + make_text(1500, seed=99)  # key lines deep inside
    outs[3] = IDS_TEXT + make_text(2400, seed=3)  # identifiers after a long head
    return outs


def cleared_session() -> tuple[Session, Recorder, list[list[Message]], PreparedView]:
    """Eight large tool rounds added at once; the one prepare passes high water and clears."""
    s, rec = session(5000, config=CLEAR_ONLY)
    s.add([Message.system("You are a billing agent."), Message.user("Reconcile the March invoices.")])
    rounds = [tool_round(f"c{i}", out, q=f"item-{i}", is_error=(i == 1)) for i, out in enumerate(outputs())]
    for r in rounds:
        s.add(r)
    assert s.accountant.count_messages(s.transcript) > 0.9 * 5000
    pv = s.prepare(format="internal")
    return s, rec, rounds, pv


def test_only_outputs_older_than_clear_after_rounds_are_cleared() -> None:
    s, rec, rounds, pv = cleared_session()
    assert pv.status.layer == "clear"
    assert pv.status.compactions == {"clear": 1}
    by_call = {m.tool_call_id: m for m in pv.view if m.role == "tool"}
    for i, (call_msg, result) in enumerate(rounds):
        assert call_msg in pv.view  # calls are never touched by clearing
        shown = by_call[f"c{i}"]
        if i >= 6:  # the newest clear_after_rounds=2 rounds keep their outputs
            assert shown is result
        else:
            assert shown is not result
            assert s.accountant.count_message(shown) < s.accountant.count_message(result)
    assert toolpairs.validate(pv.view) == []
    assert s.transcript[2:] == [m for r in rounds for m in r]  # the transcript keeps the originals


def test_stand_in_keeps_call_id_names_its_snapshot_and_points_back() -> None:
    s, rec, rounds, pv = cleared_session()
    written = {e.snapshot_id: e for e in rec.of("snapshot.written")}
    for i in range(6):
        call_msg, result = rounds[i]
        stand_in = next(m for m in pv.view if m.role == "tool" and m.tool_call_id == f"c{i}")
        assert stand_in.tool_call_id == result.tool_call_id
        assert stand_in.name == result.name
        assert stand_in.is_error == result.is_error
        assert stand_in.message_id != result.message_id
        assert stand_in.source_ids == (result.message_id,)
        assert stand_in.snapshot_id is not None
        assert f'read_context("{stand_in.snapshot_id}")' in stand_in.text
        assert stand_in.text.strip()
        event = written[stand_in.snapshot_id]
        assert event.reason == "cleared"
        assert result.message_id in event.message_ids
        # the snapshot holds the full original
        page = s.read_context(stand_in.snapshot_id)
        assert result.text in page


def test_stand_in_keeps_error_key_lines_and_identifiers() -> None:
    s, rec, rounds, pv = cleared_session()
    tools = {m.tool_call_id: m for m in pv.view if m.role == "tool"}
    assert "Error: connection to db-1.internal refused (errno 111)" in tools["c1"].text
    deep = tools["c2"].text
    assert "ValueError: amount $12.50 rejected for INV-2024-0042" in deep
    assert "Traceback (most recent call last)" in deep
    ids = tools["c3"].text
    for ident in ("ORD-4411", "/var/log/app/worker.log", "2024-03-05", "$1234.50", "cust_99812"):
        assert ident in ids, ident


def test_small_outputs_are_not_worth_clearing_in_a_session() -> None:
    config = CompactionConfig(
        high_water=0.9,
        low_water=0.2,
        reactive_low_water=0.2,
        min_low_water=0.1,
        layers=("clear",),
        keep_recent_rounds=1,
        clear_after_rounds=1,
        min_clear_tokens=120,
    )
    s, _ = session(1200, config=config)
    s.add([Message.system("sys"), Message.user("go")])
    small = tool_round("s0", "ok: 3 rows", q="tiny")
    s.add(small)
    for i in range(6):
        s.add(tool_round(f"c{i}", make_text(1200, seed=i), q=f"q{i}"))
    pv = s.prepare(format="internal")
    assert pv.status.layer in ("clear", "shrink")
    assert small[1] in pv.view  # 5 tokens: its stand-in would not be smaller


def test_clearing_comes_before_eviction_and_stops_at_the_target() -> None:
    config = CompactionConfig(high_water=0.9, low_water=0.6, keep_recent_rounds=1, clear_after_rounds=2)
    s, rec = session(5000, config=config)
    s.add([Message.system("sys"), Message.user("Reconcile the March invoices.")])
    for i, out in enumerate(outputs()):
        s.add(tool_round(f"c{i}", out, q=f"item-{i}"))
    pv = s.prepare(format="internal")
    started = [e.layer for e in rec.of("compaction.started")]
    assert started == ["clear"]  # clearing alone reached 0.6: no round was evicted
    assert pv.status.layer == "clear"
    assert pv.status.used <= 0.6 * s.budget.effective
    # clearing stopped once under the target: the oldest outputs are cleared first, not all of them
    tools = [m for m in pv.view if m.role == "tool"]
    stand_ins = [m.snapshot_id is not None for m in tools]
    assert stand_ins[0] and not all(stand_ins[:-2])
    assert stand_ins == sorted(stand_ins, reverse=True)


def test_read_context_paginates_a_large_original() -> None:
    s, rec = session(3000)
    s.add([Message.system("sys"), Message.user("Dump the table.")])
    big = make_text(30_000, seed=5)
    s.add(tool_round("big", big, table="orders"))
    pv = s.prepare(format="internal")  # far larger than the budget: offloaded
    stand_in = next(m for m in pv.view if m.role == "tool")
    assert stand_in.snapshot_id is not None
    first = s.read_context(stand_in.snapshot_id)
    header = first.splitlines()[0]
    m = re.fullmatch(r"\[(snap_[0-9a-f]{24}) page 1/(\d+) \(next: page 2\)\]", header)
    assert m, header
    pages = int(m.group(2))
    assert pages >= 4
    texts = [first.split("\n", 1)[1]]
    for page in range(2, pages + 1):
        out = s.read_context(stand_in.snapshot_id, page=page)
        texts.append(out.split("\n", 1)[1])
        assert len(out) <= 8000 + 200
    assert big in "".join(texts)
    with pytest.raises(SnapshotError, match="page"):
        s.read_context(stand_in.snapshot_id, page=pages + 1)
    with pytest.raises(SnapshotError):
        s.read_context(stand_in.snapshot_id, page=0)


def test_read_context_of_a_transcript_span_and_bad_references() -> None:
    s, _ = session(3000)
    msgs = [Message.system("sys"), Message.user("first"), Message.assistant("second"), Message.user("third")]
    s.add(msgs)
    out = s.read_context(f"{msgs[1].message_id}..{msgs[2].message_id}")
    assert "first" in out and "second" in out and "third" not in out
    for bad in ("snap_123", "../../etc/passwd", "snap_" + "A" * 24, "msg_x..msg_y", "", "#999"):
        with pytest.raises(SnapshotError):
            s.read_context(bad)


def test_read_context_by_ledger_step() -> None:
    config = CompactionConfig(keep_recent_rounds=1, layers=("evict",))
    s, _ = session(2500, config=config)
    s.add([Message.system("sys"), Message.user("Audit the ledger.")])
    originals = {}
    for i in range(8):
        out = f"account ACC-{i:03d} balance ${i}00.00\n" + make_text(1500, seed=i)
        originals[f"ACC-{i:03d}"] = out
        s.add(tool_round(f"c{i}", out, name="balance", account=f"ACC-{i:03d}"))
        pv = s.prepare(format="internal")
    block = next(m for m in pv.view if m.role == "user" and "[contextwarden]" in m.text)
    steps = re.findall(r"^#(\d+) \S+ balance\(account=(ACC-\d{3})\)", block.text, flags=re.M)
    assert steps, block.text
    for step, account in steps:
        page = s.read_context(f"#{step}")
        assert originals[account] in page, (step, account)


def test_read_tool_schema_and_dispatch() -> None:
    plain = Session(window=4000, counter="heuristic", reserved_output=0)
    with_tool = Session(window=4000, counter="heuristic", include_read_tool=True, reserved_output=0)
    assert READ_CONTEXT_TOOL in with_tool.tools and READ_CONTEXT_TOOL not in plain.tools
    assert with_tool.budget.tool_schemas > 0 and plain.budget.tool_schemas == 0
    assert with_tool.budget.effective == 4000 - with_tool.budget.tool_schemas
    fn = READ_CONTEXT_TOOL["function"]
    assert fn["name"] == "read_context" and fn["parameters"]["required"] == ["ref"]
    msgs = [Message.user("alpha"), Message.assistant("beta")]
    with_tool.add(msgs)
    ref = f"{msgs[0].message_id}..{msgs[1].message_id}"
    direct = with_tool.read_context(ref)
    assert with_tool.handle_tool_call("read_context", json.dumps({"ref": ref})) == direct
    assert with_tool.handle_tool_call("read_context", {"ref": ref, "page": 1}) == direct
    assert with_tool.handle_tool_call("search", "{}") is None

"""L1 observation clearing and the read-back tool."""

from __future__ import annotations

import json
import re

import pytest

from contextwarden import toolpairs
from contextwarden.compaction.config import CompactionConfig
from contextwarden.exceptions import SnapshotError
from contextwarden.messages import Message
from contextwarden.session import PreparedView, Session
from contextwarden.snapshots import READ_CONTEXT_TOOL

from ._helpers import Recorder, make_text, session, tool_round

CLEAR_ONLY = CompactionConfig(
    high_water=0.9,
    low_water=0.2,
    reactive_low_water=0.2,
    min_low_water=0.1,
    layers=("clear",),
    keep_recent_rounds=1,
    clear_after_rounds=2,
    tool_result_min_tokens=10**6,  # age-based clearing alone (tool-result summarization: test_strategies.py)
)

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


def test_small_outputs_are_not_worth_clearing() -> None:
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

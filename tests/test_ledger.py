"""The task-progress ledger: entries, roll-up, persistence, rendering within a token budget."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import given, settings, strategies as st

from compaction._helpers import is_context_block, make_text, session, tool_round
from contextwarden.compaction.config import CompactionConfig
from contextwarden.ledger import HEADER, Ledger, LedgerEntry, describe_call, entry_for_round, request_facts
from contextwarden.messages import Message
from contextwarden.tokens import get_counter

TIKTOKEN = get_counter("tiktoken:cl100k_base")
HEURISTIC = get_counter("heuristic")


def booking(i: int, *, fail: bool = False, padding: int = 0) -> list[Message]:
    out = (
        f"Error: seat map unavailable for TP{i:03d}"
        if fail
        else f"booked TP{i:03d} for ORD-{i} on 2024-06-{i % 28 + 1:02d}"
    )
    if padding:
        out += "\n" + make_text(padding, seed=i)
    return tool_round(f"c{i}", out, name="book" if i % 2 else "search", flight=f"TP{i:03d}")


# --- entries ---------------------------------------------------------------------------------


def test_tool_round_entry_has_status_intention_facts_and_snapshot() -> None:
    e = entry_for_round(booking(7), step=3, snapshot_id="snap_" + "a" * 24)
    assert e is not None
    assert (e.step, e.status, e.kind) == (3, "done", "tool")
    assert e.intention == "book(flight=TP007)"
    assert {"TP007", "ORD-7", "2024-06-08"} <= set(e.facts)
    assert e.snapshot_id == "snap_" + "a" * 24 and e.tools == ("book",) and len(e.message_ids) == 2


def test_failed_round_entry() -> None:
    e = entry_for_round(booking(3, fail=True), step=1)
    assert e is not None and e.status == "failed"
    assert any("seat map unavailable" in f for f in e.facts)
    flagged = tool_round("x", "all fine", name="f")
    flagged[1] = Message.tool_result("x", "looks fine", name="f", is_error=True)
    failed = entry_for_round(flagged, step=2)
    assert failed is not None and failed.status == "failed"


def test_request_entry_keeps_names_and_ids() -> None:
    e = entry_for_round([Message.user("Please book Lisbon for Maria Silva, order ORD-77, by 2024-07-01.")], step=2)
    assert e is not None and e.kind == "request" and e.intention.startswith("user: Please book Lisbon")
    assert {"ORD-77", "2024-07-01", "Lisbon", "Maria", "Silva"} <= set(e.facts)
    assert "ORD-9" not in request_facts("x " * 2000 + "ORD-9")  # only the first 1,200 characters count
    assert entry_for_round([Message.assistant("just talking")], step=1) is None
    assert entry_for_round([], step=1) is None


def test_describe_call() -> None:
    assert describe_call("f", '{"a": 1, "b": "x"}') == "f(a=1, b=x)"
    assert describe_call("f", "") == "f()"
    assert describe_call("f", "not json") == "f(not json)"
    long = describe_call("f", json.dumps({"q": "x" * 500}))
    assert len(long) < 260 and long.endswith(")") and "…" in long


# --- recording, roll-up, persistence ----------------------------------------------------------


def test_roll_up_keeps_the_ledger_bounded_and_counts_everything() -> None:
    led = Ledger(max_entries=4)
    for i in range(10):
        led.record_round(booking(i, fail=(i % 3 == 0)))
    led.note("called the customer")
    assert len(led.entries) == 4
    assert [e.step for e in led.entries if e.kind == "tool"] == [8, 9, 10]  # the newest steps stay listed
    assert led.rolled_up["failed"] + led.rolled_up["done"] == 7
    assert led.rolled_up["tool:book"] + led.rolled_up["tool:search"] == 7
    assert led.done_steps == 11
    text = led.render(max_tokens=400, count=TIKTOKEN.count_text)
    m = re.search(r"Earlier steps: (\d+) done, (\d+) failed", text)
    assert m and int(m.group(1)) + int(m.group(2)) == 7
    assert "✓ called the customer" in text


def test_plan_mark_and_sorted_steps() -> None:
    led = Ledger()
    planned = led.plan(["search flights", "book hotel"])
    assert [e.status for e in planned] == ["planned", "planned"]
    led.mark(planned[0].step, "done")
    assert next(e for e in led.entries if e.step == planned[0].step).status == "done"
    assert next(e for e in led.entries if e.step == planned[1].step).status == "planned"
    led.append(LedgerEntry(step=100, status="done", intention="late"))
    led.append(LedgerEntry(step=50, status="failed", intention="earlier"))
    assert [e.step for e in led.entries] == sorted(e.step for e in led.entries)
    assert led.next_step > 100  # new steps never reuse a number
    try:
        led.mark(999, "done")
    except KeyError as exc:
        assert "999" in str(exc)
    else:
        raise AssertionError("mark of an unknown step must raise")
    text = led.render(max_tokens=300, count=HEURISTIC.count_text)
    assert "✓ search flights" in text and "… book hotel" in text and "✗ earlier" in text


def test_to_dict_from_dict_round_trip() -> None:
    led = Ledger(max_entries=3)
    for i in range(6):
        led.record_round(booking(i, fail=i == 2), snapshot_id="snap_" + f"{i:024x}")
    led.note("wrote the summary", status="failed")
    data = json.loads(json.dumps(led.to_dict()))
    back = Ledger.from_dict(data)
    assert back == led
    assert back.render(max_tokens=300, count=TIKTOKEN.count_text) == led.render(
        max_tokens=300, count=TIKTOKEN.count_text
    )
    assert Ledger.from_dict({}).entries == []


# --- rendering -------------------------------------------------------------------------------

facts = st.text(alphabet=st.sampled_from(list("abcXYZ0123456789_-/.:$ 订单数据")), min_size=1, max_size=40).filter(
    str.strip
)
entries = st.builds(
    LedgerEntry,
    step=st.integers(1, 10_000),
    status=st.sampled_from(["planned", "done", "failed"]),
    intention=st.text(min_size=0, max_size=400),
    kind=st.sampled_from(["tool", "request", "note"]),
    facts=st.lists(facts, max_size=30).map(tuple),
    tools=st.lists(st.sampled_from(["search", "book", "read_file"]), max_size=3).map(tuple),
)


@settings(max_examples=150, deadline=None)
@given(
    items=st.lists(entries, max_size=60),
    max_entries=st.integers(1, 80),
    max_tokens=st.integers(0, 800),
    tiktoken=st.booleans(),
)
def test_render_never_exceeds_max_tokens(
    items: list[LedgerEntry], max_entries: int, max_tokens: int, tiktoken: bool
) -> None:
    count = (TIKTOKEN if tiktoken else HEURISTIC).count_text
    led = Ledger(max_entries=max_entries)
    for e in items:
        led.append(e)
    assert len(led.entries) <= max_entries
    assert led.done_steps == sum(1 for e in items if e.status != "planned")
    text = led.render(max_tokens=max_tokens, count=count)
    assert count(text) <= max_tokens
    if text:
        assert text.startswith(HEADER)
    if items and max_tokens >= 120:
        assert text, "a ledger with entries and room renders something"


def test_render_prefers_newest_lines_and_keeps_facts() -> None:
    led = Ledger()
    for i in range(40):
        led.record_round(booking(i))
    text = led.render(max_tokens=150, count=TIKTOKEN.count_text)
    assert TIKTOKEN.count_text(text) <= 150
    assert "#40 " in text and "#1 " not in text
    assert "Earlier steps:" in text
    assert "Key data by source" in text and "TP039" in text and "[book #40" in text and "ORD-39" in text


# --- the ledger in a session -----------------------------------------------------------------


def test_evicted_rounds_become_ledger_entries_rendered_in_the_view() -> None:
    s, _ = session(3000, config=CompactionConfig(keep_recent_rounds=1, clear_after_rounds=2))
    s.add([Message.system("You book travel."), Message.user("Book flights for the team.")])
    seen_steps: set[int] = set()
    for i in range(20):
        s.add(booking(i, fail=i == 4, padding=1500))
        pv = s.prepare(format="internal")
        steps = {e.step for e in s.ledger.entries}
        assert seen_steps <= steps  # entries survive every compaction
        seen_steps = steps
    ids = {m.message_id for m in pv.view}
    gone = [m for m in s.transcript if m.role == "assistant" and m.message_id not in ids]
    assert gone
    by_first = {e.message_ids[0]: e for e in s.ledger.entries if e.message_ids}
    for m in gone:
        e = by_first[m.message_id]
        assert e.status in ("done", "failed") and e.snapshot_id and e.snapshot_id.startswith("snap_")
    failed = [e for e in s.ledger.entries if e.status == "failed"]
    assert len(failed) == 1 and "TP004" in failed[0].intention
    block = next(m for m in pv.view if is_context_block(m))
    assert HEADER in block.text and "do not repeat" in block.text
    assert block.source_ids  # the block names the span it stands for
    for e in s.ledger.entries[-3:]:
        assert f"#{e.step} " in block.text
    assert s.accountant.count_message(block) <= 0.35 * s.budget.effective


def test_ledger_stays_bounded_in_a_long_session() -> None:
    config = CompactionConfig(keep_recent_rounds=1, ledger_max_entries=10)
    s, _ = session(2500, config=config)
    s.add([Message.system("sys"), Message.user("go")])
    for i in range(40):
        s.add(tool_round(f"c{i}", make_text(1200, seed=i), q=f"q{i}"))
        pv = s.prepare(format="internal")
        assert pv.status.used <= pv.status.budget
    assert len(s.ledger.entries) <= 10
    assert sum(v for k, v in s.ledger.rolled_up.items() if not k.startswith("tool:")) > 0
    block = next(m for m in pv.view if is_context_block(m))
    assert "Earlier steps:" in block.text


# --- memoized rendering (sizes, rank groups, summary line) -------------------------------------
# Rendering memoizes per-entry work (`warm`, sizes, the "Earlier steps" line). The memos may only
# save time: a ledger whose memos are warm must render exactly what a fresh copy renders.

# facts shared between entries (the same order id in several steps), of every rank
_SHARED_FACTS = [
    "ORD-4411",
    "TP007",
    "2024-06-08",
    "/srv/app/main.py",
    "INV-2024-0042",
    "SEA",
    "$1,234.50",
    "Lisbon",
    "cust_99812",
    "ValueError: amount rejected",
    "订单 ORD-9",
    "ok",
]
_entry_fields: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {
        "status": st.sampled_from(["planned", "done", "failed"]),
        "kind": st.sampled_from(["tool", "request"]),
        "intention": st.text(max_size=160),
        "facts": st.lists(st.one_of(st.sampled_from(_SHARED_FACTS), facts), max_size=20).map(tuple),
        "tools": st.lists(st.sampled_from(["search", "book", "read_file"]), max_size=2).map(tuple),
    }
)


def _cold_copy(led: Ledger, calibrations: list[tuple[int, int]]) -> Ledger:
    """The same ledger with no memo filled: persisted and loaded (its size calibration travels with it)."""
    fresh = Ledger.from_dict(json.loads(json.dumps(led.to_dict())))
    replayed = Ledger()
    for estimated, actual in calibrations:
        replayed.calibrate(estimated, actual)
    assert fresh._scale == replayed._scale  # the persisted scale is the one the calibrations made
    return fresh


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_warm_memos_render_exactly_what_a_cold_ledger_renders(data: st.DataObject) -> None:
    fields = data.draw(st.lists(_entry_fields, min_size=1, max_size=40), label="entries")
    steps = data.draw(st.permutations(range(1, len(fields) + 1)), label="append order")
    led = Ledger(max_entries=data.draw(st.integers(1, 30), label="max_entries"))
    warm = data.draw(st.booleans(), label="warm")
    for f, step in zip(fields, steps, strict=True):
        entry = LedgerEntry(step=step, **f)
        if warm:
            led.warm(entry)  # as compaction does when it prepares a round ahead
        led.append(entry)
    for text in data.draw(st.lists(st.text(min_size=1, max_size=60), max_size=3), label="notes"):
        led.note(text)
    budgets = data.draw(st.lists(st.integers(0, 700), min_size=1, max_size=3), label="max_tokens")
    exclude = data.draw(st.sampled_from(["ORD-4411\nLisbon", " · ".join(_SHARED_FACTS[:7]), "x"]), label="exclude")
    count = data.draw(st.sampled_from([HEURISTIC, TIKTOKEN]), label="counter").count_text
    calibrations: list[tuple[int, int]] = []
    for change in range(3):
        for max_tokens in budgets:
            for exact in (True, False):
                for excl in ("", exclude):
                    want = _cold_copy(led, calibrations).render(
                        max_tokens=max_tokens, count=count, exact=exact, exclude=excl
                    )
                    for _ in range(2):  # a render fills the memos the next one reads
                        got = led.render(max_tokens=max_tokens, count=count, exact=exact, exclude=excl)
                        assert got == want, (change, max_tokens, exact, excl)
        # change the ledger between renders: a status, a new step, the size calibration
        listed = [e.step for e in led.entries]
        led.mark(data.draw(st.sampled_from(listed)), data.draw(st.sampled_from(["planned", "done", "failed"])))
        entry = LedgerEntry(step=led.next_step, **data.draw(_entry_fields))
        if warm:
            led.warm(entry)
        led.append(entry)
        calibration = (data.draw(st.integers(1, 400)), data.draw(st.integers(1, 600)))
        led.calibrate(*calibration)
        calibrations.append(calibration)


def _bookings(n: int, *, max_entries: int = 200) -> Ledger:
    led = Ledger(max_entries=max_entries)
    for i in range(n):
        led.record_round(booking(i))
    return led


def test_warming_entries_does_not_change_the_render() -> None:
    warm, cold = Ledger(), Ledger()
    for i in range(30):
        rnd = booking(i, fail=i % 7 == 0, padding=300)
        for led in (warm, cold):
            entry = entry_for_round(rnd, step=i + 1, snapshot_id="snap_" + f"{i:024x}")
            assert entry is not None
            if led is warm:
                led.warm(entry)
            led.append(entry)
    for max_tokens in (60, 150, 400, 2000):
        for exact in (True, False):
            want = cold.render(max_tokens=max_tokens, count=TIKTOKEN.count_text, exact=exact)
            assert want
            assert warm.render(max_tokens=max_tokens, count=TIKTOKEN.count_text, exact=exact) == want


def _earlier(text: str) -> str:
    line = next((x for x in text.split("\n") if x.startswith("Earlier steps:")), None)
    assert line is not None, text
    return line


def test_summary_line_follows_a_mark_made_after_a_render() -> None:
    led = _bookings(30)
    first = led.render(max_tokens=150, count=TIKTOKEN.count_text)
    before = re.match(r"Earlier steps: (\d+) done \(", _earlier(first))
    assert before, _earlier(first)
    assert "#1 " not in first and "#2 " not in first  # steps 1 and 2 are counted, not listed
    led.mark(1, "failed")
    led.mark(2, "planned")
    second = led.render(max_tokens=150, count=TIKTOKEN.count_text)
    after = re.match(r"Earlier steps: (\d+) done, 1 failed, 1 planned \(", _earlier(second))
    assert after, _earlier(second)
    assert int(after.group(1)) == int(before.group(1)) - 2
    assert second == _cold_copy(led, []).render(max_tokens=150, count=TIKTOKEN.count_text)


def test_summary_line_follows_steps_appended_after_a_render() -> None:
    # every listed step is shown: the summary line counts only rolled-up steps
    led = _bookings(5, max_entries=3)
    first = led.render(max_tokens=600, count=TIKTOKEN.count_text)
    assert _earlier(first).startswith("Earlier steps: 2 done (")
    assert all(f"#{step} " in first for step in (3, 4, 5))
    led.record_round(booking(5))  # step 6: step 3 rolls up
    second = led.render(max_tokens=600, count=TIKTOKEN.count_text)
    assert _earlier(second).startswith("Earlier steps: 3 done (")
    assert "#3 " not in second and "#6 " in second
    led.record_round(booking(6, fail=True))  # step 7, failed: step 4 rolls up
    led.mark(5, "failed")
    third = led.render(max_tokens=600, count=TIKTOKEN.count_text)
    assert _earlier(third).startswith("Earlier steps: 4 done (")
    assert "#5 ✗" in third and "#7 ✗" in third
    assert third == _cold_copy(led, []).render(max_tokens=600, count=TIKTOKEN.count_text)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_estimated_render_fits_its_budget_while_facts_remain(data: st.DataObject) -> None:
    fields = data.draw(st.lists(_entry_fields, min_size=1, max_size=40), label="entries")
    led = Ledger(max_entries=data.draw(st.integers(1, 40), label="max_entries"))
    for step, f in enumerate(fields, start=1):
        led.append(LedgerEntry(step=step, **f))
    for text in data.draw(st.lists(st.text(min_size=1, max_size=60), max_size=3), label="notes"):
        led.note(text)
    for _ in range(data.draw(st.integers(0, 3), label="calibrations")):
        led.calibrate(data.draw(st.integers(1, 400)), data.draw(st.integers(1, 600)))
    max_tokens = data.draw(st.integers(1, 500), label="max_tokens")
    exclude = data.draw(st.sampled_from(["", "ORD-4411\nLisbon"]), label="exclude")
    text = led.render(max_tokens=max_tokens, count=TIKTOKEN.count_text, exact=False, exclude=exclude)
    if "\nKey data by source" in text:  # facts left that could have been dropped: the estimate fits
        assert led.estimate(text) <= max_tokens, text


def test_what_a_user_stated_long_ago_outlives_newer_tool_output_ids() -> None:
    # a 200-request session: each request asks for a file, a few also state a value to remember;
    # every tool step prints a dozen fresh ids that compete for the ledger's room
    led = Ledger(max_entries=200)
    stated = {2: "rel-ORCHID-7", 70: "reviewer-MARLIN-42", 150: "BATCH_IBIS_256"}
    step = 0
    for turn in range(200):
        step += 1
        request = f"Step {turn}: read src/pkg/module_{turn}.py and tell me what it defines."
        if turn in stated:
            request += f" Remember for later: {stated[turn]}."
        led.append(entry_for_round([Message.user(request)], step=step))
        step += 1
        ids = [f"helper_{turn}_{i}x{(turn * 31 + i) % 97}" for i in range(12)]
        led.append(LedgerEntry(step=step, status="done", intention=f"read_file(module_{turn}.py)", facts=tuple(ids)))
    assert led.rolled_up, "the early requests rolled up into counts"
    text = led.render(max_tokens=1000, count=HEURISTIC.count_text)
    assert all(value in text for value in stated.values()), text
    # the files a user named are the working set's to rank; the kept facts hold stated values
    assert not any(f.endswith(".py") for f in led.kept_facts)


def test_the_output_of_a_call_that_names_what_the_user_stated_outlasts_many_newer_searches() -> None:
    led = Ledger()
    led.append(entry_for_round([Message.user("Hi, my account is acct_kim_4471; move my trips to economy.")], step=1))
    profile = {"user_id": "acct_kim_4471", "reservations": ["RES8KQ2", "RES4ZZ9", "RES7PL1"], "cards": ["card_5521"]}
    led.append(
        LedgerEntry(step=2, status="done", intention="get_user(user_id=acct_kim_4471)", facts=tuple(_flat(profile)))
    )
    for step in range(3, 15):  # twelve searches, each printing a handful of candidate flights
        flights = tuple(f"FL{step:02d}{i}" for i in range(6))
        led.append(LedgerEntry(step=step, status="done", intention=f"search(day={step})", facts=flights))
    text = led.render(max_tokens=160, count=TIKTOKEN.count_text)
    assert all(r in text for r in ("RES8KQ2", "RES4ZZ9", "RES7PL1", "card_5521")), text


def _flat(doc: dict[str, Any]) -> list[str]:
    return [v for value in doc.values() for v in (value if isinstance(value, list) else [value])]


def test_categories_and_timestamps_from_outputs_rank_below_ids() -> None:
    led = Ledger()
    facts = ("gift_card", "one_way", "2024-05-12T05:51:40", "HAT118", "credit_card_9879898")
    led.append(LedgerEntry(step=1, status="done", intention="get_reservation(id=X)", facts=facts))
    text = led.render(max_tokens=400, count=TIKTOKEN.count_text)
    key = text[text.index("Key data") :]
    shown = [f for _, f in sorted((key.index(f), f) for f in facts)]
    assert shown == ["HAT118", "credit_card_9879898", "gift_card", "one_way", "2024-05-12T05:51:40"], key


def test_a_json_output_keeps_the_names_its_keys_declare() -> None:
    s, _ = session(2000)
    profile = {
        "name": {"first_name": "Omar", "last_name": "Rossi"},
        "email": "o.rossi@example.com",
        "dob": "1970-06-06",
    }
    s.add([Message.system("You are an airline agent.")])
    s.add(tool_round("c1", json.dumps(profile), name="get_user_details", user_id="omar_rossi_1241"))
    assert {"first_name=Omar", "last_name=Rossi"} <= set(s.engine.book.facts(s.engine.rounds[-1]))

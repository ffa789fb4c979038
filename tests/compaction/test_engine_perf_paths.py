"""What the faster compaction paths must keep: stand-ins that list each fact once, and views that
do not depend on whether rounds were prepared ahead of a compaction."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from contextkeeper.compaction.ahead import PrepareAhead
from contextkeeper.compaction.config import CompactionConfig
from contextkeeper.messages import Message
from contextkeeper.session import Session

from ._helpers import COUNTER, check_view, make_text, session, tool_round
from .test_clearing import CLEAR_ONLY as CLEARING_ONLY

# clearing alone, by age (the same configuration as test_clearing's, without its size-and-use limit)
CLEAR_ONLY = replace(CLEARING_ONLY, tool_result_min_tokens=CompactionConfig().tool_result_min_tokens)

# --- stand-ins: each fact once ----------------------------------------------------------------

HEAD = "batch HEADID-7731 started in eu-west-1\n"  # identifiers the 120-character head shows
QUIET = "the nightly report finished and the queue drained before the deadline as planned\n"
ERROR_LINE = "ValueError: amount rejected for the March invoice run"
DEEP_IDS = ("ORD-4411", "cust_99812", "/var/log/app/worker.log", "2024-03-05")
DEEP = f"lookup matched {DEEP_IDS[0]} and {DEEP_IDS[1]} in {DEEP_IDS[2]} on {DEEP_IDS[3]}\n"
WARNING_LINE = "WARNING: disk 91% full on the data volume"
TIMEOUT_LINE = "request timeout after 30s on the billing worker"


def _stand_in_parts(text: str) -> tuple[str, list[str], list[str]]:
    """The head, the key lines and the ids of a cleared output's stand-in."""
    lines = text.split("\n")
    assert lines[0].startswith("[output shortened from ") and 'read_context("snap_' in lines[0], lines[0]
    keys = [x for x in lines if x.startswith("key lines: ")]
    ids = [x for x in lines if x.startswith("ids: ")]
    assert len(keys) <= 1 and len(ids) <= 1, text
    end = next((i for i, x in enumerate(lines) if x.startswith(("key lines: ", "ids: "))), len(lines))
    head = "\n".join(lines[1:end])
    key_list = keys[0].removeprefix("key lines: ").split(" | ") if keys else []
    id_list = ids[0].removeprefix("ids: ").split(" · ") if ids else []
    return head, key_list, id_list


def _cleared_stand_ins(outputs: Sequence[tuple[str, bool]]) -> dict[str, Message]:
    """Stand-ins (by call id) of the given outputs, cleared by one compaction in a 5,000-token view.

    Each output is padded to about 2,500 characters past the first 600 that are scanned for facts,
    and followed by enough rounds of its own size that the listed ones are old enough to clear.
    """
    s, _ = session(5000, config=CLEAR_ONLY)
    added: list[Message] = [Message.system("You reconcile invoices."), Message.user("Reconcile March.")]
    s.add(added)
    rounds = [
        tool_round(f"c{i}", out + "\n" + make_text(2500, seed=900 + i), q=f"q{i}", is_error=is_error)
        for i, (out, is_error) in enumerate(outputs)
    ]
    rounds += [tool_round(f"pad{i}", make_text(2500, seed=i), q=f"pad{i}") for i in range(8 - len(outputs))]
    for r in rounds:
        s.add(r)
        added.extend(r)
    pv = s.prepare(format="internal")
    check_view(s, pv, added)
    assert pv.status.layer == "clear"
    originals = {m.message_id: m for m in s.transcript}
    found: dict[str, Message] = {}
    for m in pv.view:
        if m.role == "tool" and m.snapshot_id is not None:
            assert m.source_ids and m.source_ids[0] in originals  # a stand-in, pointing at its original
            assert m.tool_call_id is not None
            found[m.tool_call_id] = m
    assert {f"c{i}" for i in range(len(outputs))} <= set(found)
    return found


def test_error_lines_shown_as_key_lines_are_not_repeated_as_ids() -> None:
    out = HEAD + QUIET + QUIET + ERROR_LINE + "\n" + DEEP
    stand_in = _cleared_stand_ins([(out, False)])["c0"]
    head, keys, ids = _stand_in_parts(stand_in.text)
    assert ERROR_LINE not in head
    assert keys == [ERROR_LINE]
    assert ERROR_LINE not in ids  # shown once, as a key line
    assert set(DEEP_IDS) <= set(ids)  # neither in the head nor a key line: listed
    assert len(ids) == len(set(ids))


def test_identifiers_in_the_head_are_not_repeated_as_ids() -> None:
    out = HEAD + QUIET + QUIET + DEEP
    stand_in = _cleared_stand_ins([(out, False)])["c0"]
    head, keys, ids = _stand_in_parts(stand_in.text)
    assert "HEADID-7731" in head and "eu-west-1" in head
    assert "HEADID-7731" not in ids and "eu-west-1" not in ids
    assert keys == []
    assert set(DEEP_IDS) <= set(ids)


def test_key_lines_of_a_failed_output_are_not_repeated_as_ids() -> None:
    # a failed output's first key lines are its facts, error or not (a warning, a timeout)
    out = HEAD + QUIET + QUIET + WARNING_LINE + "\n" + TIMEOUT_LINE + "\n" + DEEP
    ok = HEAD + QUIET + QUIET + WARNING_LINE + "\n" + ERROR_LINE + "\n" + DEEP
    found = _cleared_stand_ins([(out, True), (ok, False)])
    assert found["c0"].is_error
    _, keys, ids = _stand_in_parts(found["c0"].text)
    assert keys == [WARNING_LINE, TIMEOUT_LINE]
    assert WARNING_LINE not in ids and TIMEOUT_LINE not in ids
    assert set(DEEP_IDS) <= set(ids)
    # in an output that did not fail only error lines are facts; both key lines are shown once
    _, keys, ids = _stand_in_parts(found["c1"].text)
    assert keys == [WARNING_LINE, ERROR_LINE]
    assert not {WARNING_LINE, ERROR_LINE} & set(ids)
    assert set(DEEP_IDS) <= set(ids)


def test_an_error_line_in_the_head_is_shown_once() -> None:
    out = ERROR_LINE + "\n" + QUIET + QUIET + DEEP
    stand_in = _cleared_stand_ins([(out, False)])["c0"]
    head, keys, ids = _stand_in_parts(stand_in.text)
    assert head.startswith(ERROR_LINE)
    assert keys == [] and ERROR_LINE not in ids
    assert set(DEEP_IDS) <= set(ids)


# --- preparing ahead never changes the view ---------------------------------------------------


def _workload(seed: int, turns: int, *, big: int = 1200) -> list[list[Message]]:
    """Turns of tool rounds (some failing, some with error lines) and requests with their replies."""
    rng = random.Random(seed)
    out: list[list[Message]] = [[Message.system("You reconcile accounts."), Message.user("Reconcile March.")]]
    for i in range(turns):
        if rng.random() < 0.15:
            out.append([Message.user(f"Now check ORD-{1000 + i} for Maria Silva"), Message.assistant(f"Done {i}.")])
            continue
        text = make_text(rng.randint(big // 2, big), seed=seed * 1000 + i, error=rng.random() < 0.2)
        out.append(tool_round(f"c{i}", text, name=rng.choice(["lookup", "grep"]), q=f"q{i}", is_error=i % 9 == 4))
    return out


def _run(
    turns: list[list[Message]], window: int, budget_ms: float, **config: object
) -> tuple[list[list[tuple[str, str]]], list[int], list[str | None]]:
    """Feed ``turns`` to a session, preparing after each; per turn: the view, the rounds prepared, the layer."""
    s = Session(
        "ses_ahead",  # the same id: snapshot ids are part of the stand-ins' text
        window=window,
        counter=COUNTER,
        config=CompactionConfig(compaction_budget_ms=budget_ms, **config),  # type: ignore[arg-type]
    )
    views: list[list[tuple[str, str]]] = []
    prepared: list[int] = []
    layers: list[str | None] = []
    added: list[Message] = []
    for t in turns:
        s.add(t)
        added.extend(t)
        pv = s.prepare(format="internal")
        check_view(s, pv, added)
        views.append([(m.message_id, m.text) for m in pv.view])
        prepared.append(sum(r.prepared for r in s.engine.rounds))
        layers.append(pv.status.layer)
    return views, prepared, layers


SCENARIOS = [
    (0, 4000, {"keep_recent_rounds": 1, "clear_after_rounds": 2}),
    (1, 3000, {"keep_recent_rounds": 1, "clear_after_rounds": 2, "eviction_policy": "hybrid"}),
    (2, 2500, {"keep_recent_rounds": 1, "clear_after_rounds": 1, "eviction_policy": "lru"}),
    (3, 5000, {}),
]


@pytest.mark.parametrize(("seed", "window", "config"), SCENARIOS)
def test_preparing_ahead_leaves_every_view_as_it_would_be(seed: int, window: int, config: dict[str, object]) -> None:
    turns = _workload(seed, 60)
    eager_views, eager_prepared, eager_layers = _run(turns, window, 0.01, prepare_slice_ms=0.05, **config)
    lazy_views, lazy_prepared, lazy_layers = _run(turns, window, 1e9, **config)
    assert sum(layer is not None for layer in lazy_layers) >= 2, "the workload must compact more than once"
    # a huge budget leaves all the work to the compaction; a tiny one (with tiny slices, so that even
    # a few pending rounds are worth a slice) prepares on the turns before
    assert lazy_prepared == [0] * len(turns)
    ahead = [
        t
        for t in range(1, len(turns))
        if eager_layers[t] is None and eager_prepared[t] > eager_prepared[t - 1] and any(eager_layers[t + 1 :])
    ]
    assert ahead, "some round must be prepared on a quiet turn before a compaction"
    assert eager_layers == lazy_layers
    for t, (eager, lazy) in enumerate(zip(eager_views, lazy_views, strict=True)):
        assert eager == lazy, f"turn {t}: preparing ahead changed the view"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    window=st.sampled_from([2000, 3000, 5000]),
    big=st.sampled_from([600, 1500, 4000]),
    policy=st.sampled_from(["fifo", "hybrid", "lru"]),
    clear_after=st.integers(1, 4),
)
def test_views_do_not_depend_on_the_compaction_budget(
    seed: int, window: int, big: int, policy: str, clear_after: int
) -> None:
    turns = _workload(seed, 40, big=big)
    config = {"keep_recent_rounds": 1, "clear_after_rounds": clear_after, "eviction_policy": policy}
    eager_views, _, eager_layers = _run(turns, window, 0.01, prepare_slice_ms=0.05, **config)
    lazy_views, lazy_prepared, lazy_layers = _run(turns, window, 1e9, **config)
    assert not any(lazy_prepared)
    assert eager_layers == lazy_layers
    assert eager_views == lazy_views


def test_the_end_of_a_long_error_line_stays_in_the_stand_in() -> None:
    # 152 characters: the key line shows 120; the ids used to carry the whole line, now they drop it
    long_error = (
        "ValueError: the settlement batch for the quarterly reconciliation of the northern region "
        "was rejected by the upstream ledger service, see ref LATE-99120"
    )
    # past the 600 characters scanned for identifiers: only the error line carries the reference
    out = HEAD + DEEP + QUIET * 8 + long_error
    stand_in = _cleared_stand_ins([(out, False)])["c0"]
    assert "LATE-99120" in stand_in.text, stand_in.text


def test_identifiers_inside_shown_key_lines_are_not_repeated_as_ids() -> None:
    out = HEAD + QUIET + QUIET + WARNING_LINE + "\n" + TIMEOUT_LINE + "\n" + DEEP
    stand_in = _cleared_stand_ins([(out, True)])["c0"]
    _, keys, ids = _stand_in_parts(stand_in.text)
    shown = " | ".join(keys)
    assert [f for f in ids if f in shown] == [], stand_in.text


def _book_with_pending_rounds(pending: int) -> tuple[Session, CompactionConfig]:
    """A session whose book has ``pending`` rounds old enough to clear and none prepared."""
    config = CompactionConfig(compaction_budget_ms=3.0, prepare_slice_ms=3.0, clear_after_rounds=2)
    s = Session("ses_slices", window=1_000_000, counter=COUNTER, config=config)
    turns = _workload(5, pending + config.clear_after_rounds + 2)
    for t in turns:
        s.add(t)
    s.prepare(format="internal")
    ahead, book = s.engine.ahead, s.engine.book
    ahead.cursor = 0
    for r in book.rounds:
        r.prepared = False
    assert ahead.pending_rounds(book) >= pending
    return s, config


@pytest.mark.parametrize(("pending", "fixed_ms", "expected"), [(5, 1.0, False), (60, 1.0, True), (5, 10.0, True)])
def test_a_long_turn_prepares_what_the_compaction_budget_leaves_over(
    pending: int, fixed_ms: float, expected: bool
) -> None:
    # The budget is 3 ms. With a 1 ms fixed part (render, eviction) the compaction may prepare
    # 2 ms of rounds itself (5 rounds at 0.1 ms fit, 60 do not); with a fixed part over the
    # budget, any pending round is prepared on a long turn.
    s, config = _book_with_pending_rounds(pending)
    ahead, book = s.engine.ahead, s.engine.book
    ahead.prep_cost = 0.0001  # 0.1 ms a round
    ahead.compaction_fixed_ms = fixed_ms
    _remember(ahead, [1] * 41)
    ahead.last_rounds_total = 0  # the turn grew by the whole book: a long turn
    ahead.track(book, config)
    assert any(r.prepared for r in book.rounds) is expected


def test_rounds_a_compaction_evicted_do_not_count_as_pending() -> None:
    # pending rounds decide whether quiet turns prepare: rounds the compaction already evicted
    # must not make later turns prepare for nothing
    config = CompactionConfig(compaction_budget_ms=1e9, keep_recent_rounds=1, clear_after_rounds=2)
    s = Session("ses_pending", window=3000, counter=COUNTER, config=config)
    for t in _workload(7, 80):
        s.add(t)
        s.prepare(format="internal")
    ahead, book = s.engine.ahead, s.engine.book
    assert book.n_evicted > 10
    newest = ahead.newest_preparable(book)
    still_open = [
        r for r in book.rounds[: newest + 1] if r.state != "evicted" and r.kind != "system" and not r.prepared
    ]
    pending = ahead.pending_rounds(book)
    # every open round counts; of the evicted ones, at most those behind an open one (the cursor
    # moves past a done prefix only)
    assert len(still_open) <= pending < (newest + 1) / 3


# --- preparing ahead: on long turns, not on short ones ---------------------------------------


def _remember(ahead: PrepareAhead, growth: Iterable[int]) -> None:
    for grown in growth:
        ahead._remember(grown)


def _prepared(s: Session) -> int:
    return sum(r.prepared for r in s.engine.rounds)


SHORT = make_text(300, seed=1)


def _after_short_turns(session_id: str, *, compaction_budget_ms: float, prepare_slice_ms: float) -> Session:
    """A session far from full (no compaction near) after 40 short turns, with pending rounds.

    Every pending round is made worth preparing (as if a round took a second), so only the
    turn decides whether it prepares.
    """
    config = CompactionConfig(
        clear_after_rounds=1, compaction_budget_ms=compaction_budget_ms, prepare_slice_ms=prepare_slice_ms
    )
    s = Session(session_id, window=200_000, counter=COUNTER, config=config)
    s.add(Message.system("You reconcile accounts."))
    for i in range(40):  # enough short turns to know what a typical turn adds
        s.add(tool_round(f"s{i}", SHORT, q=f"q{i}"))
        s.prepare(format="internal")
    s.engine.ahead.prep_cost = 1.0
    return s


def test_a_long_turn_prepares_pending_rounds_and_a_short_one_does_not() -> None:
    s = _after_short_turns("ses_long_turns", compaction_budget_ms=0.0, prepare_slice_ms=50.0)
    short = SHORT
    before = _prepared(s)
    s.add(tool_round("short", short, q="again"))
    s.prepare(format="internal")
    assert _prepared(s) == before, "a short turn far from a compaction must stay plain"
    s.add(tool_round("long", make_text(6000, seed=2), q="big"))
    s.prepare(format="internal")
    assert _prepared(s) > before, "a long turn prepares the rounds a compaction would otherwise do itself"


def test_a_turn_is_long_only_against_enough_recent_turns() -> None:
    ahead = PrepareAhead()
    assert not ahead._is_long(10_000), "with no history no turn is long"
    _remember(ahead, [100] * 20 + [5000] * 13)
    assert ahead._is_long(101)  # more than 60% of recent turns (100)
    assert not ahead._is_long(100)
    _remember(ahead, [5000] * 10)  # now most recent turns were large
    assert not ahead._is_long(4000)
    assert ahead._is_long(5001)


def test_a_turn_is_long_against_the_longer_tail_of_recent_turns() -> None:
    ahead = PrepareAhead()
    _remember(ahead, range(100, 141))  # 41 turns of 100..140 tokens
    assert not ahead._is_long(121), "above the median but not above 60% of recent turns"
    assert ahead._is_long(125)


def test_turns_that_all_grow_alike_are_long_so_they_still_prepare() -> None:
    ahead = PrepareAhead()
    _remember(ahead, [300] * 41)
    assert ahead._is_long(300)
    assert not ahead._is_long(299)


def test_a_short_turn_stays_plain_even_when_the_compaction_is_due() -> None:
    # preparing on a short turn just before a compaction used to put fast turns among the slow ones
    s, config = _book_with_pending_rounds(60)
    ahead, book = s.engine.ahead, s.engine.book
    ahead.prep_cost = 0.001
    ahead.compaction_fixed_ms = 10.0
    _remember(ahead, [10**9] * 41)  # every recent turn was larger than this one
    ahead.track(book, config)
    assert not any(r.prepared for r in book.rounds)


def test_facts_of_evicted_outputs_are_not_kept() -> None:
    # a session of thousands of rounds must not hold every output's facts: the ledger has them
    turns = _workload(5, 120)
    s = Session("ses_bounded", window=3000, counter=COUNTER, config=CompactionConfig(**SCENARIOS[0][2]))  # type: ignore[arg-type]
    for t in turns:
        s.add(t)
        s.prepare(format="internal")
    book = s.engine.book
    live = {i for r in book.rounds if r.state != "evicted" for i in r.indices}
    assert sum(r.state == "evicted" for r in book.rounds) > 50
    assert set(book._msg_facts) <= live and set(book._msg_key_lines) <= live


def test_a_slice_ends_in_time_for_the_whole_turn_to_stay_in_budget() -> None:
    ahead = PrepareAhead()
    ahead.turn_begins()
    first = ahead.turn_started
    ahead.turn_begins()  # more messages of the same turn: the turn began with the first ones
    assert first is not None and ahead.turn_started == first
    s = Session("ses_turn_clock", window=200_000, counter=COUNTER)
    s.add(Message.system("You reconcile accounts."))
    assert s.engine.ahead.turn_started is not None, "adding messages starts the turn's clock"
    s.prepare(format="internal")
    assert s.engine.ahead.turn_started is None, "a served view ends the turn"


def test_a_turn_that_already_used_its_budget_prepares_one_round_at_most() -> None:
    import time

    s = _after_short_turns("ses_late_turn", compaction_budget_ms=8.0, prepare_slice_ms=1000.0)
    before = _prepared(s)
    s.add(tool_round("long", make_text(6000, seed=2), q="big"))
    s.engine.ahead.turn_started = time.perf_counter() - 1.0  # counting this turn took a second
    s.prepare(format="internal")
    assert _prepared(s) == before + 1, "past the turn's budget a slice stops after its first round"

"""What the faster compaction paths must keep: stand-ins that list each fact once, and views that
do not depend on whether rounds were prepared ahead of a compaction."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from contextwarden.compaction.ahead import PrepareAhead
from contextwarden.compaction.config import CompactionConfig
from contextwarden.messages import Message
from contextwarden.session import Session

from ._helpers import CLEAR_ONLY as CLEARING_ONLY, COUNTER, check_view, make_text, session, tool_round

# clearing alone, by age (the same configuration as the clearing tests', without its size-and-use limit)
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
    turns: list[list[Message]], window: int, after_rounds: int, **config: object
) -> tuple[list[list[tuple[str, str]]], list[int], list[str | None]]:
    """Feed ``turns`` to a session, preparing after each; per turn: the view, the rounds prepared, the layer."""
    s = Session(
        "ses_ahead",  # the same id: snapshot ids are part of the stand-ins' text
        window=window,
        counter=COUNTER,
        config=CompactionConfig(prepare_after_rounds=after_rounds, **config),  # type: ignore[arg-type]
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
    eager_views, eager_prepared, eager_layers = _run(turns, window, 0, prepare_slice_ms=0.05, **config)
    lazy_views, lazy_prepared, lazy_layers = _run(turns, window, 10**9, **config)
    assert sum(layer is not None for layer in lazy_layers) >= 2, "the workload must compact more than once"
    # a huge threshold leaves all the work to the compaction; none (with tiny slices, so that a
    # long turn prepares a round or two) prepares on the turns before
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
def test_views_do_not_depend_on_what_was_prepared_ahead(
    seed: int, window: int, big: int, policy: str, clear_after: int
) -> None:
    turns = _workload(seed, 40, big=big)
    config = {"keep_recent_rounds": 1, "clear_after_rounds": clear_after, "eviction_policy": policy}
    eager_views, _, eager_layers = _run(turns, window, 0, prepare_slice_ms=0.05, **config)
    lazy_views, lazy_prepared, lazy_layers = _run(turns, window, 10**9, **config)
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


def _book_with_pending_rounds(pending: int, *, after_rounds: int) -> tuple[Session, CompactionConfig]:
    """A session whose book has ``pending`` rounds old enough to clear and none prepared."""
    config = CompactionConfig(prepare_after_rounds=after_rounds, prepare_slice_ms=1000.0, clear_after_rounds=2)
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


@pytest.mark.parametrize(("pending", "after_rounds", "expected"), [(5, 16, False), (30, 16, True), (5, 0, True)])
def test_a_long_turn_prepares_once_more_rounds_wait_than_a_compaction_does_itself(
    pending: int, after_rounds: int, expected: bool
) -> None:
    s, config = _book_with_pending_rounds(pending, after_rounds=after_rounds)
    ahead, book = s.engine.ahead, s.engine.book
    waiting = ahead.pending_rounds(book)
    _remember(ahead, [1] * 41)
    ahead.last_rounds_total = 0  # the turn grew by the whole book: a long turn
    ahead.track(book, config)
    if expected:  # every round that waited is prepared (the slice is long enough)
        assert ahead.pending_rounds(book) == 0 < waiting
    else:
        assert not any(r.prepared for r in book.rounds)


def test_a_slice_stops_after_the_round_that_used_it_up() -> None:
    s, _ = _book_with_pending_rounds(30, after_rounds=0)
    config = CompactionConfig(prepare_after_rounds=0, prepare_slice_ms=1e-6, clear_after_rounds=2)
    ahead, book = s.engine.ahead, s.engine.book
    _remember(ahead, [1] * 41)
    ahead.last_rounds_total = 0
    ahead.track(book, config)
    assert sum(r.prepared for r in book.rounds) == 1, "each slice prepares at least one round"


def test_rounds_a_compaction_evicted_do_not_count_as_pending() -> None:
    # pending rounds decide whether quiet turns prepare: rounds the compaction already evicted
    # must not make later turns prepare for nothing
    config = CompactionConfig(prepare_after_rounds=10**9, keep_recent_rounds=1, clear_after_rounds=2)
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


def _after_short_turns(session_id: str) -> Session:
    """A session far from full (no compaction near) after 40 short turns, with pending rounds.

    Any pending round is worth preparing (``prepare_after_rounds=0``), so only the turn decides
    whether it prepares.
    """
    config = CompactionConfig(clear_after_rounds=1, prepare_after_rounds=0, prepare_slice_ms=50.0)
    s = Session(session_id, window=200_000, counter=COUNTER, config=config)
    s.add(Message.system("You reconcile accounts."))
    for i in range(40):  # enough short turns to know what a typical turn adds
        s.add(tool_round(f"s{i}", SHORT, q=f"q{i}"))
        s.prepare(format="internal")
    return s


def test_a_long_turn_prepares_pending_rounds_and_a_short_one_does_not() -> None:
    s = _after_short_turns("ses_long_turns")
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
    s, config = _book_with_pending_rounds(60, after_rounds=0)
    ahead, book = s.engine.ahead, s.engine.book
    _remember(ahead, [10**9] * 41)  # every recent turn was larger than this one
    ahead.track(book, config)
    assert not any(r.prepared for r in book.rounds)


def test_the_same_session_prepares_on_the_same_turns() -> None:
    # rounds are counted, not milliseconds: two runs of one session prepare on the same turns
    turns = _workload(11, 90)
    config = {"keep_recent_rounds": 1, "clear_after_rounds": 2, "prepare_slice_ms": 1000.0}
    runs = [_run(turns, 4000, 4, **config)[1] for _ in range(2)]
    assert runs[0] == runs[1]
    assert any(b > a for a, b in zip(runs[0], runs[0][1:], strict=False)), "the workload must prepare ahead"


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

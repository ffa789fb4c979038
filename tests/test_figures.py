"""The status figures, defined once: components add up to used, the state follows its rule's marks, the last
layer survives appended turns and a reopen, the timeline stays bounded."""

from __future__ import annotations

from typing import Any

from hypothesis import given, strategies as st

from contextwarden import Session
from contextwarden.budget import Budget, Thresholds
from contextwarden.compaction.config import CompactionConfig
from contextwarden.events import ContextStatus
from contextwarden.figures import components, measure, state_rule
from contextwarden.stores import open_store
from contextwarden.timeline import STATUS_SLOT, Timeline


@given(
    window=st.integers(2_000, 200_000),
    scale=st.floats(0.5, 2.0),
    parts=st.lists(st.integers(0, 400), min_size=3, max_size=3),
    history=st.integers(0, 2_000),
)
def test_components_add_up_to_used_at_any_calibration(
    window: int, scale: float, parts: list[int], history: int
) -> None:
    budget = Budget(window, window // 4, scale=scale)
    counted = {"system": parts[0], "context": parts[1], "history": history, "tool_results": parts[2]}
    used, effective, ratio = measure(budget, sum(counted.values()))
    shown = components(budget, used, counted)
    assert sum(shown.values()) == used and min(shown.values()) >= 0
    assert list(shown) == list(counted)
    assert effective == budget.window - budget.reserved_output - budget.calibrated(budget.tool_schemas)
    assert ratio == round(sum(counted.values()) / budget.effective, 4)


def test_each_rule_names_the_marks_its_state_uses() -> None:
    t = Thresholds()
    band = state_rule("band", t, high_water=0.85, low_water=0.5)
    assert dict(band.marks) == {"low water": 0.5, "high water": 0.85, "overflow": 1.0}
    ratio = state_rule("ratio", t, high_water=0.85, low_water=0.5)
    assert dict(ratio.marks) == {"warning": 0.7, "error": 0.9, "critical": 0.95, "overflow": 1.0}
    assert "fixed thresholds" in ratio.text and band.text.startswith("band:")
    assert type(band).from_dict(band.to_dict()) == band


def _turns(session: Session, n: int, start: int = 0) -> list[Any]:
    views = []
    for i in range(start, start + n):
        session.add([{"role": "user", "content": f"step {i}: " + "words of the step " * 40}])
        session.add([{"role": "assistant", "content": "done"}])
        views.append(session.prepare())
    return views


def test_under_fixed_thresholds_the_state_is_the_mark_the_ratio_reached() -> None:
    session = Session(window=4000, reserved_output=200, config=CompactionConfig(pressure_states="ratio"))
    for view in _turns(session, 30):
        s = view.status
        assert s.rule is not None and s.rule.mode == "ratio"
        assert s.state == Thresholds().state(s.ratio)


def test_events_and_status_carry_the_last_layer_and_the_rule(tmp_path: Any) -> None:
    seen: list[ContextStatus] = []
    url = f"sqlite:///{tmp_path / 'cw.db'}"
    with open_store(url) as store:
        session = Session("s", window=4000, reserved_output=200, store=store)
        session.subscribe(lambda e: seen.append(e) if isinstance(e, ContextStatus) else None)
        views = _turns(session, 30)
        while not views[-1].status.last_layer or views[-1].status.layer:  # until a turn only appends after one
            views += _turns(session, 1, start=len(views))
            assert len(views) < 200
        last = views[-1].status
        assert last.layer is None and last.last_layer is not None  # this prepare ran none; the session's last stays
        per_turn = [e for e in seen if e.turn is not None]
        assert per_turn[-1].last_layer == last.last_layer and per_turn[-1].rule == "band"
        assert (per_turn[-1].used, per_turn[-1].budget, per_turn[-1].ratio) == (last.used, last.budget, last.ratio)
        session.save_status()
        record, _ = store.load_state("s", slot=STATUS_SLOT)
        assert record is not None and record["figures"] == session.status().figures()
        assert [p[0] for p in record["timeline"]["points"]] == list(range(1, len(views) + 1))
        assert {c["layer"] for c in record["timeline"]["compactions"]} <= {"clear", "evict", "summarize", "shrink"}
    with open_store(url) as store:
        reopened = Session("s", window=4000, reserved_output=200, store=store)
        assert reopened.status().last_layer == last.last_layer
        assert reopened.timeline.points[-1][0] == len(views)  # the history came back with the session


def test_a_session_saves_its_figures_every_few_turns_without_being_asked(tmp_path: Any) -> None:
    with open_store(f"sqlite:///{tmp_path / 'cw.db'}") as store:
        session = Session("s", window=100_000, reserved_output=200, store=store)
        _turns(session, 25)  # no compaction in so large a window
        record, version = store.load_state("s", slot=STATUS_SLOT)
        assert record is not None and version >= 2 and record["figures"]["turn"] >= 20


def test_the_timeline_stays_bounded_and_keeps_the_whole_session() -> None:
    timeline = Timeline(max_points=100, max_compactions=5)
    for turn in range(1, 5001):
        timeline.point(turn, turn * 2, turn / 5000)
        if turn % 100 == 0:
            timeline.compaction(turn=turn, layer="clear", trigger="high-water", before=10, after=4, items=1, ts=0.0)
    assert len(timeline.points) <= 100
    turns = [p[0] for p in timeline.points]
    assert turns[0] == 1 and turns[-1] == 5000 and turns == sorted(turns)
    assert [c["turn"] for c in timeline.compactions] == [4600, 4700, 4800, 4900, 5000]
    again = Timeline(max_points=100, max_compactions=5)
    again.load(timeline.to_dict())
    assert again.to_dict() == timeline.to_dict()

"""Pressure states in the band mode say what an operator can act on; the ratio mode keeps fixed thresholds."""

from __future__ import annotations

from hypothesis import given, strategies as st

from contextwarden.budget import Thresholds
from contextwarden.compaction.pressure import PressureInputs, pressure_state

T = Thresholds()


def state(**changes: object) -> str:
    base: dict[str, object] = {
        "used": 9_000,
        "effective": 10_000,
        "high_water": 1.0,
        "growth": 100.0,
        "floor": 1_000,
        "behind": False,
    }
    base.update(changes)
    return pressure_state(PressureInputs(**base), mode="band", thresholds=T)  # type: ignore[arg-type]


def test_a_full_view_that_compaction_handles_is_normal_not_critical() -> None:
    assert state(used=9_600, growth=100.0) == "normal"  # 96%: ratio mode would call it critical
    assert (
        pressure_state(
            PressureInputs(used=9_600, effective=10_000, high_water=1.0, growth=100.0, floor=1_000, behind=False),
            mode="ratio",
            thresholds=T,
        )
        == "critical"
    )


def test_a_compaction_due_within_three_turns_is_a_warning() -> None:
    assert state(used=9_000, growth=400.0) == "warning"  # 9,000 + 3 × 400 ≥ 10,000
    assert state(used=9_000, growth=300.0) == "normal"
    assert state(used=7_000, growth=0.0) == "normal"


def test_compaction_falling_behind_is_an_error_and_a_large_protected_part_is_critical() -> None:
    assert state(behind=True) == "error"
    assert state(floor=9_500) == "critical"
    assert state(used=10_001) == "overflow"


@given(
    used=st.integers(0, 20_000),
    growth=st.floats(0, 5_000),
    floor=st.integers(0, 20_000),
    behind=st.booleans(),
    high=st.floats(0.5, 1.0),
)
def test_band_states_are_ordered_by_what_went_wrong(
    used: int, growth: float, floor: int, behind: bool, high: float
) -> None:
    s = state(used=used, growth=growth, floor=floor, behind=behind, high_water=high)
    if used > 10_000:
        assert s == "overflow"
    elif floor >= 9_500:
        assert s == "critical"
    elif behind:
        assert s == "error"
    else:
        assert s in ("normal", "warning")


def _fill(session: object, rounds: int) -> None:
    from contextwarden import Message, ToolCall

    for i in range(rounds):
        call = Message.assistant(tool_calls=[ToolCall(call_id=f"c{i}", name="grep", arguments="{}")])
        session.add([Message.user(f"step {i}"), call, Message.tool_result(f"c{i}", "line of output\n" * 60)])  # type: ignore[attr-defined]
        session.prepare()  # type: ignore[attr-defined]


def test_a_session_near_its_compaction_mark_is_not_critical_in_band_mode_but_is_by_ratio() -> None:
    from contextwarden import CompactionConfig, Session

    band = Session("band", window=6000, reserved_output=0)
    ratio = Session("ratio", window=6000, reserved_output=0, config=CompactionConfig(pressure_states="ratio"))
    band_states, ratio_states = [], []
    for s, out in ((band, band_states), (ratio, ratio_states)):
        for _ in range(40):
            _fill(s, 1)
            out.append((s.status().ratio, s.status().state))
    assert any(r >= 0.95 and st == "critical" for r, st in ratio_states)
    assert all(st in ("normal", "warning") for _, st in band_states)
    assert any(st == "warning" for _, st in band_states), "a compaction coming up is announced"
    assert CompactionConfig.profile("seed").pressure_states == "ratio"


# --- the band with room held back for recalled memories -------------------------------------------


@given(
    effective=st.integers(100, 200_000),
    held=st.integers(0, 50_000),
    low_water=st.floats(0.05, 0.95),
)
def test_room_held_back_keeps_the_band_as_wide_as_the_whole_budget(effective: int, held: int, low_water: float) -> None:
    from contextwarden.compaction.base import Room
    from contextwarden.compaction.config import CompactionConfig

    room = Room.of(effective, CompactionConfig(), held=held)
    target = room.low_target(low_water)
    assert 0 <= target <= int(low_water * effective) + 1
    if target > 0:
        # from the trigger (the whole budget less what is held) down to the target: the same width
        # as a compaction to low water of the whole budget with nothing held back
        whole = effective + held
        assert abs((effective - target) - (whole - int(low_water * whole))) <= 1
    assert Room.of(effective, CompactionConfig()).low_target(low_water) == int(low_water * effective)

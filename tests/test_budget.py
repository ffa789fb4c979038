from __future__ import annotations

import pytest

from contextwarden.budget import Budget, ComponentBudgets, PressureMonitor, Thresholds
from contextwarden.exceptions import BudgetExceeded, ConfigError, UnknownModelError, UsageError

# --- thresholds and budget ---------------------------------------------------------------------------


def test_effective_budget():
    b = Budget(window=10_000, reserved_output=1_000, tool_schemas=500)
    assert b.effective == 8_500
    assert Budget(10_000, 1_000).effective == 9_000


def test_non_positive_effective_budget_names_the_three_values():
    with pytest.raises(ConfigError) as info:
        Budget(window=4_000, reserved_output=3_000, tool_schemas=1_000)
    msg = str(info.value)
    assert "window=4000" in msg and "reserved_output=3000" in msg and "tool_schemas=1000" in msg


@pytest.mark.parametrize("kwargs", [{"window": -1, "reserved_output": 0}, {"window": 100, "reserved_output": -1}])
def test_negative_values_rejected(kwargs):
    with pytest.raises(ConfigError):
        Budget(**kwargs)


@pytest.mark.parametrize(
    ("used", "state"),
    [
        (0, "normal"),
        (6_999, "normal"),
        (7_000, "warning"),
        (8_999, "warning"),
        (9_000, "error"),
        (9_499, "error"),
        (9_500, "critical"),
        (9_999, "critical"),
        (10_000, "overflow"),
        (50_000, "overflow"),
    ],
)
def test_states_at_each_boundary(used, state):
    b = Budget(window=12_000, reserved_output=2_000)
    assert b.effective == 10_000
    assert b.state(used) == state


def test_ratio_remaining_and_marks():
    b = Budget(window=12_000, reserved_output=2_000)
    assert b.ratio(2_500) == 0.25
    assert b.remaining(2_500) == 7_500
    assert b.tokens_at("warning") == 7_000
    assert b.tokens_at("normal") == 0
    assert b.tokens_at("overflow") == 10_000


def test_custom_thresholds():
    t = Thresholds(warning=0.5, error=0.6, critical=0.7, overflow=1.1)
    b = Budget(window=1_000, reserved_output=0, thresholds=t)
    assert b.state(499) == "normal"
    assert b.state(500) == "warning"
    assert b.state(1_050) == "critical"
    assert b.state(1_100) == "overflow"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"warning": 0.9, "error": 0.8},
        {"warning": 0.0},
        {"critical": 0.9},  # equal to error: not strictly increasing
        {"overflow": 2.5},
        {"warning": -0.1},
    ],
)
def test_thresholds_must_be_strictly_increasing(kwargs):
    with pytest.raises(ConfigError, match="strictly increasing"):
        Thresholds(**kwargs)


def test_check_fits_raises_budget_exceeded_for_an_oversized_item():
    b = Budget(window=10_000, reserved_output=2_000)
    b.check_fits(8_000)
    with pytest.raises(BudgetExceeded, match="8001 tokens") as info:
        b.check_fits(8_001, what="message 3")
    assert info.value.budget == 8_000 and info.value.used == 8_001
    assert "message 3" in str(info.value)


def test_budget_for_model():
    b = Budget.for_model("gpt-4o")
    assert (b.window, b.reserved_output) == (128_000, 16_384)
    # max output (64k) is capped at a quarter of the window
    q = Budget.for_model("claude-3-7-sonnet-20250219")
    assert q.reserved_output == 50_000
    assert Budget.for_model("gpt-4o", reserved_output=1_000, tool_schemas=500).effective == 126_500
    with pytest.raises(UnknownModelError):
        Budget.for_model("not-a-model")


# --- pressure monitor -----------------------------------------------------------------------------------


def test_burn_rate_and_turns_until_overflow():
    b = Budget(window=11_000, reserved_output=1_000)  # effective 10k
    mon = PressureMonitor(b, window=3)
    reports = [mon.record_turn(t) for t in (1_000, 2_000, 3_000, 4_000)]
    assert [r.delta for r in reports] == [0, 1_000, 1_000, 1_000]
    assert mon.burn_rate == 1_000
    assert reports[-1].turns_until_overflow == 6
    assert reports[-1].state == "normal"
    mon.record_turn(4_500)
    mon.record_turn(5_000)
    assert mon.burn_rate == pytest.approx(2_000 / 3)  # window of the last 3 deltas
    assert mon.turns_until_overflow() == 8  # ceil(5000 / 666.7)


def test_burn_rate_ignores_compactions_and_no_growth_gives_none():
    mon = PressureMonitor(Budget(window=10_000, reserved_output=0))
    mon.record_turn(5_000)
    assert mon.turns_until_overflow() is None
    mon.record_turn(6_000)
    r = mon.record_turn(2_000)  # compaction
    assert r.compacted and r.delta == -4_000
    assert mon.burn_rate == 1_000
    assert mon.record_turn(2_000, compacted=True).compacted
    assert mon.record_turn(12_000).turns_until_overflow == 0


def test_spike_detection():
    mon = PressureMonitor(Budget(window=1_000_000, reserved_output=0))
    totals = [0, 100, 210, 300, 400]
    for t in totals:
        assert not mon.record_turn(t).spike
    assert not mon.record_turn(700).spike  # 300 = exactly 3x the mean of 100: not more than
    big = mon.record_turn(700 + 1_000)
    assert big.spike
    assert mon.spikes == 1


def test_no_spike_before_enough_history():
    mon = PressureMonitor(Budget(window=1_000_000, reserved_output=0), min_history=3)
    mon.record_turn(0)
    mon.record_turn(10)
    assert not mon.record_turn(10_000).spike


def test_record_turn_rejects_bad_input():
    mon = PressureMonitor(Budget(window=100, reserved_output=0))
    with pytest.raises(UsageError):
        mon.record_turn(-1)
    with pytest.raises(UsageError):
        mon.record_turn(1.5)  # type: ignore[arg-type]
    assert mon.turns == 0


def test_monitor_settings_validated():
    with pytest.raises(ConfigError):
        PressureMonitor(Budget(window=100, reserved_output=0), spike_factor=1.0)


# --- component budgets ------------------------------------------------------------------------------------


@pytest.fixture
def comps() -> ComponentBudgets:
    return ComponentBudgets({"system": 1_000, "tool_results": 5_000, "history": None}, total=10_000)


def test_soft_limit_defaults_to_80_percent(comps):
    assert comps.soft["system"] == 800
    assert comps.hard["memory"] is None


def test_check_before_add_states(comps):
    ok = comps.check_before_add("system", 300, 500)
    assert ok.ok and ok.after == 800
    soft = comps.check_before_add("system", 301, 500)
    assert soft.status == "soft_exceeded" and soft.limit == 800
    assert "'system'" in soft.message and "801" in soft.message and "800" in soft.message
    hard = comps.check_before_add("system", 501, 500)
    assert hard.status == "hard_exceeded" and hard.limit == 1_000
    assert "1001" in hard.message and "hard limit of 1000" in hard.message
    # unlimited component
    assert comps.check_before_add("history", 10**9, 0).ok


def test_check_before_add_checks_the_total_with_a_usage_mapping(comps):
    usage = {"system": 500, "history": 8_000, "tool_results": 1_000}
    r = comps.check_before_add("tool_results", 600, usage)
    assert r.status == "hard_exceeded" and r.component == "total"
    assert r.current == 9_500 and r.after == 10_100
    assert usage == {"system": 500, "history": 8_000, "tool_results": 1_000}  # not mutated


def test_check_add_raises_on_hard_only(comps):
    assert comps.check_add("system", 900, 0).status == "soft_exceeded"
    with pytest.raises(BudgetExceeded, match="'system'") as info:
        comps.check_add("system", 1_001, 0)
    assert info.value.budget == 1_000 and info.value.used == 1_001


def test_check_usage(comps):
    comps.check_usage({"system": 1_000, "tool_results": 5_000})
    with pytest.raises(BudgetExceeded, match="tool_results"):
        comps.check_usage({"tool_results": 5_001})
    with pytest.raises(BudgetExceeded, match="total limit"):
        comps.check_usage({"history": 9_000, "system": 1_000, "memory": 1})


def test_component_errors(comps):
    with pytest.raises(ConfigError, match="unknown budget component"):
        comps.check_before_add("bogus", 1, 0)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        comps.check_before_add("system", -1, 0)
    with pytest.raises(ConfigError, match="above its hard limit"):
        ComponentBudgets({"system": 100}, soft={"system": 200})
    with pytest.raises(ConfigError):
        ComponentBudgets({"system": -5})
    with pytest.raises(ConfigError):
        ComponentBudgets({"system": 5}, soft_ratio=0)


def test_from_budget_shares():
    b = Budget(window=110_000, reserved_output=10_000)
    comps = ComponentBudgets.from_budget(b)
    assert comps.hard["history"] == 70_000
    assert comps.soft["history"] == 56_000
    assert comps.hard["output_reserve"] == 10_000
    assert comps.total == 110_000


# --- calibration scale and a served window ------------------------------------------------------------


def test_a_scale_turns_the_limits_into_counted_tokens():
    plain = Budget(window=10_000, reserved_output=1_000, tool_schemas=500)
    scaled = plain.adapted(scale=1.5)
    # the counter undercounts: 9,000 provider tokens hold 6,000 counted ones, minus the tools
    assert scaled.effective == 6_000 - 500
    assert scaled.calibrated(scaled.effective) + scaled.calibrated(500) <= 9_000
    assert scaled.calibrated_effective == 10_000 - 1_000 - 750
    assert scaled.calibrated(100) == 150 and plain.calibrated(100) == 100
    assert scaled.state(int(scaled.effective * 0.95)) == "critical"
    assert plain.adapted().effective == plain.effective == plain.calibrated_effective


def test_a_smaller_served_window_replaces_the_window_and_caps_the_reply():
    b = Budget(window=8192, reserved_output=2048)
    served = b.adapted(served_window=2048)
    assert (served.window, served.reserved_output, served.effective) == (2048, 512, 1536)
    assert b.adapted(served_window=16_000) == b  # a larger window is never adopted


def test_a_served_window_too_small_for_the_tools_is_refused():
    with pytest.raises(ConfigError, match="effective budget"):
        Budget(window=8192, reserved_output=1000, tool_schemas=1800).adapted(served_window=2048)


@pytest.mark.parametrize("scale", [0, -1, float("inf"), float("nan"), True, "1.2"])
def test_a_bad_scale_is_refused(scale):
    with pytest.raises(ConfigError, match="scale"):
        Budget(window=1000, reserved_output=0, scale=scale)

from __future__ import annotations

import json
import random

import pytest

from contextwarden.exceptions import ConfigError, UsageError
from contextwarden.tokens import Calibration


def test_starts_neutral():
    cal = Calibration()
    assert cal.factor == 1.0
    assert cal.samples == 0
    assert cal.error == 0.0
    assert cal.correct(1000) == 1000


def test_converges_to_the_true_ratio_under_noise():
    rng = random.Random(5)
    cal = Calibration()
    for _ in range(60):
        est = rng.randint(1_000, 50_000)
        cal.record(est, round(est * 1.18 * rng.uniform(0.97, 1.03)))
    assert cal.factor == pytest.approx(1.18, abs=0.03)
    assert cal.samples == 60
    # The raw estimates are ~18% low; corrected, they are within a few percent.
    assert cal.error == pytest.approx(0.153, abs=0.03)
    assert cal.corrected_error < 0.04
    assert cal.correct(10_000) == pytest.approx(11_800, rel=0.03)


def test_factor_is_clamped():
    cal = Calibration(max_factor=1.5)
    for _ in range(10):
        cal.record(100, 1_000)
    assert cal.factor == 1.5
    cal2 = Calibration(min_factor=0.8)
    cal2.record(1_000, 10)
    assert cal2.factor == 0.8


def test_one_outlier_moves_the_factor_only_by_alpha():
    cal = Calibration(alpha=0.1)
    for _ in range(20):
        cal.record(1000, 1000)
    cal.record(1000, 2000)
    assert cal.factor == pytest.approx(1.1)


def test_correct_rounds_up_and_handles_zero():
    cal = Calibration()
    cal.record(3, 4)
    assert cal.correct(3) == 4
    assert cal.correct(0) == 0


@pytest.mark.parametrize(("est", "rep"), [(0, 10), (10, 0), (-5, 10), (10.5, 10), (True, 10)])
def test_record_rejects_bad_samples_without_changing_state(est, rep):
    cal = Calibration()
    cal.record(100, 110)
    before = cal.to_dict()
    with pytest.raises(UsageError, match="positive token counts"):
        cal.record(est, rep)
    assert cal.to_dict() == before


def test_json_round_trip():
    cal = Calibration(alpha=0.3, window=5)
    for est, rep in [(100, 120), (200, 230), (300, 310)]:
        cal.record(est, rep)
    data = json.loads(json.dumps(cal.to_dict()))
    back = Calibration.from_dict(data)
    assert back.to_dict() == cal.to_dict()
    assert back.error == cal.error
    assert back.correct(1234) == cal.correct(1234)


def test_error_covers_only_the_recent_window():
    cal = Calibration(window=3)
    cal.record(100, 200)  # 50% error, falls out of the window
    for _ in range(3):
        cal.record(100, 100)
    assert cal.error == 0.0


@pytest.mark.parametrize(
    "kwargs", [{"alpha": 0}, {"alpha": 1.5}, {"min_factor": 1.2}, {"max_factor": 0.9}, {"window": 0}]
)
def test_bad_settings(kwargs):
    with pytest.raises(ConfigError):
        Calibration(**kwargs)


def test_from_dict_rejects_malformed_state():
    with pytest.raises(ConfigError, match="to_dict"):
        Calibration.from_dict({"alpha": 0.2})


def test_the_factor_is_applied_only_after_min_samples_and_in_steps():
    cal = Calibration(min_samples=3)
    cal.record(1000, 1291)
    cal.record(1000, 1291)
    assert cal.factor == pytest.approx(1.291) and cal.applied == 1.0  # two samples: not yet
    cal.record(1000, 1291)
    assert cal.applied == 1.29


def test_the_applied_factor_stays_within_the_clamp():
    cal = Calibration(min_samples=1)
    cal.record(100, 900)
    assert cal.applied == 2.0
    low = Calibration(min_samples=1)
    low.record(900, 100)
    assert low.applied == 0.5


def test_a_served_window_is_kept_only_when_smaller():
    cal = Calibration()
    assert cal.adopt_window(4096) is True and cal.served_window == 4096
    assert cal.adopt_window(8192) is False and cal.served_window == 4096
    assert cal.adopt_window(2048) is True and cal.served_window == 2048
    with pytest.raises(UsageError, match="positive int"):
        cal.adopt_window(0)
    back = Calibration.from_dict(json.loads(json.dumps(cal.to_dict())))
    assert back.served_window == 2048 and back.min_samples == cal.min_samples


def test_state_saved_before_min_samples_and_served_window_existed_still_loads():
    old = {"alpha": 0.2, "min_factor": 0.5, "max_factor": 2.0, "window": 20, "factor": 1.2, "samples": 5}
    cal = Calibration.from_dict(old)
    assert cal.applied == 1.2 and cal.served_window is None


@pytest.mark.parametrize("state", [{"factor": float("nan")}, {"served_window": -5}, {"min_samples": 0}])
def test_from_dict_rejects_bad_new_fields(state):
    good = Calibration().to_dict()
    with pytest.raises(ConfigError, match="to_dict"):
        Calibration.from_dict({**good, **state})


def test_bad_min_samples():
    with pytest.raises(ConfigError, match="min_samples"):
        Calibration(min_samples=0)

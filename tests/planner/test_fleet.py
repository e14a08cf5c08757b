"""Fleet failure arithmetic: the chapter's 128 GPUs at 5% a year."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuchain.planner import PlanInputError, fleet_risk


def test_chapter_fleet_128_gpus_at_5_percent() -> None:
    risk = fleet_risk(128, annual_failure_rate=0.05)
    assert risk.expected_failures_per_year == pytest.approx(6.4)
    assert risk.days_between_failures == pytest.approx(365 / 6.4)
    assert round(risk.days_between_failures or 0) == 57
    assert risk.manual_hours_per_year == pytest.approx(12.8)
    assert risk.p_failure_in_window == pytest.approx(1 - math.exp(-6.4 * 30 / 365))
    assert "6.4 expected failures a year, one every 57 days" in risk.summary
    assert "routine event, not a black swan" in risk.summary


def test_small_fleet_is_not_called_routine() -> None:
    risk = fleet_risk(8, annual_failure_rate=0.05)
    assert risk.days_between_failures == pytest.approx(912.5)
    assert "rare" in risk.summary
    assert "routine" not in risk.summary


def test_zero_rate_means_no_interval() -> None:
    risk = fleet_risk(128, annual_failure_rate=0.0)
    assert risk.expected_failures_per_year == 0
    assert risk.days_between_failures is None
    assert risk.p_failure_in_window == 0
    assert risk.summary.endswith("none expected.")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpus": 0, "annual_failure_rate": 0.05}, r"--gpus: must be at least 1, got 0"),
        ({"gpus": 8, "annual_failure_rate": 1.5}, r"--failure-rate: must be between 0% and 100%"),
        ({"gpus": 8, "annual_failure_rate": 0.05, "hours_per_failure": -1}, r"--hours-per-failure"),
    ],
)
def test_out_of_range_inputs_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(PlanInputError, match=message):
        fleet_risk(**kwargs)  # type: ignore[arg-type]


@given(st.integers(min_value=1, max_value=100_000), st.floats(min_value=1e-4, max_value=1.0))
def test_failures_times_interval_is_a_year(gpus: int, rate: float) -> None:
    risk = fleet_risk(gpus, annual_failure_rate=rate)
    assert risk.days_between_failures is not None
    assert risk.expected_failures_per_year * risk.days_between_failures == pytest.approx(365)
    assert 0 < risk.p_failure_in_window < 1 or risk.p_failure_in_window == pytest.approx(1)

"""How often a fleet loses a GPU: the arithmetic that turns "rare" into "every couple of months".

With an annual per-GPU failure rate r and N GPUs, a fleet expects N x r failures a year, one every
365 / (N x r) days. Failures are modelled as a Poisson process, which also gives the chance of at
least one failure inside a window (the next on-call month). Counting the hours each failure costs
by hand says what automating the response (cordon, drain, ticket) is worth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuchain.planner.errors import PlanInputError

DAYS_PER_YEAR = 365
ROUTINE_DAYS = 62
"""A failure at least every two months is routine work to automate, not an incident to improvise."""


@dataclass(frozen=True, kw_only=True)
class FleetRisk:
    """Expected GPU failures for one fleet, and what they cost when handled by hand.

    ``days_between_failures`` is None when the failure rate is zero (nothing is expected to fail).
    """

    gpus: int
    annual_failure_rate: float
    expected_failures_per_year: float
    days_between_failures: float | None
    window_days: int
    p_failure_in_window: float
    hours_per_failure: float
    manual_hours_per_year: float
    summary: str


def fleet_risk(
    gpus: int, *, annual_failure_rate: float, hours_per_failure: float = 2.0, window_days: int = 30
) -> FleetRisk:
    """Expected failures a year, the mean interval between them and the yearly manual toil.

    Raises PlanInputError naming the flag when a value is out of range.
    """
    if gpus < 1:
        raise PlanInputError(f"--gpus: must be at least 1, got {gpus}")
    if not 0 <= annual_failure_rate <= 1:
        raise PlanInputError(f"--failure-rate: must be between 0% and 100%, got {annual_failure_rate:.2%}")
    if hours_per_failure < 0:
        raise PlanInputError(f"--hours-per-failure: must be zero or more, got {hours_per_failure:g}")
    if window_days < 1:
        raise PlanInputError(f"window: must be at least 1 day, got {window_days}")
    per_year = gpus * annual_failure_rate
    interval = DAYS_PER_YEAR / per_year if per_year else None
    p_window = 1 - math.exp(-per_year * window_days / DAYS_PER_YEAR)
    toil = per_year * hours_per_failure
    return FleetRisk(
        gpus=gpus,
        annual_failure_rate=annual_failure_rate,
        expected_failures_per_year=per_year,
        days_between_failures=interval,
        window_days=window_days,
        p_failure_in_window=p_window,
        hours_per_failure=hours_per_failure,
        manual_hours_per_year=toil,
        summary=_summary(gpus, annual_failure_rate, per_year, interval, toil),
    )


def _summary(gpus: int, rate: float, per_year: float, interval: float | None, toil: float) -> str:
    head = f"{gpus} GPUs x {rate * 100:.3g}% a year = {per_year:.3g} expected failures a year"
    if interval is None:
        return head + ": none expected."
    every = f"one every {interval:.0f} days"
    if interval <= ROUTINE_DAYS:
        verdict = (
            "a routine event, not a black swan: automate the response (liveness probes, XID alert -> "
            f"cordon and drain, hardware ticket) instead of {toil:.3g} hours a year by hand"
        )
    elif interval <= DAYS_PER_YEAR:
        verdict = f"expect it within the year; {toil:.3g} hours a year if handled by hand"
    else:
        verdict = "rare, but plan the runbook before it happens"
    return f"{head}, {every}: {verdict}."

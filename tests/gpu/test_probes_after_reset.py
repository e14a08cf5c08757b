"""A GPU reset starts the NVLink counters afresh (``ProbeState.reset``): a counter probe the GPU
had before the reset stays until a reading after it was compared with the next one, so a link that
keeps failing is never declared cured on one baseline reading."""

from __future__ import annotations

from gpuchain.gpu.probes import HealthReadings, NvLinkCounters, ProbeLimits, ProbeState


def reading(recovery: int) -> HealthReadings:
    return HealthReadings(uuid="g", nvlink=(NvLinkCounters(14, replay=0, recovery=recovery, crc_flit=0, crc_data=0),))


def tripped_then_reset() -> ProbeState:
    state = ProbeState(limits=ProbeLimits(hold_s=3600))
    assert state.check(reading(505), 0.0) == ()  # a lifetime count is no fault: only a rise is
    assert state.check(reading(508), 30.0) == ("nvlink-recovery",)
    state.reset("g", 40.0)
    return state


def test_a_cured_link_is_clear_once_two_readings_after_the_reset_agree() -> None:
    state = tripped_then_reset()
    assert state.check(reading(0), 50.0) == ("nvlink-recovery",)  # the baseline proves nothing yet
    assert state.check(reading(0), 80.0) == ()


def test_a_link_that_keeps_failing_after_the_reset_stays_tripped() -> None:
    state = tripped_then_reset()
    assert state.check(reading(0), 50.0) == ("nvlink-recovery",)
    assert state.check(reading(1), 80.0) == ("nvlink-recovery",)
    assert state.check(reading(1), 3000.0) == ("nvlink-recovery",)  # held for the window from the new rise


def test_a_gpu_without_counter_probes_starts_clean_after_a_reset_and_forget_drops_everything() -> None:
    state = ProbeState()
    state.check(reading(0), 0.0)
    state.reset("g", 10.0)
    assert state.check(reading(0), 20.0) == ()
    tripped = tripped_then_reset()
    tripped.forget("g")  # the GPU left
    assert tripped.check(reading(0), 50.0) == ()


def test_a_second_reset_before_the_comparison_keeps_the_probe_unverified() -> None:
    """NvmlBackend reports a lost GPU twice ("GPU answers again", then "GPU reset"): the second
    reset brings no reading, so the probe the first one left unverified must stay (review of
    2026-12-03, /tmp/review-18/probe_reset.py)."""
    state = tripped_then_reset()
    state.reset("g", 40.1)
    assert state.check(reading(0), 50.0) == ("nvlink-recovery",)
    assert state.check(reading(0), 80.0) == ()


def test_a_reset_between_baseline_and_comparison_keeps_the_probe_too() -> None:
    state = tripped_then_reset()
    assert state.check(reading(0), 50.0) == ("nvlink-recovery",)
    state.reset("g", 60.0)
    assert state.check(reading(0), 70.0) == ("nvlink-recovery",)  # a new baseline, still no evidence
    assert state.check(reading(2), 90.0) == ("nvlink-recovery",)  # and the link failed again

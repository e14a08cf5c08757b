"""SimBackend's health readings by GPU generation, and what a reset does to them.

Grounded in NVIDIA's real T4 capture (NVIDIA/k8s-test-infra@63018b86,
tests/e2e/go/assertions/nvidiasmi/testdata/hardware/qx-t4.xml: ``retired_pages`` with counts 0 and
``pending_retirement`` No, ``remapped_rows`` N/A) and NVIDIA's Dynamic Page Retirement guide
(docs.nvidia.com/deploy/dynamic-page-retirement: the retired-page count goes up when the page is
retired and is kept in the InfoROM; the page is excluded when the GPU is attached again)."""

from __future__ import annotations

from gpuchain.gpu.probes import instant
from gpuchain.gpu.sim import SimBackend


def test_a_t4_reports_page_retirement_and_no_row_remapping() -> None:
    sim = SimBackend.from_preset("t4-x4")
    readings = sim.health_readings(sim.inventory().gpu(0).uuid)
    assert (readings.retired_pages_pending, readings.retired_pages_sbe, readings.retired_pages_dbe) == (False, 0, 0)
    assert readings.row_remap_pending is None and readings.row_remap_failed is None


def test_an_h100_reports_row_remapping_and_no_page_retirement() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    readings = sim.health_readings(sim.inventory().gpu(0).uuid)
    assert readings.retired_pages is None and readings.retired_pages_pending is None
    assert readings.row_remap_pending is False


def test_a_reset_activates_a_pending_retirement_and_keeps_the_count() -> None:
    sim = SimBackend.from_preset("t4-x4")
    uuid = sim.inventory().gpu(1).uuid
    sim.set_health_readings(1, retired_pages_pending=True, retired_pages_dbe=1)
    assert instant(sim.health_readings(uuid)) == ("retired-pages-pending",)
    sim.reset_gpu(1)
    after = sim.health_readings(uuid)
    assert (after.retired_pages_pending, after.retired_pages) == (False, 1)
    assert instant(after) == ()


def test_a_count_at_dcgms_limit_survives_the_reset_and_is_reported_not_failed_by_the_burn_in() -> None:
    """The count stays in the InfoROM, so no reset or reboot lowers it: the burn-in names it and
    passes, as for a GPU that reached the limit without a reset (review of 2026-12-03: the burn-in
    failed on it and the loop asked for a reboot that could not help)."""
    sim = SimBackend.from_preset("t4-x4")
    uuid = sim.inventory().gpu(3).uuid
    sim.set_health_readings(3, retired_pages_pending=True, retired_pages_sbe=53, retired_pages_dbe=10)
    sim.reset_gpu(3)
    assert instant(sim.health_readings(uuid)) == ("retired-pages-limit",)
    burn_in = sim.burn_in(3)
    assert burn_in.passed, burn_in.summary()
    assert burn_in.checks[0].detail == "needs no repair: retired pages at DCGM's limit (an RMA candidate)"
    assert "nvml: ok (needs no repair: retired pages at DCGM's limit" in burn_in.summary()
    assert "cuda" not in burn_in.skipped  # nothing NVML judged stops the CUDA checks

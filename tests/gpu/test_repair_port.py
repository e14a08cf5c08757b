"""The repair loop's port: SimBackend's reset and burn-in (and their injected failures), and
HealthState's quarantine, which withholds a GPU with its MIG devices whatever its events say."""

from __future__ import annotations

import pytest

from gpuchain.gpu.errors import GpuError, GpuLostError
from gpuchain.gpu.health import QUARANTINED, HealthState
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.sim import SimBackend


def test_reset_reports_the_gpu_recovered_and_injected_failures_run_out(h100_sim: SimBackend) -> None:
    seen: list[HealthEvent] = []
    h100_sim.add_listener(seen.append)
    h100_sim.fail_reset(2, times=1)
    with pytest.raises(GpuError, match="reset failed"):
        h100_sim.reset_gpu(2)
    assert seen == []
    h100_sim.reset_gpu(2)
    assert [(e.kind, e.gpu_uuid) for e in seen] == [(EventKind.GPU_RECOVERED, h100_sim.inventory().gpu(2).uuid)]


def test_a_lost_gpu_cannot_be_reset(h100_sim: SimBackend) -> None:
    h100_sim.lose_gpu(1)
    with pytest.raises(GpuLostError):
        h100_sim.reset_gpu(1)


def test_burn_in_passes_and_names_each_failing_check(h100_sim: SimBackend) -> None:
    result = h100_sim.burn_in(0)
    assert result.passed
    assert (
        result.summary() == "nvml: ok; cuda: ok; memory: ok; fabric: ok; dcgm: skipped (no DCGM on this simulated node)"
    )
    h100_sim.fail_burn_in(0, check="memory", times=1)
    failed = h100_sim.burn_in(0)
    assert not failed.passed and "memory: memory test found errors" in failed.summary()
    assert h100_sim.burn_in(0).passed  # the one injected failure is used up
    h100_sim.set_telemetry(0, row_remap_failure=1)
    row_remap = h100_sim.burn_in(0)
    assert "nvml: row remapping failed" in row_remap.summary()
    assert row_remap.reasons["cuda"] == "not run: an NVML check failed"  # as NvmlBackend: nothing runs after
    h100_sim.lose_gpu(3)
    assert not h100_sim.burn_in(3).passed
    with pytest.raises(ValueError, match="unknown burn-in check"):
        h100_sim.fail_burn_in(0, check="nccl")


def test_sim_burn_in_models_the_fabric_dcgm_and_mig_rules_of_the_real_one(
    h100_sim: SimBackend, mig_sim: SimBackend
) -> None:
    h100_sim.fail_burn_in(2, check="fabric", times=1)
    stuck = h100_sim.burn_in(2)
    assert "fabric: NVLink fabric state In Progress after 60 s" in stuck.summary()
    assert set(stuck.skipped) == {"cuda", "memory", "dcgm"}
    h100_sim.dcgm = True
    h100_sim.fail_burn_in(2, check="dcgm", times=1)
    assert "dcgm: diagnostic: DCGM's diagnostic test failed" in h100_sim.burn_in(2).summary()
    assert h100_sim.burn_in(2).summary().endswith("dcgm: ok")
    a100 = SimBackend.from_preset("a100-80gb-x8").burn_in(0)
    assert a100.reasons["fabric"].startswith("not an NVSwitch fabric GPU")
    mig = mig_sim.burn_in(0)
    assert mig.passed and "MIG mode is on" in mig.reasons["cuda"]


def test_a_failing_reset_can_say_what_nvidia_smi_said(h100_sim: SimBackend) -> None:
    h100_sim.fail_reset(1, times=1, reason="GPU 00000000:1A:00.0: In use by another client")
    with pytest.raises(GpuError, match="GPU 1: GPU 00000000:1A:00.0: In use by another client"):
        h100_sim.reset_gpu(1)
    h100_sim.reset_gpu(1)


def test_quarantine_withholds_a_gpu_and_its_mig_devices_until_lifted(mig_sim: SimBackend) -> None:
    gpu = mig_sim.inventory().gpu(0)
    mig = gpu.mig_devices[0].uuid
    state = HealthState(quiet_seconds=0)
    assert state.quarantine(frozenset({gpu.uuid}))
    assert not state.quarantine(frozenset({gpu.uuid}))  # unchanged
    assert state.reason(gpu.uuid, mig) == QUARANTINED and gpu.uuid in state.unhealthy()
    state.apply(HealthEvent(kind=EventKind.GPU_RECOVERED, gpu_uuid=gpu.uuid), 0)  # a reset's recovery does not lift it
    assert not state.healthy(gpu.uuid)
    assert state.quarantine(frozenset())
    assert state.healthy(gpu.uuid, mig)


def test_probes_read_row_remapping_from_the_readings(h100_sim: SimBackend) -> None:
    from gpuchain.gpu.probes import instant

    uuid = h100_sim.inventory().gpu(1).uuid
    assert instant(h100_sim.health_readings(uuid)) == ()
    h100_sim.set_telemetry(1, row_remap_pending=1, row_remap_failure=1)
    assert instant(h100_sim.health_readings(uuid)) == ("row-remap-failed", "row-remap-pending")
    h100_sim.reset_gpu(1)  # a reset activates the pending remap; a failure stays
    assert instant(h100_sim.health_readings(uuid)) == ("row-remap-failed",)

"""The processes on a GPU: the sim backend and NVML (over the fake driver) give the same answer."""

from __future__ import annotations

import pytest
from fakes.fake_pynvml import nvml_over

from gpuchain.gpu.processes import GpuProcess
from gpuchain.gpu.sim import SimBackend


def test_processes_parity_time_sliced_and_mps() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    gpu = sim.inventory().gpus[2]
    sim.run_process(2, pid=4101, memory_mib=20_000, sm_percent=55)
    sim.run_process(2, pid=4102, memory_mib=6_000, sm_percent=15)
    sim.run_process(2, pid=4103, memory_mib=1_000, sm_percent=5, mps=True)
    expected = (
        GpuProcess(pid=4101, device_uuid=gpu.uuid, used_memory_mib=20_000, sm_percent=55),
        GpuProcess(pid=4102, device_uuid=gpu.uuid, used_memory_mib=6_000, sm_percent=15),
        GpuProcess(pid=4103, device_uuid=gpu.uuid, used_memory_mib=1_000, sm_percent=5, mps=True),
    )
    assert sim.processes(gpu.uuid) == expected
    assert tuple(sorted(nvml_over(sim).processes(gpu.uuid), key=lambda p: p.pid)) == expected
    # The device's own readings are what its processes use together.
    telemetry = sim.telemetry(gpu.uuid)
    assert (telemetry.memory_used_mib, telemetry.gpu_util) == (27_000, 75)


def test_processes_on_mig_devices_have_memory_but_no_sm_share() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    sim.set_mig_layout(0, {"1g.10gb": 7})
    mig = sim.inventory().gpus[0].mig_devices[1]
    sim.run_process(mig.uuid, pid=77, memory_mib=3_000, sm_percent=40)
    ours = nvml_over(sim).processes(sim.inventory().gpus[0].uuid)
    assert ours == (GpuProcess(pid=77, device_uuid=mig.uuid, used_memory_mib=3_000, sm_percent=None),)
    assert sim.mig_memory(mig.uuid).used_mib == 3_000


def test_no_process_means_no_sm_samples_not_an_error() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    assert nvml_over(sim).processes(sim.inventory().gpus[0].uuid) == ()


def test_processes_cannot_use_more_than_the_gpu() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    sim.run_process(0, pid=1, memory_mib=70_000, sm_percent=90)
    with pytest.raises(ValueError, match="does not fit"):
        sim.run_process(0, pid=2, memory_mib=20_000)
    with pytest.raises(ValueError, match="past 100%"):
        sim.run_process(0, pid=3, memory_mib=10, sm_percent=20)


def test_memory_the_driver_withholds_is_none_not_a_number() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    uuid = sim.inventory().gpus[0].uuid
    sim.run_process(0, pid=5, memory_mib=None, sm_percent=10)
    assert nvml_over(sim).processes(uuid) == (GpuProcess(pid=5, device_uuid=uuid, used_memory_mib=None, sm_percent=10),)

"""The GPU layer's MIG write port behaves the same on the simulator and through NVML (the fake
pynvml), and refuses what the hardware refuses."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fakes.fake_pynvml import FakeNvml

from gpuchain.gpu.backend import ComputeInstance, GpuBackend, GpuInstance, MigMode
from gpuchain.gpu.errors import GpuError, InvalidConfigError, NotSupportedError
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.sim import SimBackend


def nvml_over(sim: SimBackend) -> NvmlBackend:
    """NvmlBackend over the fake pynvml answering from ``sim`` (the NVML code path, no driver)."""
    return NvmlBackend(nvml=FakeNvml(sim))


BACKENDS: list[Callable[[SimBackend], GpuBackend]] = [lambda s: s, nvml_over]
IDS = ["sim", "nvml"]


@pytest.mark.parametrize("make", BACKENDS, ids=IDS)
def test_create_list_and_destroy_instances(make: Callable[[SimBackend], GpuBackend]) -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    backend = make(sim)
    assert backend.mig_mode(6) == MigMode(False, False)
    assert backend.set_mig_mode(6, True) == MigMode(True, True)
    gi = backend.create_gpu_instance(6, profile="3g.40gb", start=4)
    assert backend.gpu_instances(6) == (GpuInstance(gi_id=gi, profile="3g.40gb", start=4),)  # no compute instance yet
    assert not backend.inventory().gpu(6).mig_devices
    ci = backend.create_compute_instance(6, gi_id=gi)
    assert backend.gpu_instances(6) == (
        GpuInstance(gi_id=gi, profile="3g.40gb", start=4, compute_instances=(ComputeInstance(ci, 3),)),
    )
    (mig,) = backend.inventory().gpu(6).mig_devices
    assert (mig.profile, mig.gi_id, mig.ci_id, mig.memory_mib) == ("3g.40gb", gi, ci, 40448)
    assert nvml_over(sim).inventory() == sim.inventory()
    backend.destroy_gpu_instance(6, gi)
    assert backend.gpu_instances(6) == ()
    assert backend.set_mig_mode(6, False) == MigMode(False, False)


@pytest.mark.parametrize("make", BACKENDS, ids=IDS)
def test_hardware_refusals(make: Callable[[SimBackend], GpuBackend]) -> None:
    sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")  # GPU 0: 2g.20gb@0, 1g@2, 1g@3, 3g.40gb@4
    backend = make(sim)
    refused = (InvalidConfigError, GpuError)
    with pytest.raises(refused):
        backend.create_gpu_instance(0, profile="1g.10gb", start=4)  # overlaps the 3g.40gb
    with pytest.raises(refused):
        backend.set_mig_mode(0, False)  # GPU instances still exist
    with pytest.raises(NotSupportedError):
        backend.create_gpu_instance(6, profile="1g.10gb", start=0)  # MIG mode is off on GPU 6
    with pytest.raises(refused):
        backend.create_compute_instance(0, gi_id=backend.gpu_instances(0)[0].gi_id)  # already has its full CI


def test_sim_names_gpu_profile_and_rule() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
    with pytest.raises(InvalidConfigError, match="GPU 0 \\(H100-80GB\\): 3g.40gb cannot start at slice 2"):
        sim.create_gpu_instance(0, profile="3g.40gb", start=2)
    with pytest.raises(InvalidConfigError, match="at most 1 x 1g.10gb\\+me per GPU"):
        sim.set_mig_layout(6, {})
        sim.create_gpu_instance(6, profile="1g.10gb+me", start=0)
        sim.create_gpu_instance(6, profile="1g.10gb+me", start=1)


def test_nvml_uses_profile_info_ids_not_profile_constants() -> None:
    """NVML creates and lists GPU instances by the id profile info answers (19 for 1g.10gb),
    not by NVML_GPU_INSTANCE_PROFILE_1_SLICE (0); the fake answers real ids to catch a mix-up."""
    sim = SimBackend.from_preset("h100-80gb-x8")
    fake = FakeNvml(sim)
    backend = NvmlBackend(nvml=fake)
    backend.set_mig_mode(0, True)
    info = fake.nvmlDeviceGetGpuInstanceProfileInfo(fake.nvmlDeviceGetHandleByIndex(0), 0)
    assert info.id == 19 and info.instanceCount == 7
    gi = backend.create_gpu_instance(0, profile="1g.10gb", start=3)
    backend.create_compute_instance(0, gi_id=gi)
    assert backend.inventory().gpu(0).mig_devices[0].profile == "1g.10gb"
    assert backend.gpu_instances(0)[0].start == 3


def test_pending_mode_change_waits_for_a_reset() -> None:
    sim = SimBackend.from_preset("a100-40gb-x8")
    sim.mig_mode_needs_reset = True
    backend = nvml_over(sim)
    assert backend.set_mig_mode(1, True) == MigMode(current=False, pending=True)
    assert not backend.inventory().gpu(1).mig_enabled
    with pytest.raises(NotSupportedError, match="nvidia-smi -r -i 1"):
        backend.reset_gpu(1)
    sim.reset_gpu(1)
    assert backend.mig_mode(1) == MigMode(True, True) and backend.inventory().gpu(1).mig_enabled


def test_backends_without_mig_writes_say_so() -> None:
    class ReadOnly(GpuBackend):
        def inventory(self):  # type: ignore[no-untyped-def]
            raise NotImplementedError

        def telemetry(self, gpu_uuid):  # type: ignore[no-untyped-def]
            raise NotImplementedError

        def events(self):  # type: ignore[no-untyped-def]
            raise NotImplementedError

    with pytest.raises(NotSupportedError, match="cannot change MIG mode"):
        ReadOnly().set_mig_mode(0, True)


@pytest.mark.parametrize("make", BACKENDS, ids=IDS)
def test_a_gpu_instance_split_into_smaller_compute_instances(make: Callable[[SimBackend], GpuBackend]) -> None:
    """``1c.3g.40gb``: compute instances of one slice each in a 3-slice GPU instance, named and
    sized as NVIDIA's device plugin and GFD read them (the GPU instance's memory, the CI's SMs)."""
    sim = SimBackend.from_preset("h100-80gb-x8")
    backend = make(sim)
    backend.set_mig_mode(6, True)
    gi = backend.create_gpu_instance(6, profile="3g.40gb", start=0)
    cis = [
        backend.create_compute_instance(6, gi_id=gi, slices=2),
        backend.create_compute_instance(6, gi_id=gi, slices=1),
    ]
    assert backend.gpu_instances(6) == (
        GpuInstance(
            gi_id=gi,
            profile="3g.40gb",
            start=0,
            compute_instances=(ComputeInstance(cis[0], 2), ComputeInstance(cis[1], 1)),
        ),
    )
    devices = sorted(backend.inventory().gpu(6).mig_devices, key=lambda m: m.ci_id)
    assert [(m.profile, m.gi_slices, m.ci_slices, m.memory_mib) for m in devices] == [
        ("2c.3g.40gb", 3, 2, 40448),
        ("1c.3g.40gb", 3, 1, 40448),
    ]
    full = SimBackend.from_preset("h100-80gb-x8-mig-mixed").inventory().gpu(0).mig_devices[-1]
    assert full.profile == "3g.40gb" and [m.multiprocessors for m in devices] == [
        full.multiprocessors * 2 // 3,
        full.multiprocessors // 3,
    ]
    assert nvml_over(sim).inventory() == sim.inventory()
    with pytest.raises((InvalidConfigError, GpuError)):
        backend.create_compute_instance(6, gi_id=gi, slices=1)  # all three slices are taken
    backend.destroy_gpu_instance(6, gi)  # its compute instances first
    assert backend.gpu_instances(6) == ()


@pytest.mark.parametrize("make", BACKENDS, ids=IDS)
def test_a_compute_instance_size_the_gpu_instance_does_not_offer_is_refused(
    make: Callable[[SimBackend], GpuBackend],
) -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    backend = make(sim)
    backend.set_mig_mode(6, True)
    gi = backend.create_gpu_instance(6, profile="4g.40gb", start=0)
    with pytest.raises((InvalidConfigError, NotSupportedError)):
        backend.create_compute_instance(6, gi_id=gi, slices=3)  # a 4-slice GPU instance has 1c, 2c and 4c only
    with pytest.raises((InvalidConfigError, NotSupportedError)):
        backend.create_compute_instance(6, gi_id=gi, slices=7)
    assert backend.gpu_instances(6) == (GpuInstance(gi_id=gi, profile="4g.40gb", start=0),)

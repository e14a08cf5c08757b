"""The DRA plugin withdraws the GPUs the repair loop quarantines (and their MIG devices) from its
ResourceSlice, with a new pool generation, and returns them when the loop lets them go."""

from __future__ import annotations

from dra.conftest import DriverFactory

from gpuchain.gpu.sim import SimBackend


def test_quarantined_gpu_and_its_mig_devices_leave_the_slice_and_come_back(
    mig_sim: SimBackend, make_driver: DriverFactory
) -> None:
    driver = make_driver(mig_sim)
    before = driver.publish()
    gpu = mig_sim.inventory().gpu(0)
    assert gpu.mig_devices
    published = driver.set_quarantined(frozenset({gpu.uuid}))
    assert published is not None and published.generation == before.generation + 1
    assert len(published.devices) == len(before.devices) - len(gpu.mig_devices)
    assert driver.set_quarantined(frozenset({gpu.uuid})) is None  # unchanged: no new generation
    back = driver.set_quarantined(frozenset())
    assert back is not None and back.devices == before.devices

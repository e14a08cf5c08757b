"""The DRA plugin while it has let go of NVML for a GPU reset on its node (``gpu.nvmlrelease``):
the slice is republished and the other GPUs' claims are prepared from the inventory seen before,
and no device is withdrawn for it."""

from __future__ import annotations

from pathlib import Path

from dra.conftest import Allocate
from dra.fakeclock import QUIET, Clock
from fakes.releasable import ReleasableView

from gpuchain.dra.driver import DraDriver, DriverConfig
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.memory import MemoryCluster


def test_released_driver_republishes_and_prepares_other_gpus_claims(
    h100_sim: SimBackend, cluster: MemoryCluster, allocate: Allocate, short_dir: Path, clock: Clock
) -> None:
    view = ReleasableView(h100_sim)
    config = DriverConfig(
        node=h100_sim.topology.node,
        cdi_dir=short_dir / "cdi",
        state_dir=short_dir / "state",
        recovery_quiet_seconds=QUIET,
        dev_root=short_dir / "driver-root",
    )
    driver = DraDriver(view, cluster, config, clock)
    before = driver.publish()
    reset = h100_sim.inventory().gpu(3).uuid
    view.release()

    assert driver.publish().devices == before.devices  # a resync while released changes nothing
    quarantined = driver.set_quarantined(frozenset({reset}))
    assert quarantined is not None and "gpu-3" not in quarantined.devices and len(quarantined.devices) == 7
    prepared = driver.prepare(allocate("train", "h100-node", ["gpu-5"]))
    assert [d.device for d in prepared.devices] == ["gpu-5"]
    assert view.reads_while_released >= 2
    assert driver.unhealthy == {reset}  # the quarantined GPU only: nothing withdrawn for the release

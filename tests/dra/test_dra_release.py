"""The DRA plugin while it has let go of NVML for a GPU reset on its node (``gpu.nvmlrelease``):
the slice is republished and the other GPUs' claims are prepared from the inventory seen before,
and no device is withdrawn for it."""

from __future__ import annotations

from pathlib import Path

from dra.conftest import Allocate, DriverFactory
from dra.fakeclock import QUIET, Clock
from fakes.releasable import ReleasableView

from gpuchain.dra.driver import DraDriver, DriverConfig
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.allocator import DRA
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
        unlabelled=DRA,
    )
    driver = DraDriver(view, cluster=cluster, config=config, clock=clock)
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


def test_a_gpu_the_loop_gives_back_returns_after_the_quiet_period(
    h100_sim: SimBackend, make_driver: DriverFactory, clock: Clock
) -> None:
    """gpu-health reset the GPU and saw the driver's recovery; this process saw only the XID. The
    loop gives the GPU back after reset and burn-in: that is its recovery here."""
    driver = make_driver(h100_sim)
    before = driver.publish()
    gpu = h100_sim.inventory().gpu(3).uuid
    driver.on_event(HealthEvent(kind=EventKind.XID, gpu_uuid=gpu, xid=48))
    driver.set_quarantined(frozenset({gpu}))
    driver.set_quarantined(frozenset())
    assert gpu in driver.unhealthy  # the quiet period first
    clock.now += QUIET
    back = driver.finish_recoveries()
    assert back is not None and back.devices == before.devices

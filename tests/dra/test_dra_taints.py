"""Health as device taints: with ``device_taints`` an unhealthy GPU or MIG device stays in the slice
with a taint whose effect follows NVIDIA's XID catalog (NoExecute where the fault needs the pods off),
and loses it when the repair loop gives the GPU back; a server that drops taints gets withdrawals."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from dra.conftest import NODE, DriverFactory
from dra.fakeclock import QUIET, Clock

from gpuchain.dra.driver import DraDriver
from gpuchain.dra.errors import PrepareError
from gpuchain.dra.kinds import RESOURCE_SLICE
from gpuchain.dra.slices import slice_name
from gpuchain.dra.taints import NO_EXECUTE, NO_SCHEDULE, TAINT_KEY, health_taint
from gpuchain.gpu.health import HealthState
from gpuchain.gpu.model import EventKind, HealthEvent
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.xid import Resolution, xid_table
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kube.objects import Obj
from gpuchain.kube.port import ApplyResult


def xid(uuid: str, code: int, mig: str | None = None) -> HealthEvent:
    return HealthEvent(kind=EventKind.XID, gpu_uuid=uuid, xid=code, mig_uuid=mig, message="test")


def test_the_effect_follows_the_catalogs_resolution() -> None:
    table = xid_table()
    assert table.needs(48) is not Resolution.NONE and table.needs(44) is Resolution.NONE
    health = HealthState()
    health.apply(xid("GPU-a", 48), 0.0)
    health.apply(xid("GPU-b", 44), 0.0)
    health.apply(xid("GPU-c", 44, mig="MIG-c1"), 0.0)
    assert health_taint(health, gpu_uuid="GPU-a") == {"key": TAINT_KEY, "value": "xid-48", "effect": NO_EXECUTE}
    assert health_taint(health, gpu_uuid="GPU-b") == {"key": TAINT_KEY, "value": "xid-44", "effect": NO_SCHEDULE}
    assert health_taint(health, gpu_uuid="GPU-c", mig_uuid="MIG-c1") == {
        "key": TAINT_KEY,
        "value": "xid-44",
        "effect": NO_SCHEDULE,
    }
    assert (
        health_taint(health, gpu_uuid="GPU-c", mig_uuid="MIG-c2") is None
        and health_taint(health, gpu_uuid="GPU-c") is None
    )
    health.apply(HealthEvent(kind=EventKind.GPU_LOST, gpu_uuid="GPU-d"), 0.0)
    assert health_taint(health, gpu_uuid="GPU-d") == {"key": TAINT_KEY, "value": "gpu-lost", "effect": NO_EXECUTE}
    health.fail_all(["GPU-e"])  # the event stream broke: nothing known against the GPU
    assert health_taint(health, gpu_uuid="GPU-e") == {
        "key": TAINT_KEY,
        "value": "no-health-events",
        "effect": NO_SCHEDULE,
    }
    assert health_taint(health, gpu_uuid="GPU-a")["value"] == "xid-48"  # type: ignore[index]  # the real fault stays named
    health.quarantine(frozenset({"GPU-f"}), 0.0)
    assert health_taint(health, gpu_uuid="GPU-f") == {"key": TAINT_KEY, "value": "quarantined", "effect": NO_EXECUTE}


@pytest.fixture
def tainting(make_driver: DriverFactory) -> Any:
    def build(sim: SimBackend) -> DraDriver:
        driver = make_driver(sim)
        driver.config = replace(driver.config, device_taints=True)
        driver.taints_served = True
        return driver

    return build


def devices(cluster: MemoryCluster, node: str = NODE) -> dict[str, Obj]:
    return {d["name"]: d for d in cluster.get(RESOURCE_SLICE, name=slice_name(node))["spec"]["devices"]}


def test_an_unhealthy_gpu_stays_published_tainted_and_is_not_prepared(
    h100_sim: SimBackend, tainting: Any, cluster: MemoryCluster, allocate: Any
) -> None:
    driver = tainting(h100_sim)
    before = driver.publish()
    published = driver.on_event(h100_sim.inject_xid(3, xid=48, message="double-bit ECC"))
    assert published is not None and published.devices == before.devices  # still 8 devices
    assert published.generation == before.generation + 1
    live = devices(cluster)
    assert live["gpu-3"]["taints"] == [{"key": TAINT_KEY, "value": "xid-48", "effect": NO_EXECUTE}]
    assert all(d["taints"] == [] for name, d in live.items() if name != "gpu-3")
    assert driver.publish().changed is False  # steady: no new generation
    with pytest.raises(PrepareError, match="unhealthy"):
        driver.prepare(allocate("late", NODE, ["gpu-3"]))


def test_the_repair_loop_taints_a_gpu_and_its_mig_devices_and_readmission_lifts_it(
    mig_sim: SimBackend, tainting: Any, cluster: MemoryCluster, clock: Clock
) -> None:
    driver, node = tainting(mig_sim), mig_sim.topology.node
    driver.publish()
    gpu = mig_sim.inventory().gpu(0)
    driver.on_event(mig_sim.inject_xid(0, xid=79, message="fell off the bus"))
    assert driver.set_quarantined(frozenset({gpu.uuid})) is not None
    tainted = {n for n, d in devices(cluster, node).items() if d["taints"]}
    assert tainted == {n for n in devices(cluster, node) if n.startswith("gpu-0-")} and len(tainted) == len(
        gpu.mig_devices
    )
    assert {d["taints"][0]["value"] for n, d in devices(cluster, node).items() if n in tainted} == {"quarantined"}
    driver.set_quarantined(frozenset())  # given back: reset and burned in; the XID clears after the quiet period
    clock.advance(QUIET + 1)
    driver.finish_recoveries()
    assert not any(d["taints"] for d in devices(cluster, node).values())


class DroppingTaints(MemoryCluster):
    """An API server without the DRADeviceTaints gate: it drops Device.taints on write."""

    def apply(self, obj: Obj, live: Obj | None = None, known_live: bool = False) -> ApplyResult:
        if obj.get("kind") == "ResourceSlice":
            obj = {**obj, "spec": {**obj["spec"], "devices": [
                {k: v for k, v in d.items() if k != "taints"} for d in obj["spec"]["devices"]
            ]}}  # fmt: skip
        return super().apply(obj, live=live, known_live=known_live)


def test_a_server_that_drops_taints_gets_the_device_withdrawn(h100_sim: SimBackend, short_dir: Path) -> None:
    from gpuchain.dra.driver import DriverConfig
    from gpuchain.kube.allocator import DRA

    cluster = DroppingTaints()
    config = DriverConfig(
        node=NODE, cdi_dir=short_dir / "cdi", state_dir=short_dir / "state", unlabelled=DRA, device_taints=True
    )
    driver = DraDriver(h100_sim, cluster=cluster, config=config)
    driver.publish()
    published = driver.on_event(h100_sim.inject_xid(3, xid=48, message="double-bit ECC"))
    assert published is not None and "gpu-3" not in published.devices and len(published.devices) == 7
    assert driver.taints_served is False
    assert "gpu-3" not in devices(cluster)

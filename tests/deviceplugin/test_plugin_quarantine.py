"""The device plugin withholds the GPUs the repair loop quarantines, through the kubelet peer (gRPC):
a time-sliced GPU loses all its replicas, a GPU in MIG mode all its MIG devices; lifting the
quarantine gives them back. The quarantine list comes from the Node (QuarantineFollower)."""

from __future__ import annotations

import asyncio

from gpuchain.api.config.v1.config import Config, parse_config
from gpuchain.api.config.v1.health import Health
from gpuchain.deviceplugin.quarantine import QuarantineFollower
from gpuchain.gpu.quarantine import QUARANTINE_ANNOTATION
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.kinds import NODE
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kubelet.node import start_sim_node
from gpuchain.sim.remediation import node_object


async def test_replicas_of_a_quarantined_gpu_are_withheld_and_return() -> None:
    config = parse_config("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 4}]}}")
    sim = await start_sim_node(config=config)
    try:
        gpu = sim.backend.inventory().gpu(5).uuid
        assert sim.kubelet.allocatable()["nvidia.com/gpu"] == 32
        sim.plugin.set_quarantined(frozenset({gpu}))
        await sim.kubelet.wait_for(lambda: sim.kubelet.allocatable()["nvidia.com/gpu"] == 28)
        sim.plugin.set_quarantined(frozenset())
        await sim.kubelet.wait_for(lambda: sim.kubelet.allocatable()["nvidia.com/gpu"] == 32)
    finally:
        await sim.stop()


async def test_mig_devices_of_a_quarantined_gpu_follow_the_node_annotation() -> None:
    backend = SimBackend.from_preset("h100-80gb-x8-mig-mixed")
    sim = await start_sim_node(config=parse_config("flags: {migStrategy: mixed}"), backend=backend)
    name = backend.topology.node
    cluster = MemoryCluster([node_object(name)])
    follower = asyncio.create_task(
        QuarantineFollower(cluster, node_name=name, apply=sim.plugin.set_quarantined).follow()
    )
    try:
        gpu = next(g for g in backend.inventory().gpus if g.mig_enabled)
        assert gpu.mig_devices
        before = sum(sim.kubelet.allocatable().values())
        cluster.patch(NODE, name=name, patch={"metadata": {"annotations": {QUARANTINE_ANNOTATION: gpu.uuid}}})
        await sim.kubelet.wait_for(lambda: sum(sim.kubelet.allocatable().values()) == before - len(gpu.mig_devices))
        cluster.patch(NODE, name=name, patch={"metadata": {"annotations": {QUARANTINE_ANNOTATION: None}}})
        await sim.kubelet.wait_for(lambda: sum(sim.kubelet.allocatable().values()) == before)
    finally:
        follower.cancel()
        await sim.stop()


async def test_a_gpu_the_loop_gives_back_is_healthy_again_although_this_process_saw_its_xid() -> None:
    """Only gpu-health, which reset the GPU, sees the driver's recovery; the plugin saw the XID in
    its own process. The loop gives the GPU back only after the reset and burn-in, so that clears
    the XID after the quiet period; a GPU the loop never held stays withheld for its XID."""
    sim = await start_sim_node(config=Config(health=Health(recovery_quiet_seconds=0.1)))
    try:
        repaired, other = (sim.backend.inventory().gpu(i).uuid for i in (5, 6))
        sim.backend.inject_xid(5, xid=48, message="double-bit ECC error")
        sim.backend.inject_xid(6, xid=48, message="double-bit ECC error")
        await sim.kubelet.wait_for(lambda: sim.kubelet.allocatable()["nvidia.com/gpu"] == 6)
        sim.plugin.set_quarantined(frozenset({repaired}))
        sim.plugin.set_quarantined(frozenset())  # the loop gives it back: reset and burned in
        await sim.kubelet.wait_for(lambda: sim.kubelet.allocatable()["nvidia.com/gpu"] == 7)
        await asyncio.sleep(0.3)
        assert sim.kubelet.allocatable()["nvidia.com/gpu"] == 7  # the other one's XID stands
        assert other in sim.plugin.health.unhealthy() and repaired not in sim.plugin.health.unhealthy()
    finally:
        await sim.stop()

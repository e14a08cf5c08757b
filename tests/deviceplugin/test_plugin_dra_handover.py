"""The device plugin announces none of a node's GPUs while its Node gives them to the DRA driver
(``gpuchain.io/gpu.allocator=dra``, ``kube.allocator``), followed through the plugin's Node watch, and
announces them again when the label gives them back; seen through the kubelet peer (gRPC). It keeps
its endpoints with empty lists, so the kubelet's capacity (what the DRA driver waits on) is 0 at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gpuchain.agent.roles.device_plugin import follow_allocator
from gpuchain.deviceplugin.nodeconfig import NodeLabelWatch
from gpuchain.deviceplugin.plugin import DevicePlugin
from gpuchain.deviceplugin.quarantine import ride
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube.allocator import ALLOCATOR_LABEL
from gpuchain.kube.kinds import NODE
from gpuchain.kube.memory import MemoryCluster
from gpuchain.kubelet.node import start_sim_node
from gpuchain.kubelet.peer import KubeletPeer
from gpuchain.sim.remediation import node_object


async def test_the_label_takes_the_gpus_off_the_kubelet_and_gives_them_back() -> None:
    sim = await start_sim_node()
    name = sim.backend.topology.node
    cluster = MemoryCluster([node_object(name)])
    watch = NodeLabelWatch(cluster, node_name=name, retry_seconds=0.05)
    _, version = watch.read()
    follow_allocator(sim.plugin, watch)
    following = asyncio.create_task(ride(watch, label=None, resource_version=version))
    try:
        assert sim.kubelet.allocatable()["nvidia.com/gpu"] == 8
        cluster.patch(NODE, name=name, patch={"metadata": {"labels": {ALLOCATOR_LABEL: "dra"}}})
        # capacity 0 from a registered endpoint, not a vanished one (whose capacity the kubelet keeps)
        await sim.kubelet.wait_for(lambda: sim.kubelet.capacity().get("nvidia.com/gpu") == 0)
        assert sim.plugin.handed_to_dra and [len(r.devices) for r in sim.plugin.resources] == [0]
        cluster.patch(NODE, name=name, patch={"metadata": {"labels": {ALLOCATOR_LABEL: "device-plugin"}}})
        await sim.kubelet.wait_for(lambda: sim.kubelet.allocatable().get("nvidia.com/gpu", 0) == 8)
    finally:
        following.cancel()
        await sim.stop()


async def test_a_node_already_handed_over_is_never_announced(short_dir: Path) -> None:
    """Decided from the Node read before the plugin starts: the kubelet never sees a device."""
    cluster = MemoryCluster([node_object("dra-node")])
    cluster.patch(NODE, name="dra-node", patch={"metadata": {"labels": {ALLOCATOR_LABEL: "dra"}}})
    watch = NodeLabelWatch(cluster, node_name="dra-node")
    watch.read()
    base = short_dir
    kubelet = KubeletPeer(base / "dp", pod_resources_socket=base / "pr" / "kubelet.sock")
    plugin = DevicePlugin(
        SimBackend.from_preset("h100-80gb-x8"), config=None, socket_dir=base / "dp", env={}, watch_interval=0.05
    )
    follow_allocator(plugin, watch)
    await kubelet.start()
    try:
        await plugin.start()
        await kubelet.wait_for(lambda: kubelet.capacity() == {"nvidia.com/gpu": 0})
        assert [(r.resource, r.devices) for r in plugin.registrations] == [("nvidia.com/gpu", 0)]
    finally:
        await plugin.stop()
        await kubelet.stop()

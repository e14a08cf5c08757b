"""The issue's done-when on the real next link: the device plugin (gRPC over unix sockets) and
the kubelet peer announce the layout the agent applied once the plugin comes back."""

from __future__ import annotations

from typing import Any

from gpuchain.api.config.v1.config import parse_config
from gpuchain.common.labels import MIG_CONFIG, MIG_CONFIG_STATE, PAUSED_FOR_MIG_CHANGE
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import NODE, POD, MemoryCluster
from gpuchain.kubelet.node import SimNode, start_sim_node
from gpuchain.mig.agent import Policy
from gpuchain.mig.config import default_config
from gpuchain.mig.manager import MigManager

NODE_NAME = "gpu-node-1"
DEVICE_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"


PLUGIN_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "nvidia-device-plugin-daemonset-x1", "namespace": "gpu-operator"},
    "spec": {"nodeName": NODE_NAME, "nodeSelector": {DEVICE_PLUGIN: "true"}, "containers": [{"name": "p"}]},
    "status": {"phase": "Running"},
}


def _labels(cluster: MemoryCluster) -> dict[str, Any]:
    return dict(cluster.get(NODE, name=NODE_NAME)["metadata"]["labels"])


async def _change(cluster: MemoryCluster, manager: MigManager, node: SimNode, layout: str) -> None:
    """Relabel; the plugin stops while paused (its DaemonSet leaves the node) and restarts after."""
    cluster.patch(NODE, name=NODE_NAME, patch={"metadata": {"labels": {MIG_CONFIG: layout}}})
    manager.reconcile()
    assert _labels(cluster)[DEVICE_PLUGIN] == PAUSED_FOR_MIG_CHANGE
    await node.plugin.stop()
    cluster.delete(POD, name=PLUGIN_POD["metadata"]["name"], namespace="gpu-operator")
    manager.reconcile()
    assert _labels(cluster)[MIG_CONFIG_STATE] == "success" and _labels(cluster)[DEVICE_PLUGIN] == "true"
    cluster.create(PLUGIN_POD)
    await node.restart_plugin()


async def test_56_mig_devices_reach_the_kubelet_and_8_gpus_come_back() -> None:
    sim = SimBackend.from_preset("h100-80gb-x8")
    node_obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE_NAME, "labels": {DEVICE_PLUGIN: "true"}}}
    cluster = MemoryCluster([node_obj, PLUGIN_POD])
    manager = MigManager(cluster, backend=sim, node=NODE_NAME, config=default_config(), policy=Policy(timeout_s=60))
    node = await start_sim_node(backend=sim, config=parse_config("version: v1\nflags:\n  migStrategy: mixed\n"))
    kubelet = node.kubelet
    try:
        assert kubelet.allocatable() == {"nvidia.com/gpu": 8}

        await _change(cluster, manager, node, "all-1g.10gb")
        await kubelet.wait_for(lambda: kubelet.allocatable().get("nvidia.com/mig-1g.10gb") == 56)
        assert kubelet.allocatable() == {"nvidia.com/gpu": 0, "nvidia.com/mig-1g.10gb": 56}
        (mig,) = [r for r in node.plugin.resources if r.name == "nvidia.com/mig-1g.10gb"]
        parents = {d.gpu_uuid for d in mig.devices}
        assert len(parents) == 8

        await _change(cluster, manager, node, "all-disabled")
        await kubelet.wait_for(lambda: kubelet.allocatable().get("nvidia.com/gpu") == 8)
        assert kubelet.allocatable() == {"nvidia.com/gpu": 8, "nvidia.com/mig-1g.10gb": 0}
    finally:
        await node.stop()

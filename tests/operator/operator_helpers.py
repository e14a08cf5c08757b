"""A simulated GPU cluster for operator tests: nodes, one ClusterPolicy, the operand simulator."""

from __future__ import annotations

from typing import Any

from fakes.cluster_policy import cluster_policy
from fakes.operand_simulator import OperandSimulator

from gpuchain.kube import MemoryCluster
from gpuchain.operator.reconcile import ReconcileResult, reconcile

NS = "gpu-operator"
NFD = "feature.node.kubernetes.io/pci-10de.present"
#: One DaemonSet per operand (NVIDIA's layout), for the tests of each operand's own DaemonSet and of
#: the on-node ordering between them that `OperandSimulator` plays; the default is the node agent.
PER_OPERAND: dict[str, Any] = {"nodeAgent": {"enabled": False}}


def node(name: str, gpu: bool = True, **labels: str) -> dict[str, Any]:
    base = {"kubernetes.io/hostname": name, "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel"}
    if gpu:
        base[NFD] = "true"
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {**base, **labels}}}


def make_cluster(gpu_nodes: int = 3, cpu_nodes: int = 1, spec: dict[str, Any] | None = None) -> MemoryCluster:
    """GPU and CPU nodes and a ClusterPolicy of ``spec``, in the per-operand layout unless it says otherwise."""
    spec = {**PER_OPERAND, **(spec or {})}
    objs = [node(f"gpu-{i}") for i in range(gpu_nodes)] + [node(f"cpu-{i}", gpu=False) for i in range(cpu_nodes)]
    return MemoryCluster([*objs, cluster_policy("cluster-policy", spec)])


def converge(cluster: MemoryCluster, sim: OperandSimulator, rounds: int = 6) -> ReconcileResult:
    """Alternate operator passes and cluster reaction until both are quiet."""
    result = reconcile(cluster, name="cluster-policy", namespace=NS)
    for _ in range(rounds):
        busy = sim.settle()
        result = reconcile(cluster, name="cluster-policy", namespace=NS)
        if not busy and not result.changed:
            break
    return result

"""The agent beside gpuchain's operator: its operand pods (scheduled by node affinity on the
deploy labels) leave when paused and come back when restored, on a simulated cluster."""

from __future__ import annotations

from fakes.cluster_policy import cluster_policy
from fakes.operand_simulator import OperandSimulator

from gpuchain.common.labels import MIG_CONFIG, MIG_CONFIG_STATE, PAUSED_FOR_MIG_CHANGE
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import NODE, POD, MemoryCluster
from gpuchain.mig.agent import Phase, Policy
from gpuchain.mig.config import default_config
from gpuchain.mig.manager import MigManager, classify_pods
from gpuchain.operator.reconcile import reconcile

NS = "gpu-operator"
NODE_NAME = "gpu-0"
OPERAND_LABELS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm")


def _operand_pods(cluster: MemoryCluster) -> set[str]:
    pods = cluster.list(POD, namespace=NS, field_selector=f"spec.nodeName={NODE_NAME}")
    return {p.name for p in classify_pods(pods, OPERAND_LABELS)[0]}


def test_operands_stop_for_the_change_and_come_back() -> None:
    labels = {"feature.node.kubernetes.io/pci-10de.present": "true", "kubernetes.io/hostname": NODE_NAME}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE_NAME, "labels": labels}}
    # NVIDIA's layout: pausing a deploy label takes that operand's own DaemonSet's pod off the node.
    cluster = MemoryCluster([node, cluster_policy("cluster-policy", {"nodeAgent": {"enabled": False}})])
    operands = OperandSimulator(cluster, NS)
    reconcile(cluster, name="cluster-policy", namespace=NS)
    operands.settle()
    before = _operand_pods(cluster)
    assert before, "the operator runs GPU operands on the node"

    gpus = SimBackend.from_preset("h100-80gb-x8")
    manager = MigManager(cluster, backend=gpus, node=NODE_NAME, config=default_config(), policy=Policy(timeout_s=60))
    cluster.patch(NODE, name=NODE_NAME, patch={"metadata": {"labels": {MIG_CONFIG: "all-1g.10gb"}}})
    manager.reconcile()
    paused = {
        k for k, v in cluster.get(NODE, name=NODE_NAME)["metadata"]["labels"].items() if v == PAUSED_FOR_MIG_CHANGE
    }
    assert paused and manager.machine.phase is Phase.OPERANDS
    operands.settle()  # the DaemonSet controller removes pods from the paused node
    assert _operand_pods(cluster) == set()
    manager.reconcile()
    node_labels = cluster.get(NODE, name=NODE_NAME)["metadata"]["labels"]
    assert node_labels[MIG_CONFIG_STATE] == "success" and PAUSED_FOR_MIG_CHANGE not in node_labels.values()
    assert len(gpus.inventory().mig_devices) == 56
    operands.settle()
    assert _operand_pods(cluster) == before


def _agent_pods(cluster: MemoryCluster) -> set[str]:
    return {
        p["metadata"]["name"]
        for p in cluster.list(POD, namespace=NS)
        if p["metadata"]["labels"].get("app") == "gpuchain-node-agent"
    }


def test_in_the_node_agent_layout_a_change_does_not_wait_for_the_agent_itself() -> None:
    """The MIG manager is a role of the node agent: its pod is scheduled by the agent's own deploy
    label, which the manager does not pause, so the change goes through without waiting for it
    (nor for the device plugin, which serves from the same process and is not taken off the node)."""
    labels = {"feature.node.kubernetes.io/pci-10de.present": "true", "kubernetes.io/hostname": NODE_NAME}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE_NAME, "labels": labels}}
    cluster = MemoryCluster([node, cluster_policy("cluster-policy", None)])
    operands = OperandSimulator(cluster, NS)
    reconcile(cluster, name="cluster-policy", namespace=NS)
    operands.settle()
    agent = _agent_pods(cluster)
    assert agent and _operand_pods(cluster) == set(), "the agent's pod is none of the paused operands'"
    gpus = SimBackend.from_preset("h100-80gb-x8")
    manager = MigManager(cluster, backend=gpus, node=NODE_NAME, config=default_config(), policy=Policy(timeout_s=60))
    cluster.patch(NODE, name=NODE_NAME, patch={"metadata": {"labels": {MIG_CONFIG: "all-1g.10gb"}}})
    manager.reconcile()
    operands.settle()
    manager.reconcile()
    assert cluster.get(NODE, name=NODE_NAME)["metadata"]["labels"][MIG_CONFIG_STATE] == "success"
    assert len(gpus.inventory().mig_devices) == 56
    operands.settle()
    assert _agent_pods(cluster) == agent, "the agent's pod ran through the change"

"""The operator in the node agent layout (the default) on a simulated cluster: status stays per
operand, each read from the one DaemonSet that serves it; a role switched off is reported
disabled and leaves the agent's command line; the layout switch moves between one DaemonSet and
one per operand, leaving nothing of the other behind."""

from __future__ import annotations

from typing import Any

from fakes.operand_simulator import OperandSimulator
from operator_helpers import NS, PER_OPERAND, converge, make_cluster

from gpuchain.kube import CLUSTER_POLICY, DAEMONSET, SERVICE, MemoryCluster
from gpuchain.operator.operands import AGENT_ROLES, DRIVER, NODE_AGENT, OPERANDS, TOOLKIT
from gpuchain.operator.reconcile import reconcile

AGENT = {"nodeAgent": {"enabled": True}}


def _daemonsets(cluster: MemoryCluster) -> set[str]:
    return {d["metadata"]["name"] for d in cluster.list(DAEMONSET, namespace=NS)}


def _status(cluster: MemoryCluster) -> dict[str, Any]:
    status: dict[str, Any] = cluster.get(CLUSTER_POLICY, name="cluster-policy")["status"]
    return status


def _roles(cluster: MemoryCluster) -> list[str]:
    args = cluster.get(DAEMONSET, name=NODE_AGENT.name, namespace=NS)["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    roles: list[str] = args[args.index("--roles") + 1].split(",")
    return roles


def test_the_roll_out_reports_each_operand_from_the_node_agent() -> None:
    cluster = make_cluster(gpu_nodes=3, spec=AGENT)
    sim = OperandSimulator(cluster, NS)
    assert converge(cluster, sim).state == "ready"
    assert _daemonsets(cluster) == {DRIVER.name, TOOLKIT.name, NODE_AGENT.name}
    operands = _status(cluster)["operands"]
    assert {state: o["state"] for state, o in operands.items()} == {op.state: "ready" for op in OPERANDS}
    assert {operands[op.state]["ready"] for op in AGENT_ROLES} == {"3/3"}
    # its init containers validated the driver, toolkit and CUDA links on every node before the roles started
    gpu_nodes = {node: files for node, files in sim.files.items() if node.startswith("gpu-")}
    assert len(gpu_nodes) == 3 and all({"driver", "toolkit", "cuda"} <= f for f in gpu_nodes.values())


def test_a_crashing_node_agent_is_every_served_operands_problem_and_not_the_drivers() -> None:
    cluster = make_cluster(gpu_nodes=2, spec=AGENT)
    sim = OperandSimulator(cluster, NS, crashloop={"gpu-1": {NODE_AGENT.name}})
    assert converge(cluster, sim).state == "notReady"
    operands = _status(cluster)["operands"]
    assert operands[DRIVER.state]["state"] == operands[TOOLKIT.state]["state"] == "ready"
    for op in AGENT_ROLES:
        assert operands[op.state]["state"] == "notReady", op.state
        assert operands[op.state]["ready"] == "1/2", op.state


def test_switching_a_role_off_reports_it_disabled_and_takes_it_off_the_command_line() -> None:
    cluster = make_cluster(gpu_nodes=1, spec=AGENT)
    sim = OperandSimulator(cluster, NS)
    converge(cluster, sim)
    assert "exporter" in _roles(cluster) and cluster.list(SERVICE, namespace=NS)
    cluster.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"dcgmExporter": {"enabled": False}}})
    assert converge(cluster, sim).state == "ready"
    assert _roles(cluster) == ["validator", "device-plugin", "gfd", "mig-manager"]
    assert _status(cluster)["operands"]["dcgm-exporter"]["state"] == "disabled"
    assert cluster.list(SERVICE, namespace=NS) == [], "the exporter's Service goes with its role"


def test_the_layout_switch_replaces_one_layout_by_the_other() -> None:
    cluster = make_cluster(gpu_nodes=1)  # per operand
    sim = OperandSimulator(cluster, NS)
    converge(cluster, sim)
    assert _daemonsets(cluster) == {op.name for op in OPERANDS}
    cluster.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": AGENT})
    result = reconcile(cluster, name="cluster-policy", namespace=NS)
    assert {f"daemonset/{op.name} (deleted)" for op in AGENT_ROLES} <= set(result.changed)
    assert _daemonsets(cluster) == {DRIVER.name, TOOLKIT.name, NODE_AGENT.name}
    assert converge(cluster, sim).state == "ready"
    cluster.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": PER_OPERAND})
    assert f"daemonset/{NODE_AGENT.name} (deleted)" in reconcile(cluster, name="cluster-policy", namespace=NS).changed
    assert converge(cluster, sim).state == "ready"
    assert _daemonsets(cluster) == {op.name for op in OPERANDS}

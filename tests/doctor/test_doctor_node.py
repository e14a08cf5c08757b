"""The node under the chain, on hand-made node status in the shapes the kubelet writes
(kubernetes/kubernetes pkg/kubelet/nodestatus/setters.go; TaintNodesByCondition taint keys)."""

from __future__ import annotations

from gpuchain.doctor import run_doctor
from gpuchain.doctor.model import FixOp, LinkState
from gpuchain.doctor.node import blocking_conditions, distribution_of
from gpuchain.kube import NODE, MemoryCluster
from gpuchain.sim import build, load_scenario


def _set(sim_cluster: MemoryCluster, node: str, conditions: list[dict[str, str]], taints: list[dict[str, str]]) -> None:
    sim_cluster.patch_status(NODE, name=node, status={"conditions": conditions})
    sim_cluster.patch(NODE, name=node, patch={"spec": {"taints": taints}})


def test_memory_and_pid_pressure_are_named_with_their_taints_and_the_chain_is_still_walked() -> None:
    sim = build(load_scenario("healthy-gpu-operator"))
    conditions = [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"},
        {
            "type": "MemoryPressure",
            "status": "True",
            "reason": "KubeletHasInsufficientMemory",
            "message": "kubelet has insufficient memory available",
        },
        {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID", "message": ""},
    ]
    _set(sim.cluster, "gpu-1", conditions, [{"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}])
    report = run_doctor(sim.cluster, reader=sim.read_log)
    found = [f for f in report.findings if f.id == "node.pressure"]
    assert [f.node for f in found] == ["gpu-1"] and found[0].root
    assert found[0].evidence == (
        "condition MemoryPressure=True (KubeletHasInsufficientMemory): kubelet has insufficient memory available",
        "taint node.kubernetes.io/memory-pressure",
    )
    assert found[0].action is not None and found[0].action.op is FixOp.NODE and "memory" in found[0].fix
    chain = next(c for c in report.chains if c.node == "gpu-1")
    assert chain.state("device-plugin") is LinkState.OK  # the chain itself works; new pods cannot land


def test_a_kubelet_that_reports_not_ready_stops_the_walk() -> None:
    sim = build(load_scenario("healthy"))
    ready = {
        "type": "Ready",
        "status": "False",
        "reason": "KubeletNotReady",
        "message": "PLEG is not healthy: pleg was last seen active 3m20.2s ago; threshold is 3m0s",
    }
    _set(sim.cluster, "gpu-2", [ready], [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    report = run_doctor(sim.cluster, reader=sim.read_log)
    root = next(f for f in report.findings if f.node == "gpu-2" and f.root)
    assert root.id == "node.not-ready" and "PLEG is not healthy" in root.evidence[0]
    assert root.evidence[1] == "taint node.kubernetes.io/not-ready"
    chain = next(c for c in report.chains if c.node == "gpu-2")
    assert all(lk.state is LinkState.NOT_REACHED for lk in chain.links)
    assert {f.node for f in report.findings if f.root} == {"gpu-2"}


def test_conditions_that_hold_nothing_back_are_not_findings() -> None:
    node = {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "DiskPressure", "status": "False"},
                {"type": "NetworkUnavailable", "status": "False", "reason": "CalicoIsUp"},
            ]
        }
    }
    assert blocking_conditions(node) == []


def test_the_distribution_is_read_from_the_kubelet_version() -> None:
    def node(version: str) -> dict[str, object]:
        return {"status": {"nodeInfo": {"kubeletVersion": version}}}

    assert distribution_of(node("v1.30.4+k3s1")).name == "k3s"
    assert distribution_of(node("v1.29.9+rke2r1")).containerd_socket == "/run/k3s/containerd/containerd.sock"
    assert distribution_of(node("v1.31.2")).containerd_socket == "/run/containerd/containerd.sock"

"""A plain ``kubectl cluster-info dump`` of a GPU Operator that deploys no operand at all: the dump has no
ClusterPolicy to say which operands are enabled, but an operator that created none of its DaemonSets while its log
names the step it fails at has stopped its whole reconcile there (NVIDIA/gpu-operator
controllers/clusterpolicy_controller.go@v1.11.1 Reconcile returns the failing ``step()``'s error and requeues), so
the missing operands are its doing whatever the policy enables. So are they where its log names no known reason but
the GPU nodes announce no GPU: nothing else would announce them, whatever words its log holds. Where the nodes still
announce their GPUs (something else serves them), the links stay not judged.

The operator and its log are test_doctor_removed_api's (controller-runtime's "Reconciler error" with apimachinery's
"no matches for kind"; PodSecurityPolicy policy/v1beta1 is gone from Kubernetes 1.25).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from doctor.small_cluster import built
from doctor.test_doctor_removed_api import NS, THREE_GPU_NODES, _no_match, _operator, _reconcile_error
from sim.heldout import harness

from gpuchain.doctor import LinkState, Severity
from gpuchain.doctor.context import NO_POLICY
from gpuchain.doctor.diagnose import diagnose
from gpuchain.doctor.dump import read_dump, write_dump
from gpuchain.doctor.model import Report
from gpuchain.kube import DAEMONSET, POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim.build import SimCluster

GPU_NODES = ("a100-a", "a100-b", "a100-c")
#: The node's GPUs no longer announced: no device plugin runs to register them.
GONE = {"nvidia.com/gpu": None}
PSP_GONE = _reconcile_error(_no_match("PodSecurityPolicy", "policy/v1beta1"))
#: A reconcile that names no failing step (controller-runtime's info line of a ClusterPolicy reconcile).
NO_REASON = '{"level":"info","ts":1664000001.1,"logger":"controllers.ClusterPolicy","msg":"Reconciling ClusterPolicy"}'


def _no_operand_pods(sim: SimCluster) -> None:
    """Every operand DaemonSet of the operator's namespace gone with its pods."""
    for ds in [d for d in sim.cluster.list(DAEMONSET) if namespace_of(d) == NS]:
        for pod in [p for p in sim.cluster.list(POD) if name_of(p).startswith(f"{name_of(ds)}-")]:
            sim.cluster.delete(POD, name=name_of(pod), namespace=NS)
        sim.cluster.delete(DAEMONSET, name=name_of(ds), namespace=NS)


def _no_operands(sim: SimCluster) -> None:
    """Every operand gone (`_no_operand_pods`), and the GPUs no longer announced."""
    _no_operand_pods(sim)
    for node in GPU_NODES:
        harness._apply(sim.cluster, {"do": "node", "node": node, "capacity": GONE, "allocatable": GONE})


def _from_kubectl_dump(sim: SimCluster, where: Path) -> Report:
    write_dump(sim.cluster, where, extras=False)
    return diagnose(read_dump(where))


def _roots(report: Report) -> list[Any]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def test_an_operator_halted_on_an_api_the_cluster_no_longer_serves_is_named_from_a_kubectl_dump(
    tmp_path: Path,
) -> None:
    sim = built(THREE_GPU_NODES, _operator("v1.10.1", PSP_GONE, kubelet="v1.26.3"), _no_operands)
    roots = _roots(_from_kubectl_dump(sim, tmp_path))
    assert {f.node for f in roots} == set(GPU_NODES)
    assert {(f.id, f.link) for f in roots} == {("operand.not-deployed", "driver")}
    assert "PodSecurityPolicy" in roots[0].cause and "psp.enabled=false" in roots[0].fix
    assert any(e.startswith("operator log") for e in roots[0].evidence)


def test_an_operator_that_deployed_nothing_while_its_gpu_nodes_announce_none_is_the_root_whatever_it_logs(
    tmp_path: Path,
) -> None:
    sim = built(THREE_GPU_NODES, _operator("v1.10.1", NO_REASON, kubelet="v1.26.3"), _no_operands)
    roots = _roots(_from_kubectl_dump(sim, tmp_path))
    assert {f.node for f in roots} == set(GPU_NODES)
    assert {(f.id, f.link) for f in roots} == {("operand.not-deployed", "driver")}
    assert "nor does any other operand DaemonSet" in roots[0].cause and NO_POLICY in roots[0].cause
    assert "although the policy enables it" not in roots[0].cause
    assert roots[0].fix.startswith(f"kubectl -n {NS} delete pod gpu-operator-")


def test_an_operator_that_deployed_nothing_while_the_nodes_announce_their_gpus_leaves_the_links_not_judged(
    tmp_path: Path,
) -> None:
    sim = built(THREE_GPU_NODES, _operator("v1.10.1", NO_REASON, kubelet="v1.26.3"), _no_operand_pods)
    report = _from_kubectl_dump(sim, tmp_path)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]
    states = {link.name: link.state for chain in report.chains for link in chain.links if chain.node == "a100-a"}
    assert states["toolkit"] is LinkState.NOT_JUDGED and states["device-plugin"] is LinkState.OK


def test_a_healthy_operator_in_a_kubectl_dump_has_no_error(tmp_path: Path) -> None:
    sim = built(THREE_GPU_NODES, _operator("v23.9.2", NO_REASON, kubelet="v1.28.9", stopped=False))
    assert not [f for f in _from_kubectl_dump(sim, tmp_path).findings if f.severity is Severity.ERROR]

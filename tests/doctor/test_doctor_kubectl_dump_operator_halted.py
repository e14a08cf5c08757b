"""A plain ``kubectl cluster-info dump`` of a GPU Operator that deploys no operand at all: the dump has no
ClusterPolicy to say which operands are enabled, but an operator that created none of its DaemonSets while its log
names the step it fails at has stopped its whole reconcile there (NVIDIA/gpu-operator
controllers/clusterpolicy_controller.go@v1.11.1 Reconcile returns the failing ``step()``'s error and requeues), so
the missing operands are its doing whatever the policy enables. Where its log names no known reason the link stays
not judged.

The operator's log lines are controller-runtime's zap JSON as its "Reconciler error" writes them; the API server's
"no matches for kind" is its answer for a group/version it no longer serves (PodSecurityPolicy policy/v1beta1 is gone
from Kubernetes 1.25, kubernetes/website deprecation-guide.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from doctor.small_cluster import built
from sim.heldout import harness

from gpuchain.doctor import LinkState, Severity
from gpuchain.doctor.diagnose import diagnose
from gpuchain.doctor.dump import read_dump, write_dump
from gpuchain.doctor.model import Report
from gpuchain.kube import DAEMONSET, POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim.build import SimCluster

NS = "gpu-operator"
OPERATOR = "gpu-operator-7d4f9c8b6-q2m7x"
#: The node's GPUs no longer announced: no device plugin runs to register them.
GONE = {"nvidia.com/gpu": None}
CLUSTER = (
    "name: t\nstack: gpu-operator\nnodes:\n  - {name: cpu, gpu: false}\n  - {name: a100-a, preset: a100-80gb-x8}\n"
    "  - {name: a100-b, preset: a100-80gb-x8}\n"
)
PSP_GONE = json.dumps(
    {
        "level": "error",
        "ts": 1765100000.4,
        "msg": "Reconciler error",
        "controller": "clusterpolicy-controller",
        "name": "cluster-policy",
        "namespace": "",
        "error": 'no matches for kind "PodSecurityPolicy" in version "policy/v1beta1"',
    },
    separators=(",", ":"),
)
STEP_DONE = json.dumps(
    {"level": "info", "ts": 1765100000.1, "logger": "controllers.ClusterPolicy", "msg": "Reconciling ClusterPolicy"},
    separators=(",", ":"),
)


def _operator(log: str) -> object:
    """An edit: NVIDIA's operator Deployment pod running ready on the CPU node, its log ``log``."""

    def edit(sim: SimCluster) -> None:
        image = "nvcr.io/nvidia/gpu-operator:v1.10.1"
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": OPERATOR, "namespace": NS, "labels": {"app": "gpu-operator"}},
                "spec": {"nodeName": "cpu", "containers": [{"name": "gpu-operator", "image": image}]},
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "containerStatuses": [
                        {
                            "name": "gpu-operator",
                            "ready": True,
                            "restartCount": 0,
                            "image": image,
                            "state": {"running": {"startedAt": "2026-12-07T10:00:00Z"}},
                        }
                    ],
                },
            }
        )
        sim.cluster.set_logs(OPERATOR, namespace=NS, container="gpu-operator", text=log)

    return edit


def _no_operands(sim: SimCluster) -> None:
    """Every operand DaemonSet of the operator's namespace gone with its pods, and the GPUs no longer announced."""
    for ds in [d for d in sim.cluster.list(DAEMONSET) if namespace_of(d) == NS]:
        owned = [p for p in sim.cluster.list(POD) if namespace_of(p) == NS and name_of(p).startswith(name_of(ds))]
        for pod in owned:
            sim.cluster.delete(POD, name=name_of(pod), namespace=NS)
        sim.cluster.delete(DAEMONSET, name=name_of(ds), namespace=NS)
    for node in ("a100-a", "a100-b"):
        harness._apply(sim.cluster, {"do": "node", "node": node, "capacity": GONE, "allocatable": GONE})


def _from_kubectl_dump(sim: SimCluster, where: Path) -> Report:
    write_dump(sim.cluster, where, extras=False)
    return diagnose(read_dump(where))


def _roots(report: Report) -> list[object]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def test_an_operator_halted_on_an_api_the_cluster_no_longer_serves_is_named_from_a_kubectl_dump(
    tmp_path: Path,
) -> None:
    report = _from_kubectl_dump(built(CLUSTER, _no_operands, _operator(PSP_GONE)), tmp_path)
    roots = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert {f.node for f in roots} == {"a100-a", "a100-b"}
    assert {(f.id, f.link) for f in roots} == {("operand.not-deployed", "driver")}
    assert "PodSecurityPolicy" in roots[0].cause and "psp.enabled=false" in roots[0].fix
    assert any("no operand DaemonSet" in e for e in roots[0].evidence)


def test_an_operator_that_names_no_reason_leaves_the_missing_operands_not_judged(tmp_path: Path) -> None:
    report = _from_kubectl_dump(built(CLUSTER, _no_operands, _operator(STEP_DONE)), tmp_path)
    assert not _roots(report)
    states = {link.name: link.state for chain in report.chains for link in chain.links if chain.node == "a100-a"}
    assert states["device-plugin"] is LinkState.NOT_JUDGED


def test_a_healthy_operator_in_a_kubectl_dump_has_no_error(tmp_path: Path) -> None:
    report = _from_kubectl_dump(built(CLUSTER, _operator(STEP_DONE)), tmp_path)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]

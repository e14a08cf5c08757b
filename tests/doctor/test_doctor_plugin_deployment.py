"""NVIDIA's device plugin run by a Deployment (K2s' gpu-node addon before its move to a DaemonSet), ready on a node
that announces its GPUs: a plugin serves that node, so no GPU stack is missing there; a GPU node it does not serve
still misses one."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.kube import DAEMONSET, POD
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.sim.build import SimCluster


def _no_plugin_daemonset(sim: SimCluster) -> None:
    for kind in (POD, DAEMONSET):
        for obj in sim.cluster.list(kind):
            if "device-plugin" in name_of(obj):
                sim.cluster.delete(kind, name=name_of(obj), namespace=namespace_of(obj))


def _deployment_pod(node: str, ready: bool = True) -> Any:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"gpu-plugin-7c9d-{node}",
            "namespace": "accel",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "gpu-plugin-7c9d"}],
        },
        "spec": {"nodeName": node, "containers": [{"name": "p", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.2"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": str(ready)}],
            "containerStatuses": [{"name": "p", "ready": ready, "restartCount": 0, "state": {"running": {}}}],
        },
    }
    return lambda sim: sim.cluster.create(pod)


def _cluster(*nodes: str) -> str:
    rows = "".join(f"  - {{name: {n}, preset: t4-x4}}\n" for n in nodes)
    return f"name: t\nstack: none\nnodes:\n{rows}"


def _announced(node: str) -> dict[str, Any]:
    return {"do": "node", "node": node, "capacity": {"nvidia.com/gpu": "1"}, "allocatable": {"nvidia.com/gpu": "1"}}


def test_a_ready_plugin_of_a_deployment_serving_the_node_is_no_missing_stack() -> None:
    report = diagnosed(_cluster("w1"), _no_plugin_daemonset, _announced("w1"), _deployment_pod("w1"))
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_a_gpu_node_beside_it_without_one_still_misses_a_stack() -> None:
    report = diagnosed(_cluster("w1", "w2"), _no_plugin_daemonset, _announced("w1"), _deployment_pod("w1"))
    (missing,) = [f for f in report.findings if f.id == "stack.missing"]
    assert "w2" in " ".join(missing.evidence) and "w1" not in " ".join(missing.evidence)


def test_one_that_is_not_ready_serves_nothing() -> None:
    report = diagnosed(_cluster("w1"), _no_plugin_daemonset, _announced("w1"), _deployment_pod("w1", ready=False))
    assert [f.id for f in report.findings if f.severity is Severity.ERROR] == ["stack.missing"]

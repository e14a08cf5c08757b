"""An operator whose reconcile fails on an API version the cluster's Kubernetes no longer serves: the operand
DaemonSets it never made are named with the operator release that uses the served version (removed_apis.yaml),
not an operator restart.

The error is apimachinery's NoKindMatchError ("no matches for kind %q in version %q") as controller-runtime logs a
reconcile's error, in both of zap's encodings (JSON, and the console line of the 1.x operators); node versions as
the kubelet reports them (status.nodeInfo.kubeletVersion).
"""

from __future__ import annotations

import json
from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Report
from gpuchain.doctor.removed_apis import not_served, removed_apis
from gpuchain.kube import DAEMONSET, NODE, POD
from gpuchain.kube.kinds import Kind
from gpuchain.sim.build import SimCluster

NS = "nvidia-gpu"
NVIDIA_POLICY = Kind(api_version="nvidia.com/v1", kind="ClusterPolicy", plural="clusterpolicies", namespaced=False)
THREE_GPU_NODES = (
    f"name: t\nstack: gpu-operator\nnamespace: {NS}\nnodes:\n  - {{name: ctl, gpu: false}}\n"
    "  - {name: a100-a, preset: a100-40gb-x8}\n  - {name: a100-b, preset: a100-40gb-x8}\n"
    "  - {name: a100-c, preset: a100-40gb-x8}\n"
)
OPERANDS = ("nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset", "nvidia-device-plugin-daemonset")


def _reconcile_error(error: str) -> str:
    """controller-runtime's "Reconciler error" line in zap's JSON encoding."""
    line = {"level": "error", "ts": 1664000001.2, "logger": "controller.clusterpolicy-controller"}
    return json.dumps({**line, "msg": "Reconciler error", "name": "cluster-policy", "error": error})


def _no_match(kind: str, version: str) -> str:
    return f'no matches for kind "{kind}" in version "{version}"'


def _operator(tag: str, log: str, *, kubelet: str, helm: str = "", stopped: bool = True) -> Any:
    """An edit: the operator pod at ``tag`` logging ``log``, every node's kubelet at ``kubelet``; where it
    ``stopped``, its operand DaemonSets gone and the ClusterPolicy not ready (with the chart's Helm labels where
    ``helm`` names a release)."""

    def edit(sim: SimCluster) -> None:
        for name in OPERANDS if stopped else ():
            sim.cluster.delete(DAEMONSET, name=name, namespace=NS)
            for pod in sim.cluster.list(POD):
                if pod["metadata"]["name"].startswith(f"{name}-"):
                    sim.cluster.delete(POD, name=pod["metadata"]["name"], namespace=NS)
        operator = f"gpu-operator-7f9d8c6b5-{tag.replace('.', '')}"
        image = f"nvcr.io/nvidia/gpu-operator:{tag}"
        running = {"running": {"startedAt": "2026-12-06T12:00:00Z"}}
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": operator, "namespace": NS, "labels": {"app": "gpu-operator"}},
                "spec": {"nodeName": "ctl", "containers": [{"name": "gpu-operator", "image": image}]},
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "containerStatuses": [
                        {"name": "gpu-operator", "ready": True, "restartCount": 0, "image": image, "state": running}
                    ],
                },
            }
        )
        sim.cluster.set_logs(operator, namespace=NS, container="gpu-operator", text=log)
        for node in sim.cluster.list(NODE):
            info = {**node["status"].get("nodeInfo", {}), "kubeletVersion": kubelet}
            sim.cluster.patch_status(NODE, name=node["metadata"]["name"], status={"nodeInfo": info})
        if stopped:
            status = {"state": "notReady", "namespace": NS}
            sim.cluster.patch_status(NVIDIA_POLICY, name="cluster-policy", status=status)
        if helm:
            labels = {"helm.sh/chart": f"gpu-operator-{tag}", "app.kubernetes.io/instance": helm}
            sim.cluster.patch(NVIDIA_POLICY, name="cluster-policy", patch={"metadata": {"labels": labels}})

    return edit


def _roots(report: Report) -> list[Any]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def test_the_error_names_its_kind_and_version_in_either_encoding() -> None:
    assert not_served(_reconcile_error(_no_match("PodSecurityPolicy", "policy/v1beta1"))) == (
        "PodSecurityPolicy",
        "policy/v1beta1",
    )
    console = 'ERROR\tReconciler error\t{"error": "no matches for kind \\"RuntimeClass\\" in version \\"node.k8s.io/v1beta1\\""}'
    assert not_served(console) == ("RuntimeClass", "node.k8s.io/v1beta1")
    assert not_served("no matches for kind NodeFeature") is None
    assert all(r.fixed and r.removed and r.source for r in removed_apis())


def test_a_helm_installed_operator_stopped_on_the_removed_psp_api_gets_the_chart_release_and_the_psp_switch() -> None:
    log = _reconcile_error(_no_match("PodSecurityPolicy", "policy/v1beta1"))
    report = diagnosed(THREE_GPU_NODES, _operator("v1.10.1", log, kubelet="v1.26.3", helm="gpu-op"))
    roots = _roots(report)
    assert {f.node for f in roots} == {"a100-a", "a100-b", "a100-c"}
    root = roots[0]
    assert (root.id, root.link) == ("operand.not-deployed", "driver")
    assert f"helm upgrade gpu-op nvidia/gpu-operator -n {NS} --version v22.9.0 --reuse-values" in root.fix
    assert "psp.enabled=false" in root.fix and "delete pod" not in root.fix
    assert "status.nodeInfo.kubeletVersion: v1.26.3" in root.evidence
    assert any("catalog: gpu-operator.api-version-not-served" in e for e in root.evidence)


def test_an_operator_image_without_helm_labels_is_told_the_release_that_serves_the_runtimeclass() -> None:
    console = "1.66e+09\tERROR\tcontroller.clusterpolicy-controller\tReconciler error\t" + json.dumps(
        {"name": "cluster-policy", "error": _no_match("RuntimeClass", "node.k8s.io/v1beta1")}
    )
    report = diagnosed(THREE_GPU_NODES, _operator("v1.9.1", console, kubelet="v1.27.1"))
    root = next(f for f in _roots(report) if f.node == "a100-b")
    assert "upgrade the GPU Operator (v1.9.1) to v22.9.0 or later" in root.fix
    assert "RuntimeClass at node.k8s.io/v1;" in root.fix and "before 1.25" in root.fix


def test_a_release_that_already_uses_the_served_version_gets_no_release_pin() -> None:
    log = _reconcile_error(_no_match("RuntimeClass", "node.k8s.io/v1beta1"))
    report = diagnosed(THREE_GPU_NODES, _operator("v23.9.2", log, kubelet="v1.28.4"))
    root = next(f for f in _roots(report) if f.node == "a100-c")
    assert root.id == "operand.not-deployed" and "--version v22.9.0" not in root.fix
    assert "API version the cluster serves" in root.fix


def test_an_operator_that_reconciled_on_its_kubernetes_has_no_error() -> None:
    quiet = json.dumps({"level": "info", "ts": 1664000001.2, "msg": "Getting assets from: /opt/gpu-operator"})
    report = diagnosed(THREE_GPU_NODES, _operator("v1.11.1", quiet, kubelet="v1.24.6", stopped=False))
    assert not [f for f in report.findings if f.severity is Severity.ERROR]

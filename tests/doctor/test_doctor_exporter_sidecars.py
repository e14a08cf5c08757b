"""GPUs held by native sidecars on a node whose dcgm-exporter asks the kubelet's pod-resources v1alpha1 API.

dcgm-exporter releases before 4.2.3-4.1.3 list the pods that hold GPUs through pod-resources v1alpha1, which leaves out
restartable init containers (NVIDIA/dcgm-exporter#497, fixed by #498 in 4.2.3-4.1.3): the GPU's metrics lose their
pod labels while the exporter runs ready and logs nothing wrong. The repair is the release with the v1 client."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp, Report
from gpuchain.kube.kinds import NAMESPACE
from gpuchain.sim.build import SimCluster


def _scenario(exporter: str) -> str:
    return (
        "name: t\nstack: gpu-operator\n"
        f"policy: {{driver: {{version: 550.127.05}}, dcgmExporter: {{version: {exporter}}}}}\n"
        "nodes:\n"
        "  - {name: w1, preset: a100-80gb-x8}\n"
        "  - {name: w2, preset: a100-80gb-x8}\n"
        "  - {name: w3, preset: a100-80gb-x8}\n"
    )


def _pod(node: str, *, sidecar: bool, gpus: int = 2) -> Any:
    """A running pod on ``node`` whose GPUs a native sidecar (``sidecar``) or an ordinary container holds."""
    limits = {"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    worker = {"name": "trainer", "image": "registry.local/trainer:1", **limits}
    spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "proxy", "image": "registry.local/proxy:1"}]}
    if sidecar:
        spec["initContainers"] = [{**worker, "restartPolicy": "Always"}]
    else:
        spec["containers"].append(worker)
    running = {"ready": True, "restartCount": 0, "state": {"running": {"startedAt": "2026-03-01T10:00:00Z"}}}
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": c["name"], **running} for c in spec["containers"]],
    }
    if sidecar:
        status["initContainerStatuses"] = [{"name": "trainer", "started": True, **running}]

    def edit(sim: SimCluster) -> None:
        namespaces = {n["metadata"]["name"] for n in sim.cluster.list_readonly(NAMESPACE)}
        if "train" not in namespaces:
            sim.cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "train"}})
        meta = {"name": f"job-{node}", "namespace": "train", "labels": {"app": "job"}}
        sim.cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status})

    return edit


def _errors(report: Report) -> list[Any]:
    return [f for f in report.findings if f.severity is Severity.ERROR]


def test_a_native_sidecars_gpu_under_an_exporter_before_the_v1_client_gets_the_release_that_fixed_it() -> None:
    report = diagnosed(_scenario("3.3.9-3.6.1-ubuntu22.04"), _pod("w2", sidecar=True), _pod("w3", sidecar=False))
    (root,) = _errors(report)
    assert (root.id, root.link, root.node, root.root) == ("exporter.sidecar-unlabelled", "exporter", "w2", True)
    assert root.action is not None and root.action.op is FixOp.PATCH_POLICY
    assert root.action.changes == {"spec": {"dcgmExporter": {"version": "4.2.3-4.1.3-ubuntu22.04"}}}
    assert "train/job-w2 (trainer: nvidia.com/gpu)" in " ".join(root.evidence)
    assert "pod-resources v1" in root.fix and "ordinary container" in root.fix


def test_the_release_with_the_v1_client_labels_a_native_sidecars_gpu() -> None:
    fixed = diagnosed(_scenario("4.2.3-4.1.3-ubuntu22.04"), _pod("w2", sidecar=True))
    assert "exporter.sidecar-unlabelled" not in fixed.ids
    assert not _errors(fixed)


def test_gpus_of_ordinary_containers_are_labelled_by_any_release() -> None:
    report = diagnosed(_scenario("3.3.9-3.6.1-ubuntu22.04"), _pod("w1", sidecar=False), _pod("w2", sidecar=False))
    assert "exporter.sidecar-unlabelled" not in report.ids
    assert not _errors(report)


def test_a_native_sidecar_without_a_gpu_is_nothing_the_exporter_labels() -> None:
    report = diagnosed(_scenario("3.3.9-3.6.1-ubuntu22.04"), _pod("w1", sidecar=True, gpus=0))
    assert "exporter.sidecar-unlabelled" not in report.ids

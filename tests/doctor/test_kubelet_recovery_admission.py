"""GPU pods a kubelet started without the device plugin's allocation after a node reboot (kubelet_defects.yaml
kubelet.recovery-admits-before-registration): kubernetes/kubernetes#116376, in v1.28.0 (CHANGELOG/CHANGELOG-1.28.md,
v1.28.0-alpha.1) and cherry-picked to 1.27.2, 1.26.5 and 1.25.10, whose regression (kubelet.restart-readmits-running-
pods) 1.27.6, 1.26.9 and 1.25.14 fix. The plugin container's last state after a reboot is containerd's for an exit it
never saw (containerd/containerd internal/cri/server/helpers.go@v2.1.0: reason "Unknown", exit code 255); its
registration line is NVIDIA/k8s-device-plugin internal/plugin/server.go@v0.14.5's; the workloads' words are the CUDA
runtime's cudaErrorNoDevice (catalog cuda.no-device)."""

from __future__ import annotations

from typing import Any

import pytest
from doctor.small_cluster import diagnosed

from gpuchain.doctor.links.kubelet_defects import FINDING, kubelet_defects
from gpuchain.doctor.model import Finding, Report

#: Another preset, node, namespace and workload than the held-out case's (h30-04: A100 x8, gpu-worker-7, serving).
SCENARIO = (
    "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: node-b2, preset: t4-x4, hostDriver: 535.104.05}\n"
    "workloads:\n  - {name: train, namespace: research, count: 2, gpus: 1, node: node-b2}\n"
)
REGISTERED = (
    "I0301 07:40:12.1 1 server.go:165] Starting GRPC server for 'nvidia.com/gpu'\n"
    "I0301 07:40:12.2 1 server.go:117] Starting to serve 'nvidia.com/gpu' on "
    "/var/lib/kubelet/device-plugins/nvidia-gpu.sock\n"
    "I0301 07:40:12.3 1 server.go:125] Registered device plugin for 'nvidia.com/gpu' with Kubelet\n"
)


def _kubelet(version: str) -> dict[str, Any]:
    return {"do": "node", "node": "node-b2", "nodeInfo": {"kubeletVersion": version}}


def _plugin(last: dict[str, Any] | None, log: str = REGISTERED) -> dict[str, Any]:
    """The plugin pod of node-b2, ready again after one restart whose last run ended as ``last`` says."""
    ctr = {"name": "nvidia-device-plugin-ctr", "ready": True, "restarts": 1 if last else 0, "state": {"running": True}}
    if last:
        ctr["last"] = last
    return {
        "do": "pod",
        "daemonset": "nvidia-device-plugin-daemonset",
        "namespace": "kube-system",
        "node": "node-b2",
        "containers": [ctr],
        "logs": {"nvidia-device-plugin-ctr": log},
    }


WITH_NODE = {"terminated": "Unknown", "exitCode": 255}
#: The workload's words: the CUDA runtime's error name rather than its text.
NO_DEVICE = {
    "do": "pod",
    "daemonset": "train",
    "namespace": "research",
    "node": "node-b2",
    "containers": [
        {
            "name": "main",
            "ready": False,
            "restarts": 6,
            "state": {"waiting": "CrashLoopBackOff"},
            "last": {"terminated": "Error", "exitCode": 1},
        }
    ],
    "logs": {"main": "cudaGetDeviceCount failed: cudaErrorNoDevice\n"},
}


def _kubelet_finding(report: Report) -> Finding | None:
    return next((f for f in report.findings if f.id == FINDING), None)


@pytest.mark.parametrize(
    ("version", "fixed"),
    [
        ("v1.26.2", "v1.26.9"),  # 1.26.5 carries the fix and the restart regression 1.26.9 repairs
        ("v1.27.1+k3s1", "v1.27.6"),
        ("v1.25.9", "v1.25.14"),
        ("v1.27.2", ""),
        ("v1.28.0", ""),
        ("unknown", ""),
    ],
)
def test_the_recovery_defect_names_a_release_free_of_it_and_of_its_backports_regression(
    version: str, fixed: str
) -> None:
    (found,) = [d for d in kubelet_defects() if d.symptom == "admitted-before-registration"]
    assert found.fixed_for(version) == fixed


def test_a_branch_that_got_no_fix_is_sent_to_the_later_branches_that_did() -> None:
    (found,) = [d for d in kubelet_defects() if d.symptom == "admitted-before-registration"]
    said = found.fixed_for("v1.24.9")
    assert all(v in said for v in ("v1.25.14", "v1.26.9", "v1.27.6", "v1.28.0"))


def test_gpu_pods_without_a_device_after_the_plugin_came_back_with_the_node_are_the_kubelet() -> None:
    report = diagnosed(SCENARIO, _kubelet("v1.24.9"), _plugin(WITH_NODE), NO_DEVICE)
    found = _kubelet_finding(report)
    assert found is not None and (found.link, found.node) == ("node", "node-b2")
    assert "workload.cuda-unusable" not in report.ids
    assert (
        "kubectl delete pod -n research train-0" in found.fix and "kubectl delete pod -n research train-1" in found.fix
    )
    assert "v1.28.0" in found.fix and "kubernetes/kubernetes#116376" in found.fix
    assert any(e.startswith("kubelet defect: kubelet.recovery-admits-before-registration") for e in found.evidence)


def test_a_patch_release_of_an_affected_branch_names_its_branchs_release() -> None:
    report = diagnosed(SCENARIO, _kubelet("v1.26.3"), _plugin(WITH_NODE), NO_DEVICE)
    found = _kubelet_finding(report)
    assert found is not None and "v1.26.9" in found.fix


def test_the_same_pods_on_a_fixed_kubelet_stay_the_driver() -> None:
    report = diagnosed(SCENARIO, _kubelet("v1.28.4"), _plugin(WITH_NODE), NO_DEVICE)
    assert _kubelet_finding(report) is None and "workload.cuda-unusable" in report.ids


def test_a_plugin_that_crashed_rather_than_went_with_the_node_is_not_the_recovery() -> None:
    report = diagnosed(SCENARIO, _kubelet("v1.24.9"), _plugin({"terminated": "Error", "exitCode": 1}), NO_DEVICE)
    assert _kubelet_finding(report) is None and "workload.cuda-unusable" in report.ids


def test_a_plugin_that_never_restarted_is_not_the_recovery() -> None:
    report = diagnosed(SCENARIO, _kubelet("v1.24.9"), _plugin(None), NO_DEVICE)
    assert _kubelet_finding(report) is None


def test_a_plugin_that_has_not_registered_again_is_not_the_recovery() -> None:
    log = "I0301 07:40:12.1 1 main.go:256] Retrieving plugins.\n"
    report = diagnosed(SCENARIO, _kubelet("v1.24.9"), _plugin(WITH_NODE, log=log), NO_DEVICE)
    assert _kubelet_finding(report) is None


def test_a_node_after_a_reboot_whose_pods_run_says_nothing() -> None:
    report = diagnosed(SCENARIO, _kubelet("v1.24.9"), _plugin(WITH_NODE))
    assert _kubelet_finding(report) is None and not [f for f in report.findings if f.severity.name == "ERROR"]

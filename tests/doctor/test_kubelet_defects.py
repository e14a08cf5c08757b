"""Kubelet releases whose device manager has a known defect (kubelet_defects.yaml), matched on the node's
kubeletVersion and what the node shows: allocatable 0 after the device plugin registered again
(kubernetes/kubernetes CHANGELOG-1.9.md v1.9.8 and CHANGELOG-1.10.md v1.10.3, #63118) and running pods failed at
admission after a kubelet restart (CHANGELOG-1.27.md v1.27.6 #119432, CHANGELOG-1.26.md v1.26.9 #119706,
kubernetes/kubernetes#124345 for 1.25.14). The admission message is the device manager's own
(pkg/kubelet/cm/devicemanager/manager.go@v1.34.4, as kubernetes/kubernetes#125579 quotes it from a node)."""

from __future__ import annotations

from typing import Any

import pytest
from doctor.small_cluster import diagnosed

from gpuchain.doctor.links.kubelet_defects import FINDING, _defect, kubelet_defects
from gpuchain.doctor.model import Finding, Report

PLUGIN = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: w1, preset: a100-40gb-x8, hostDriver: 550.54.15}\n"
WITH_PODS = PLUGIN + "workloads:\n  - {name: infer, namespace: ml, count: 2, node: w1}\n"
#: The device manager's refusal of a pod it admitted while the plugin was not registered again (manager.go, as
#: kubernetes/kubernetes#125579 quotes it with the resource named).
UNHEALTHY = (
    "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices nvidia.com/gpu, "
    "which is unexpected"
)


def _kubelet(version: str, **status: Any) -> dict[str, Any]:
    return {"do": "node", "node": "w1", "nodeInfo": {"kubeletVersion": version}, **status}


def _plugin(restarts: int, log: str = "") -> dict[str, Any]:
    """The plugin pod of w1, running ready after ``restarts`` restarts (NVIDIA's plugin's start-up lines of its 1.x
    releases, NVIDIA/k8s-device-plugin main.go@v1.10 wording, unless ``log`` says otherwise)."""
    lines = log or (
        "2018/05/02 10:01:12 Loading NVML\n2018/05/02 10:01:12 Fetching devices.\n"
        "2018/05/02 10:01:12 Starting to serve on /var/lib/kubelet/device-plugins/nvidia.sock\n"
        "2018/05/02 10:01:12 Registered device plugin with Kubelet\n"
    )
    container = {"name": "nvidia-device-plugin-ctr", "ready": True, "restarts": restarts, "state": {"running": True}}
    if restarts:
        container["last"] = {"terminated": "Error", "exitCode": 2}
    return {
        "do": "pod",
        "daemonset": "nvidia-device-plugin-daemonset",
        "namespace": "kube-system",
        "node": "w1",
        "containers": [container],
        "logs": {"nvidia-device-plugin-ctr": lines},
    }


def _refused(message: str = UNHEALTHY) -> dict[str, Any]:
    """The workload's pods on w1 failed at admission, as the kubelet leaves them (phase Failed, its Event)."""
    terminated = {"terminated": "UnexpectedAdmissionError", "exitCode": 137, "message": f"Pod was rejected: {message}"}
    return {
        "do": "pod",
        "daemonset": "infer",
        "namespace": "ml",
        "node": "w1",
        "phase": "Failed",
        "containers": [{"name": "main", "ready": False, "state": terminated}],
        "events": [{"reason": "UnexpectedAdmissionError", "count": 1, "message": message}],
    }


def _kubelet_finding(report: Report) -> Finding | None:
    return next((f for f in report.findings if f.id == FINDING), None)


@pytest.mark.parametrize(
    ("version", "fixed"),
    [
        ("v1.9.7", "v1.9.8"),
        ("v1.9.7-gke.1", "v1.9.8"),
        ("v1.9.8", ""),
        ("v1.10.2", "v1.10.3"),
        ("v1.10.3", ""),
        ("v1.11.0", ""),
        ("v1.8.15", ""),
    ],
)
def test_the_reregistration_defect_covers_each_branch_until_its_patch_release(version: str, fixed: str) -> None:
    (found,) = [d for d in kubelet_defects() if d.symptom == "allocatable-zero"]
    assert found.fixed_for(version) == fixed


@pytest.mark.parametrize(
    ("version", "fixed"),
    [
        ("v1.27.1", ""),
        ("v1.27.2", "v1.27.6"),
        ("v1.27.5+k3s1", "v1.27.6"),
        ("v1.27.6", ""),
        ("v1.26.5", "v1.26.9"),
        ("v1.26.9", ""),
        ("v1.25.13", "v1.25.14"),
        ("v1.28.0", ""),
        ("unknown", ""),
    ],
)
def test_the_restart_regression_covers_the_backported_releases_only(version: str, fixed: str) -> None:
    (found,) = [d for d in kubelet_defects() if d.symptom == "running-pods-rejected"]
    assert found.fixed_for(version) == fixed


def test_an_entry_whose_range_spans_two_branches_is_refused() -> None:
    raw = {
        "id": "kubelet.x",
        "symptom": "allocatable-zero",
        "affected": [["v1.9.0", "v1.10.3"]],
        "fixed_from": "v1.11.0",
        "change": "c",
        "workaround": "w",
        "cause": "c",
        "source": "s",
        "line": "l",
    }
    with pytest.raises(ValueError, match="one minor branch"):
        _defect(raw)


def test_allocatable_zero_after_the_plugin_registered_again_on_a_110_kubelet_is_the_kubelet() -> None:
    """Another branch than the held-out case's (1.10.2, fixed in 1.10.3), an A100 node of another name."""
    report = diagnosed(PLUGIN, _kubelet("v1.10.2", allocatable={"nvidia.com/gpu": 0}), _plugin(restarts=1))
    found = _kubelet_finding(report)
    assert found is not None and (found.link, found.node) == ("node", "w1")
    assert "gpu.lost" not in report.ids
    assert "systemctl restart kubelet" in found.fix and "delete pod nvidia-device-plugin-daemonset" in found.fix
    assert "v1.10.3" in found.fix and "kubernetes/kubernetes#63118" in found.fix
    assert any(e.startswith("kubelet defect: kubelet.reregistration-allocatable") for e in found.evidence)


def test_the_same_numbers_on_a_fixed_kubelet_stay_a_lost_gpu() -> None:
    report = diagnosed(PLUGIN, _kubelet("v1.10.3", allocatable={"nvidia.com/gpu": 0}), _plugin(restarts=1))
    assert _kubelet_finding(report) is None and "gpu.lost" in report.ids


def test_an_affected_kubelet_whose_plugin_never_restarted_is_not_a_reregistration() -> None:
    report = diagnosed(PLUGIN, _kubelet("v1.9.7", allocatable={"nvidia.com/gpu": 0}), _plugin(restarts=0))
    assert _kubelet_finding(report) is None and "gpu.lost" in report.ids


def test_an_xid_the_plugin_logged_keeps_the_gpu_lost_on_an_affected_kubelet() -> None:
    """NVIDIA's plugin's XidCriticalError line (internal/rm/health.go@v0.20.0 wording): a GPU failed."""
    xid = "I0502 10:01:12.1 1 health.go:151] XidCriticalError: Xid=79 on Device=GPU-1, the device will go unhealthy."
    report = diagnosed(PLUGIN, _kubelet("v1.9.7", allocatable={"nvidia.com/gpu": 0}), _plugin(restarts=1, log=xid))
    assert _kubelet_finding(report) is None and "gpu.lost" in report.ids


def test_running_pods_failed_at_admission_on_a_1266_kubelet_are_its_restart_regression() -> None:
    """Another branch than the held-out case's (1.26.6, fixed in 1.26.9)."""
    report = diagnosed(WITH_PODS, _kubelet("v1.26.6"), _plugin(restarts=0), _refused())
    found = _kubelet_finding(report)
    assert found is not None and (found.link, found.node) == ("node", "w1")
    assert "workload.admission-failed" not in report.ids
    assert "kubectl delete pod -n ml infer-0" in found.fix and "kubectl delete pod -n ml infer-1" in found.fix
    assert "v1.26.9" in found.fix and "kubernetes/kubernetes#118635" in found.fix


def test_the_unregistered_words_of_the_same_refusal_read_the_same() -> None:
    """The device manager's refusal where the plugin's endpoint is not registered yet (manager.go@v1.34.4
    "cannot allocate unregistered device %s")."""
    message = "Allocate failed due to cannot allocate unregistered device nvidia.com/gpu, which is unexpected"
    report = diagnosed(WITH_PODS, _kubelet("v1.25.12"), _refused(message))
    found = _kubelet_finding(report)
    assert found is not None and "v1.25.14" in found.fix


def test_the_same_refusal_on_a_fixed_kubelet_is_left_to_the_admission_check() -> None:
    report = diagnosed(WITH_PODS, _kubelet("v1.26.9"), _refused())
    assert _kubelet_finding(report) is None and "workload.admission-failed" in report.ids


def test_the_refusal_while_the_gpus_are_still_out_of_allocatable_is_not_the_restart() -> None:
    """GPUs still unhealthy now (allocatable below capacity): the refusal is theirs, whatever the kubelet."""
    report = diagnosed(WITH_PODS, _kubelet("v1.26.6", allocatable={"nvidia.com/gpu": 6}), _refused())
    assert _kubelet_finding(report) is None


def test_another_admission_refusal_on_an_affected_kubelet_is_not_the_restart() -> None:
    """Stale allocations (kubernetes/kubernetes#130145): "requested number of devices unavailable"."""
    message = (
        "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 1, "
        "Available: 0, which is unexpected"
    )
    report = diagnosed(WITH_PODS, _kubelet("v1.27.3"), _refused(message))
    assert _kubelet_finding(report) is None and "workload.admission-failed" in report.ids


def test_a_healthy_node_on_an_affected_kubelet_says_nothing() -> None:
    report = diagnosed(WITH_PODS, _kubelet("v1.27.2"), _plugin(restarts=1))
    assert _kubelet_finding(report) is None


#: A GKE node whose Google plugin logs the device lists it sends the kubelet (GoogleCloudPlatform/
#: container-engine-accelerators pkg/gpu/nvidia/beta_plugin.go "ListAndWatch: send devices %v", the v1beta1 Device's
#: String() form).
GKE = "name: t\nstack: gke\nnodes:\n  - {name: w1, preset: t4-x4, labels: {cloud.google.com/gke-nodepool: pool-a}}\n"


def _sent(*health: str) -> dict[str, Any]:
    devices = "".join(f"&Device{{ID:nvidia{i},Health:{h},}}," for i, h in enumerate(health)).rstrip(",")
    line = f"I0611 08:00:02.1 1 beta_plugin.go:46] ListAndWatch: send devices &ListAndWatchResponse{{Devices:[{devices}],}}"
    ctr = "nvidia-gpu-device-plugin"
    return {
        "do": "pod",
        "daemonset": "nvidia-gpu-device-plugin-large-cos",
        "namespace": "kube-system",
        "node": "w1",
        "containers": [{"name": ctr, "ready": True, "restarts": 0, "state": {"running": True}}],
        "logs": {ctr: line},
    }


def test_allocatable_zero_while_the_plugin_reports_every_gpu_healthy_is_the_kubelet_on_any_release() -> None:
    zero = _kubelet("v1.21.14-gke.700", capacity={"nvidia.com/gpu": 4}, allocatable={"nvidia.com/gpu": 0})
    report = diagnosed(GKE, zero, _sent("Healthy", "Healthy", "Healthy", "Healthy"))
    (found,) = [f for f in report.findings if f.id == "node.kubelet-allocatable-stale"]
    assert (found.link, found.node) == ("node", "w1") and "gpu.lost" not in report.ids
    assert "systemctl restart kubelet" in found.fix and "kubernetes/kubernetes#63118" in found.fix
    assert any("ListAndWatch: send devices" in e for e in found.evidence)


def test_a_device_the_plugin_reports_unhealthy_keeps_the_gpu_lost() -> None:
    zero = _kubelet("v1.21.14-gke.700", capacity={"nvidia.com/gpu": 4}, allocatable={"nvidia.com/gpu": 0})
    report = diagnosed(GKE, zero, _sent("Healthy", "Unhealthy", "Healthy", "Healthy"))
    assert "node.kubelet-allocatable-stale" not in report.ids and "gpu.lost" in report.ids

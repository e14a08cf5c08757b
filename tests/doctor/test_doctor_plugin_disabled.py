"""A GPU Operator whose ClusterPolicy switches the device plugin off, with no other plugin on the GPU nodes.

The operator then runs no nvidia-device-plugin DaemonSet and the kubelet keeps the resource at 0; the driver, GFD and
the exporter keep running and the policy stays ready, so pods wait on "Insufficient nvidia.com/gpu". The repair is
spec.devicePlugin.enabled: true."""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed, pending_gpu_pod

from gpuchain.doctor import Severity
from gpuchain.doctor.model import FixOp
from gpuchain.sim.build import SimCluster

WAITING = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def _scenario(plugin: bool) -> str:
    return (
        "name: t\nstack: gpu-operator\n"
        f"policy: {{driver: {{version: 570.133.20}}, devicePlugin: {{enabled: {str(plugin).lower()}}}}}\n"
        "nodes:\n"
        "  - {name: h1, preset: h100-80gb-x8}\n"
        "  - {name: h2, preset: h100-80gb-x8}\n"
        "  - {name: h3, preset: h100-80gb-x8}\n"
    )


def _offering(gpus: int) -> list[dict[str, Any]]:
    """Every node's nvidia.com/gpu as the kubelet keeps it: 0 once the plugin that registered it is gone."""
    count = {"nvidia.com/gpu": str(gpus)}
    return [{"do": "node", "node": n, "capacity": count, "allocatable": count} for n in ("h1", "h2", "h3")]


def _waiting(sim: SimCluster) -> None:
    """A pod of namespace ml asking for two GPUs, Pending on Insufficient nvidia.com/gpu."""
    sim.cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    sim.cluster.create(pending_gpu_pod(2, WAITING))


def test_a_device_plugin_switched_off_in_the_policy_while_pods_wait_is_switched_on_again() -> None:
    report = diagnosed(_scenario(False), *_offering(0), _waiting)
    roots = [f for f in report.findings if f.root and f.severity is Severity.ERROR and f.node]
    assert sorted(f.node for f in roots) == ["h1", "h2", "h3"]
    assert {f.id for f in roots} == {"device-plugin.disabled-in-policy"}
    action = roots[0].action
    assert action is not None and action.op is FixOp.PATCH_POLICY
    assert action.changes == {"spec": {"devicePlugin": {"enabled": True}}}
    assert "ml/big" in " ".join(roots[0].evidence)


def test_the_policy_with_the_plugin_on_offers_the_gpus_again() -> None:
    report = diagnosed(_scenario(True))
    assert "device-plugin.disabled-in-policy" not in report.ids
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_a_switched_off_plugin_with_nothing_waiting_is_a_warning() -> None:
    report = diagnosed(_scenario(False), *_offering(0))
    found = [f for f in report.findings if f.id == "device-plugin.disabled-in-policy"]
    assert found and all(f.severity is Severity.WARNING for f in found)
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_nodes_whose_gpus_another_plugin_announces_are_quiet() -> None:
    report = diagnosed(_scenario(False), *_offering(8), _waiting)
    assert "device-plugin.disabled-in-policy" not in report.ids

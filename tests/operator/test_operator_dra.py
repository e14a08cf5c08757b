"""The operator refuses to deploy its device plugin beside a DRA plugin that serves the same GPUs
(the chart's ``dra.nodes=all`` DaemonSet) or beside a DeviceClass that serves ``nvidia.com/gpu``
through DRA (the chart's ``dra.extendedResource``), naming the field and the fix, and deploys nothing."""

from __future__ import annotations

from typing import Any

from charts.test_chart import render
from operator_helpers import make_cluster

from gpuchain.dra.kinds import device_class, whole_gpu_class
from gpuchain.kube.kinds import DAEMONSET
from gpuchain.operator.reconcile import reconcile

NS = "gpu-operator"


def chart_dra_plugin(nodes: str) -> dict[str, Any]:
    """The chart's DRA plugin DaemonSet for ``dra.nodes=<nodes>`` (the device plugin off, as the chart needs)."""
    docs = render({"dra": {"enabled": True, "nodes": nodes}, "devicePlugin": {"enabled": False}})
    return next(d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "gpuchain-dra-plugin")


def test_a_device_plugin_beside_a_dra_plugin_on_every_node_is_refused() -> None:
    cluster = make_cluster(spec={"devicePlugin": {"enabled": True}})
    cluster.create(chart_dra_plugin("all"))
    result = reconcile(cluster, name="cluster-policy", namespace=NS)
    assert result.state == "notReady"
    (problem,) = result.problems
    message = str(problem)
    assert message.startswith("spec.devicePlugin.enabled=true: DaemonSet gpu-operator/gpuchain-dra-plugin")
    assert "set devicePlugin.enabled=false" in message and "gpuchain.io/gpu.allocator=dra" in message
    assert [d["metadata"]["name"] for d in cluster.list(DAEMONSET)] == ["gpuchain-dra-plugin"]  # nothing deployed


def test_a_dra_plugin_on_labelled_nodes_or_no_device_plugin_is_fine() -> None:
    beside = make_cluster()
    beside.create(chart_dra_plugin("labelled"))
    assert reconcile(beside, name="cluster-policy", namespace=NS).problems == []
    assert "nvidia-device-plugin-daemonset" in [d["metadata"]["name"] for d in beside.list(DAEMONSET)]
    alone = make_cluster(spec={"devicePlugin": {"enabled": False}})
    alone.create(chart_dra_plugin("all"))
    assert reconcile(alone, name="cluster-policy", namespace=NS).problems == []
    assert len(alone.list(DAEMONSET)) > 1  # the other operands are deployed


def chart_device_classes() -> list[dict[str, Any]]:
    """The chart's DeviceClasses for ``dra.extendedResource=true`` (the device plugin off, as the chart needs)."""
    values = {"dra": {"enabled": True, "extendedResource": True}, "devicePlugin": {"enabled": False}}
    return [d for d in render(values) if d["kind"] == "DeviceClass"]


def test_a_device_plugin_beside_the_nvidia_gpu_bridge_is_refused() -> None:
    cluster = make_cluster(spec={"devicePlugin": {"enabled": True}})
    for dc in chart_device_classes():
        cluster.create(dc)
    result = reconcile(cluster, name="cluster-policy", namespace=NS)
    assert result.state == "notReady"
    (problem,) = result.problems
    message = str(problem)
    assert message.startswith("spec.devicePlugin.enabled=true: DeviceClass whole-gpu.gpuchain.io serves nvidia.com/gpu")
    assert "set devicePlugin.enabled=false" in message and "dra.extendedResource=false" in message
    assert cluster.list(DAEMONSET) == []  # nothing deployed


def test_device_classes_without_the_bridge_or_no_device_plugin_are_fine() -> None:
    claims_only = make_cluster()
    claims_only.create(device_class())
    assert reconcile(claims_only, name="cluster-policy", namespace=NS).problems == []
    assert "nvidia-device-plugin-daemonset" in [d["metadata"]["name"] for d in claims_only.list(DAEMONSET)]
    alone = make_cluster(spec={"devicePlugin": {"enabled": False}})
    alone.create(whole_gpu_class())
    assert reconcile(alone, name="cluster-policy", namespace=NS).problems == []
    assert len(alone.list(DAEMONSET)) > 1  # the other operands are deployed


def chart_shares_plugin(root: str) -> dict[str, Any]:
    """The chart's DRA plugin DaemonSet with GPU shares and their MPS daemons in ``root`` (the device plugin
    off, as the chart needs for the device plugin's root)."""
    values = {"dra": {"enabled": True, "gpuShares": True, "mps": {"root": root}}, "devicePlugin": {"enabled": False}}
    docs = render(values)
    return next(d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "gpuchain-dra-plugin")


def test_a_device_plugin_sharing_the_dra_plugins_mps_root_is_refused() -> None:
    """The DRA plugin stops the daemons it finds in its root that no claim needs: in the device
    plugin's root those are the device plugin's, so the operator deploys no device plugin there."""
    cluster = make_cluster(spec={"devicePlugin": {"enabled": True, "mps": {"root": "/run/nvidia/mps/"}}})
    cluster.create(chart_shares_plugin("/run/nvidia/mps"))
    result = reconcile(cluster, name="cluster-policy", namespace=NS)
    assert result.state == "notReady"
    (problem,) = result.problems
    message = str(problem)
    assert message.startswith("spec.devicePlugin.mps.root=/run/nvidia/mps: DaemonSet gpu-operator/gpuchain-dra-plugin")
    assert "dra.mps.root=/run/gpuchain/dra-mps" in message
    assert [d["metadata"]["name"] for d in cluster.list(DAEMONSET)] == ["gpuchain-dra-plugin"]  # nothing deployed


def test_a_dra_plugin_with_an_mps_root_of_its_own_is_fine() -> None:
    cluster = make_cluster()
    cluster.create(chart_shares_plugin("/run/gpuchain/dra-mps"))
    assert reconcile(cluster, name="cluster-policy", namespace=NS).problems == []
    assert "nvidia-device-plugin-daemonset" in [d["metadata"]["name"] for d in cluster.list(DAEMONSET)]

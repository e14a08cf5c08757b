"""The operator refuses to deploy its device plugin beside a DRA plugin that serves the same GPUs
(the chart's ``dra.nodes=all`` DaemonSet), naming the field and the fix, and deploys nothing."""

from __future__ import annotations

from typing import Any

from charts.test_chart import render
from operator_helpers import make_cluster

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
    result = reconcile(cluster, "cluster-policy", NS)
    assert result.state == "notReady"
    (problem,) = result.problems
    message = str(problem)
    assert message.startswith("spec.devicePlugin.enabled=true: DaemonSet gpu-operator/gpuchain-dra-plugin")
    assert "set devicePlugin.enabled=false" in message and "gpuchain.io/gpu.allocator=dra" in message
    assert [d["metadata"]["name"] for d in cluster.list(DAEMONSET)] == ["gpuchain-dra-plugin"]  # nothing deployed


def test_a_dra_plugin_on_labelled_nodes_or_no_device_plugin_is_fine() -> None:
    beside = make_cluster()
    beside.create(chart_dra_plugin("labelled"))
    assert reconcile(beside, "cluster-policy", NS).problems == []
    assert "nvidia-device-plugin-daemonset" in [d["metadata"]["name"] for d in beside.list(DAEMONSET)]
    alone = make_cluster(spec={"devicePlugin": {"enabled": False}})
    alone.create(chart_dra_plugin("all"))
    assert reconcile(alone, "cluster-policy", NS).problems == []
    assert len(alone.list(DAEMONSET)) > 1  # the other operands are deployed

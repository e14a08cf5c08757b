"""A device plugin DaemonSet whose chart affinity wants labels only NFD or GFD write, with neither running: named
with no GPU pod waiting yet (the plugin can run on no node, now or when GPU nodes come), and, in a cluster whose
other nodes are labelled, on the one node that has GPUs (a dcgm-exporter serves its metrics) but not the labels."""

from __future__ import annotations

from typing import Any

import test_doctor_tracker_classes as tracker
from doctor.small_cluster import diagnosed, no_gpus

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, FixOp, Report
from gpuchain.kube import NODE

TWO = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: g1, hostDriver: 550.54.15}\n  - {name: g2, hostDriver: 550.54.15}\n"


def _exporter(*nodes: str) -> dict[str, Any]:
    return {
        "do": "add-daemonset",
        "namespace": "metrics",
        "name": "gpu-metrics",
        "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.3.1-ubuntu22.04",
        "containers": ["dcgm"],
        "nodes": list(nodes),
    }


def _labelled(node: str) -> Any:
    return lambda s: s.cluster.patch(
        NODE, name=node, patch={"metadata": {"labels": {"nvidia.com/gpu.present": "true"}}}
    )


def _placed_nowhere(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.id == "device-plugin.placed-nowhere"]


def test_with_no_gpu_pod_waiting_the_plugin_placed_on_no_node_is_still_named_for_the_cluster() -> None:
    (found,) = _placed_nowhere(diagnosed(tracker.BARE_METAL, tracker._plugin_placed_nowhere, no_gpus("h")))
    assert found.severity is Severity.ERROR and found.root and found.node is None
    assert found.action is not None and found.action.op is FixOp.LABEL_NODE
    assert found.action.changes == {"nvidia.com/gpu.present": "true"} and "gfd.enabled=true" in found.fix


def test_an_unlabelled_node_whose_exporter_serves_its_gpus_is_named_beside_a_labelled_one() -> None:
    report = diagnosed(TWO, tracker._plugin_placed_nowhere, no_gpus("g1"), _labelled("g2"), _exporter("g1", "g2"))
    (found,) = _placed_nowhere(report)
    assert (found.node, found.link, found.severity) == ("g1", "device-plugin", Severity.ERROR)
    assert found.action is not None and found.action.target == "g1"
    assert "kubectl label node g1 nvidia.com/gpu.present=true" in found.fix


def test_an_unlabelled_node_whose_exporter_does_not_serve_is_not_taken_for_a_gpu_node() -> None:
    crashing = {
        "do": "pod",
        "daemonset": "gpu-metrics",
        "namespace": "metrics",
        "node": "g1",
        "containers": [{"name": "dcgm", "restarts": 4, "state": {"waiting": "CrashLoopBackOff"}}],
    }
    report = diagnosed(
        TWO, tracker._plugin_placed_nowhere, no_gpus("g1"), _labelled("g2"), _exporter("g1", "g2"), crashing
    )
    assert _placed_nowhere(report) == []

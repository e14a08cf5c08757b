"""Issue 26, the upper links: the repair each class of failure needs said as the action that repairs it, and a
cluster with no GPU node now (a pool scaled to zero) kept from reading as a broken chain."""

from __future__ import annotations

import re

from doctor.small_cluster import crash_looping, diagnosed

from gpuchain.doctor import Severity
from gpuchain.sim.build import SimCluster

#: dcgm-exporter's fatal line when DCGM refuses its field group with DCGM_ST_NOT_SUPPORTED (NVIDIA/go-dcgm
#: pkg/dcgm/dcgm_structs.h "Feature not supported", wrapped by go-dcgm's "Error watching fields: %s").
UNSUPPORTED = 'time="2026-01-01T00:00:01Z" level=fatal msg="Error watching fields: Feature not supported"\n'
#: The action, not a diagnosis: the fields taken out of the CSV the exporter reads.
REMOVES = re.compile(r"remove.{0,40}unsupported fields.{0,120}(metrics CSV|from the CSV)")


def test_an_exporter_of_its_own_refused_fields_is_told_to_remove_them_from_its_csv() -> None:
    """A dcgm-exporter DaemonSet of its own (no ConfigMap in the snapshot): the fix removes the unsupported
    fields from the metrics CSV it reads and starts the pod again."""
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1}\n",
        {
            "do": "add-daemonset",
            "namespace": "monitoring",
            "name": "dcgm-exporter",
            "image": "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.0-3.2.0-ubuntu22.04",
            "labels": {"app.kubernetes.io/name": "dcgm-exporter"},
            "containers": ["dcgm-exporter"],
            "nodes": ["n1"],
        },
        {
            "do": "pod",
            "daemonset": "dcgm-exporter",
            "namespace": "monitoring",
            "node": "n1",
            "containers": [crash_looping("dcgm-exporter")],
            "logs": {"dcgm-exporter": UNSUPPORTED},
        },
    )
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.link, root.node) == ("exporter", "n1")
    assert REMOVES.search(root.fix) and "delete pod" in root.fix


def _metrics(sim: SimCluster) -> None:
    csv = "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\nDCGM_FI_PROF_PIPE_FP64_ACTIVE, gauge, fp64.\n"
    sim.cluster.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "custom-metrics", "namespace": "gpu-operator"},
            "data": {"dcgm-metrics.csv": csv},
        }
    )


def test_an_exporter_reading_a_configmap_is_told_the_rewrite_removes_the_unsupported_fields() -> None:
    report = diagnosed(
        "name: t\nstack: gpu-operator\npolicy: {dcgmExporter: {config: {name: custom-metrics}}}\n"
        "nodes:\n  - {name: n1}\n",
        _metrics,
        {
            "do": "pod",
            "daemonset": "nvidia-dcgm-exporter",
            "node": "n1",
            "containers": [crash_looping("nvidia-dcgm-exporter")],
            "logs": {"nvidia-dcgm-exporter": UNSUPPORTED},
        },
    )
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert REMOVES.search(root.fix) and "DCGM_FI_PROF_PIPE_FP64_ACTIVE" in root.fix


def _waiting(sim: SimCluster) -> None:
    sim.cluster.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "job", "namespace": "ml"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
                    }
                ],
            },
        }
    )


def test_gpu_pods_waiting_in_a_cluster_with_no_gpu_node_now_are_a_warning_not_a_fault() -> None:
    """A GPU node pool scaled to zero: the pods wait for a node an autoscaler adds; no link is broken."""
    report = diagnosed("name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: c1, gpu: false, count: 2}\n", _waiting)
    pending = next(f for f in report.findings if f.id == "workload.insufficient-gpu")
    assert pending.severity is Severity.WARNING and "no GPU node now" in pending.cause
    assert not [f for f in report.findings if f.severity is Severity.ERROR]

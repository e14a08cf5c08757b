"""Issue 26: a cluster with no GPU node now (a pool scaled to zero) kept from reading as a broken chain."""

from __future__ import annotations

from doctor.small_cluster import diagnosed, pending_gpu_pod

from gpuchain.doctor import Severity
from gpuchain.sim.build import SimCluster


def _waiting(sim: SimCluster) -> None:
    """A GPU pod the scheduler could not place: no node offers nvidia.com/gpu."""
    sim.cluster.create(pending_gpu_pod(1, "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.", name="job"))


def test_gpu_pods_waiting_in_a_cluster_with_no_gpu_node_now_are_a_warning_not_a_fault() -> None:
    """A GPU node pool scaled to zero: the pods wait for a node an autoscaler adds; no link is broken."""
    report = diagnosed("name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: c1, gpu: false, count: 2}\n", _waiting)
    pending = next(f for f in report.findings if f.id == "workload.insufficient-gpu")
    assert pending.severity is Severity.WARNING and "no GPU node now" in pending.cause
    assert not [f for f in report.findings if f.severity is Severity.ERROR]

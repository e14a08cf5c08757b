"""A machine type whose GPU count is fixed outranks a pool count label that says more (issue 26): Google's G2 types
carry 1 L4 up to g2-standard-32 (cloud.google.com/compute/docs/gpus), so a g2-standard-16 node of an ``nvidia-l4``
pool that advertises one GPU has all its GPUs, whatever its count label says; one that advertises none of two is
still short."""

from __future__ import annotations

from doctor.small_cluster import diagnosed

from gpuchain.doctor.links.gpu_count import INSTANCE_GPUS, INSTANCE_TYPE

GKE = "name: t\nstack: gke\nnodes:\n  - {name: g, preset: l4-x2, hostDriver: 550.90.07}\n"
POOL = {"cloud.google.com/gke-accelerator": "nvidia-l4", "cloud.google.com/gke-nodepool": "serving"}


def _node(count: int, labels: dict[str, str]) -> dict[str, object]:
    return {
        "do": "node",
        "node": "g",
        "labels": {**POOL, **labels},
        "capacity": {"nvidia.com/gpu": count},
        "allocatable": {"nvidia.com/gpu": count},
    }


def test_a_one_gpu_g2_node_with_a_larger_pool_count_label_is_whole() -> None:
    assert INSTANCE_GPUS["g2-standard-16"] == (1, "L4")
    report = diagnosed(GKE, _node(1, {INSTANCE_TYPE: "g2-standard-16", "cloud.google.com/gke-accelerator-count": "2"}))
    assert "node.gpus-missing" not in report.ids


def test_a_two_gpu_g2_node_that_advertises_one_is_still_short() -> None:
    report = diagnosed(GKE, _node(1, {INSTANCE_TYPE: "g2-standard-24", "cloud.google.com/gke-accelerator-count": "2"}))
    (found,) = [f for f in report.findings if f.id == "node.gpus-missing"]
    assert found.node == "g" and "1 of 2 GPUs" in found.cause
    assert any("g2-standard-24" in e for e in found.evidence)


def test_a_machine_type_of_another_model_than_the_pools_accelerator_gives_no_count() -> None:
    """An ``nvidia-l4`` pool on an A100 type is no such machine: the pool's own count label speaks instead."""
    labels = {INSTANCE_TYPE: "a2-highgpu-4g", "cloud.google.com/gke-accelerator-count": "2"}
    report = diagnosed(GKE, _node(1, labels))
    (found,) = [f for f in report.findings if f.id == "node.gpus-missing"]
    assert "1 of 2 GPUs" in found.cause

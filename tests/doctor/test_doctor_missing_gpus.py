"""A node that advertises fewer GPUs than it has, with no health event (issue 26): NVIDIA's device plugin advertises
every GPU NVML enumerates and marks a failing one unhealthy instead of hiding it (NVIDIA/k8s-device-plugin
internal/rm/health.go@v0.17.1), so GPUs missing from capacity are GPUs the driver does not see: the node's own."""

from __future__ import annotations

from doctor.small_cluster import diagnosed
from doctor.test_doctor_pending_workloads import pending_pod

from gpuchain.doctor import Severity
from gpuchain.doctor.links.gpu_count import INSTANCE_GPUS, INSTANCE_TYPE

#: A pod asking for four GPUs, and kube-scheduler's word for the node that has fewer.
FOUR = {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}
INSUFFICIENT = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
A100 = "name: x\nstack: gpu-operator\nnodes:\n  - {name: m, preset: a100-40gb-x8}\n"


def _node(count: int, labels: dict[str, str]) -> dict[str, object]:
    return {
        "do": "node",
        "node": "m",
        "labels": labels,
        "capacity": {"nvidia.com/gpu": count},
        "allocatable": {"nvidia.com/gpu": count},
    }


def test_a_p4d_that_advertises_seven_gpus_is_the_node_short_of_one_not_a_full_cluster() -> None:
    """AWS's p4d.24xlarge has 8 A100s (aws.amazon.com/ec2/instance-types/p4)."""
    assert INSTANCE_GPUS["p4d.24xlarge"] == (8, "A100")
    report = diagnosed(A100, _node(7, {INSTANCE_TYPE: "p4d.24xlarge"}))
    (found,) = [f for f in report.findings if f.id == "node.gpus-missing"]
    assert (found.link, found.severity, found.node) == ("node", Severity.ERROR, "m")
    assert "7 of 8 GPUs" in found.cause
    assert "kubectl drain m" in found.fix and "reboot" in found.fix and "replace the node" in found.fix
    assert "gpu.lost" not in report.ids


def test_gfds_count_label_above_the_capacity_says_the_same_where_the_machine_type_is_unknown() -> None:
    report = diagnosed(A100, _node(6, {"nvidia.com/gpu.count": "8"}))
    (found,) = [f for f in report.findings if f.id == "node.gpus-missing"]
    assert "6 of 8 GPUs" in found.cause and any("nvidia.com/gpu.count=8" in e for e in found.evidence)


def test_the_machine_type_alone_against_gfds_own_count_is_a_warning() -> None:
    """GFD's count is NVML's: agreeing with capacity, only the machine type's table says more (a GPU the driver
    never saw, or a table that is wrong for this type), so it is said as a warning, not an error."""
    report = diagnosed(A100, _node(7, {INSTANCE_TYPE: "p4d.24xlarge", "nvidia.com/gpu.count": "7"}))
    (found,) = [f for f in report.findings if f.id == "node.gpus-missing"]
    assert found.severity == Severity.WARNING and "7 of 8 GPUs" in found.cause


def test_a_node_that_advertises_every_gpu_it_has_is_no_finding() -> None:
    report = diagnosed(A100, _node(8, {INSTANCE_TYPE: "p4d.24xlarge", "nvidia.com/gpu.count": "8"}))
    assert "node.gpus-missing" not in report.ids


def test_a_machine_type_whose_gpu_model_is_not_the_nodes_says_nothing_of_its_count() -> None:
    """A T4 node labelled as an H100 machine type is no H100 machine: its type's count is not the node's."""
    report = diagnosed(
        "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: m, preset: t4-x4, hostDriver: 550.54.15}\n",
        _node(4, {INSTANCE_TYPE: "Standard_ND96isr_H100_v5"}),
    )
    assert "node.gpus-missing" not in report.ids


def test_a_short_node_of_a_managed_pool_moves_the_pool_to_another_node_image() -> None:
    """AKS carries the kernel and driver in its node image: the pool's --node-image-only upgrade replaces them
    (learn.microsoft.com/azure/aks/node-image-upgrade)."""
    aks = "name: t\nstack: aks\nnodes:\n  - {name: n1, preset: t4-x4, labels: {kubernetes.azure.com/accelerator: nvidia}}\n"
    report = diagnosed(aks, {**_node(3, {"nvidia.com/gpu.count": "4"}), "node": "n1"})
    (found,) = [f for f in report.findings if f.id == "node.gpus-missing"]
    assert "az aks nodepool upgrade" in found.fix and "--node-image-only" in found.fix


def test_a_healthy_node_whose_gpus_are_all_taken_stays_information_only() -> None:
    """kube-scheduler's "Insufficient nvidia.com/gpu" on a node that advertises all 8 is a full node, not a short one."""
    report = diagnosed(
        A100,
        _node(8, {INSTANCE_TYPE: "p4d.24xlarge", "nvidia.com/gpu.count": "8"}),
        pending_pod("train", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."),
    )
    assert "node.gpus-missing" not in report.ids
    assert not [f for f in report.findings if f.severity is Severity.ERROR]


def test_an_aks_node_without_gfd_short_of_the_machine_a_pending_pod_was_sized_to_is_the_node() -> None:
    """Azure's Standard_NC24 has 4 K80s (learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated); on an
    AKS node (its kubernetes.azure.com labels) with no GFD, the type Azure set and a pending pod that asks for 4
    agree on the count: the node advertising 1 is short, an error."""
    aks = "name: t\nstack: aks\nnodes:\n  - {name: n1, preset: t4-x4}\n"
    labels = {INSTANCE_TYPE: "Standard_NC24", "kubernetes.azure.com/agentpool": "default"}
    waiting = pending_pod("train", INSUFFICIENT, FOUR)
    report = diagnosed(aks, {**_node(1, labels), "node": "n1"}, waiting)
    (found,) = [f for f in report.findings if f.id == "node.gpus-missing"]
    assert "1 of 4 GPUs" in found.cause and "node image" in found.fix
    assert found.severity == Severity.ERROR
    assert "node.gpus-missing" not in diagnosed(aks, {**_node(1, labels), "node": "n1"}).ids, "the type alone"


def test_a_hand_labelled_machine_type_without_its_providers_labels_is_no_witness() -> None:
    """The same type on a node with no AKS label was not set by Azure: a pod sized to it says nothing of the node."""
    plain = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: m, preset: t4-x4, hostDriver: 550.54.15}\n"
    waiting = pending_pod("train", INSUFFICIENT, FOUR)
    report = diagnosed(plain, _node(1, {INSTANCE_TYPE: "Standard_NC24"}), waiting)
    assert "node.gpus-missing" not in report.ids


def test_a_gke_n1_node_short_of_the_gpus_its_pool_attached_is_the_node_short() -> None:
    """GKE attaches T4s to an N1 machine, whose type names no GPU, and labels the node with the pool's accelerator
    count (cloud.google.com/gke-accelerator-count, cloud.google.com/kubernetes-engine/docs/how-to/gpus): with no GFD
    count, that label is the cloud's word on the GPUs the node has, and fewer in capacity is a fault."""
    gke = "name: t\nstack: gke\nnodes:\n  - {name: m, preset: t4-x4}\n"
    report = diagnosed(gke, _node(2, {}))
    (found,) = [f for f in report.findings if f.id == "node.gpus-missing"]
    assert found.severity == Severity.ERROR and "2 of 4 GPUs" in found.cause
    assert any("cloud.google.com/gke-accelerator-count=4" in e for e in found.evidence)
    assert "node.gpus-missing" not in diagnosed(gke, _node(4, {})).ids

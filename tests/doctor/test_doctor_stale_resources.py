"""A resource the node's status still names that no device plugin serves (issue 26): the kubelet keeps a resource
a plugin stopped advertising with no healthy devices, allocatable 0 (kubernetes
pkg/kubelet/cm/devicemanager/manager.go@v1.34.4 GetCapacity; pkg/kubelet/nodestatus/setters.go@v1.34.4 MachineInfo),
and never removes it: the Kubernetes docs' node status patch does (kubernetes.io/docs/tasks/administer-cluster/
extended-resource-node/, "Clean up extended resources"). That is no lost GPU."""

from __future__ import annotations

from doctor.small_cluster import diagnosed

from gpuchain.doctor import Severity

A100 = "name: x\nstack: gpu-operator\nnodes:\n  - {name: m, preset: a100-40gb-x8}\n"


def _mig_switched(allocatable_gpu: int) -> dict[str, object]:
    """The node after the MIG strategy moved from single to mixed: the plugin serves MIG devices under their own
    names, and nvidia.com/gpu, which it served before, stays in capacity."""
    return {
        "do": "node",
        "node": "m",
        "labels": {"nvidia.com/mig.strategy": "mixed"},
        "capacity": {"nvidia.com/gpu": 8, "nvidia.com/mig-1g.5gb": 56},
        "allocatable": {"nvidia.com/gpu": allocatable_gpu, "nvidia.com/mig-1g.5gb": 56},
    }


def test_a_resource_no_plugin_serves_is_removed_from_the_node_status_not_taken_for_lost_gpus() -> None:
    report = diagnosed(A100, _mig_switched(0))
    assert "gpu.lost" not in report.ids
    (found,) = [f for f in report.findings if f.id == "device-plugin.stale-resource"]
    assert (found.node, found.link, found.severity) == ("m", "device-plugin", Severity.WARNING)
    assert "kubectl patch node m --subresource=status --type=json" in found.fix
    assert '"path":"/status/capacity/nvidia.com~1gpu"' in found.fix
    assert '"path":"/status/allocatable/nvidia.com~1gpu"' in found.fix
    assert "nvidia-smi -r" not in found.fix
    assert any("nvidia.com/mig-1g.5gb" in e for e in found.evidence)


def test_a_resource_the_plugin_still_serves_in_part_is_no_stale_name() -> None:
    """Allocatable below capacity but above 0 is devices the plugin marked unhealthy, not a name it dropped."""
    report = diagnosed(A100, _mig_switched(6))
    assert "device-plugin.stale-resource" not in report.ids
    assert "gpu.lost" in report.ids


def test_the_only_gpu_resource_at_zero_is_no_stale_name() -> None:
    """With nothing else served there is no sign the plugin moved to another name: the lost-GPU path keeps it."""
    report = diagnosed(
        A100,
        {"do": "node", "node": "m", "capacity": {"nvidia.com/gpu": 8}, "allocatable": {"nvidia.com/gpu": 0}},
    )
    assert "device-plugin.stale-resource" not in report.ids

"""A MIG layout the host lays out (NVIDIA/mig-parted's nvidia-mig-manager.service, deployments/systemd@v0.15.0) that
is not there: with the mixed strategy the device plugin serves a GPU in MIG mode only as its MIG devices
(nvidia.com/mig-<profile>, NVIDIA/k8s-device-plugin cmd/nvidia-device-plugin/mig-strategy.go), so a MIG-capable node
served mixed that offers no MIG resource at all while pods wait on Insufficient nvidia.com/mig-<profile> has no MIG
device carved, though it still serves whole GPUs beside. The service's unit orders it only after nvidia-persistenced
and nvidia-fabricmanager, and its service.sh skips the MIG devices when no nvidia module is loaded, so its boot run
can lay nothing out. The repair is the layout the pods ask for applied again, the service restarted and ordered after
the driver; not the pods' resource name, which is the one the mixed strategy serves.

Stand-ins: node names and counts; the strategy is the label GFD writes (nvidia.com/mig.strategy).
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed
from sim.heldout9 import harness as ninth

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Report

NODE = "dgx-a100-80-3"
SCENARIO = f"name: t\nstack: nvidia-device-plugin\nnodes:\n  - {{name: {NODE}, preset: a100-80gb-x8}}\n"
WAITING = "0/1 nodes are available: 1 Insufficient nvidia.com/mig-1g.10gb."


def _pod(name: str) -> dict[str, Any]:
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": WAITING}
    limits = {"nvidia.com/mig-1g.10gb": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "research"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits, "requests": limits}}]},
        "status": {"phase": "Pending", "conditions": [condition]},
    }


def _report(strategy: str, capacity: dict[str, Any]) -> Report:
    labels = {"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": strategy}
    edits: list[dict[str, Any]] = [
        {"do": "node", "node": NODE, "labels": labels, "capacity": capacity, "allocatable": capacity},
        {"do": "create", "object": _pod("infer-0")},
        {"do": "create", "object": _pod("infer-1")},
    ]
    return diagnosed(SCENARIO, *(lambda sim, e=e: ninth._apply(sim.cluster, e) for e in edits))


def _errors(report: Report) -> list[Any]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def test_a_mixed_node_serving_no_slice_while_pods_wait_for_one_is_the_layout_not_applied() -> None:
    (root,) = _errors(_report("mixed", {"nvidia.com/gpu": 2}))
    assert (root.id, root.link, root.node) == ("mig.no-instances", "mig", NODE)
    assert "nvidia-mig-parted apply -f /etc/nvidia-mig-manager/config.yaml -c all-1g.10gb" in root.fix
    assert "systemctl restart nvidia-mig-manager.service" in root.fix and "After=" in root.fix
    assert any("Insufficient nvidia.com/mig-1g.10gb: research/infer-0" in e for e in root.evidence)


def test_with_the_single_strategy_the_pods_ask_for_a_name_the_node_never_serves() -> None:
    roots = _errors(_report("single", {"nvidia.com/gpu": 2}))
    assert {f.id for f in roots} == {"workload.resource-name-not-offered"}


def test_a_mixed_node_whose_slices_are_all_taken_is_capacity() -> None:
    report = _report("mixed", {"nvidia.com/mig-1g.10gb": 14})
    assert not [f for f in report.findings if f.link == "mig" and f.severity is Severity.ERROR]

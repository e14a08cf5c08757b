"""An extended resource the node's status still names but no device plugin advertises any more (issue 26).

When a device plugin stops serving a resource name (the MIG strategy moved between single and mixed, the plugin
was removed, or its config renamed what it shares), the kubelet keeps the resource in the node's capacity with
no healthy devices, so allocatable is 0, and later writes its capacity as 0 rather than removing it, to mark it
as a device plugin's (kubernetes pkg/kubelet/nodestatus/setters.go@v1.34.4 MachineInfo: "Set capacity for
removed resource to 0 on device removal"). The kubelet never removes it; the node status patch does
(kubernetes.io docs tasks/administer-cluster/extended-resource-node.md, "Clean up extended resources"). Such a
resource is no GPU that was lost: resetting hardware changes nothing."""

from __future__ import annotations

from gpuchain.doctor.context import NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.model import Finding, Severity

#: The label NVIDIA's GFD writes with the plugin's MIG strategy (none, single, mixed).
MIG_STRATEGY = "nvidia.com/mig.strategy"
#: The resource name prefix every GPU resource of NVIDIA's plugin (and gpuchain's) shares.
GPU_PREFIX = "nvidia.com/"


def stale_resources(view: NodeView, capacity: dict[str, int], allocatable: dict[str, int]) -> list[str]:
    """The GPU resources of ``capacity`` no plugin serves now: none allocatable while another GPU resource of the
    node is (the plugin serves other names), or, for ``nvidia.com/gpu``, the MIG strategy label saying mixed with
    a MIG resource in capacity (mixed serves MIG devices under their own names)."""
    served = {r for r, n in allocatable.items() if r.startswith(GPU_PREFIX) and n > 0}
    mixed = view.labels.get(MIG_STRATEGY) == "mixed" and any(r.startswith("nvidia.com/mig-") for r in capacity)
    return [
        res
        for res in sorted(capacity)
        if res.startswith(GPU_PREFIX)
        and capacity[res] > 0
        and allocatable.get(res, capacity[res]) == 0
        and (served - {res} or (mixed and res == "nvidia.com/gpu"))
    ]


def stale_finding(view: NodeView, res: str, capacity: dict[str, int], allocatable: dict[str, int]) -> Finding:
    """The finding for ``res``, a resource `stale_resources` named: what the plugin serves now, and the node
    status patch that removes the stale name from capacity and allocatable."""
    escaped = res.replace("~", "~0").replace("/", "~1")
    ops = ",".join(
        f'{{"op":"remove","path":"/status/{field}/{escaped}"}}'
        for field, names in (("capacity", capacity), ("allocatable", allocatable))
        if res in names
    )
    served = sorted(r for r, n in allocatable.items() if r.startswith(GPU_PREFIX) and n > 0)
    return node_finding(
        view,
        fid="device-plugin.stale-resource",
        sev=Severity.WARNING,
        link="device-plugin",
        cause=f"the node's status still names {res} (capacity {capacity[res]}, allocatable "
        f"{allocatable.get(res, 0)}), which no device plugin advertises any more: the kubelet keeps a resource a "
        "plugin stopped serving and never removes it, so pods that request it stay Pending. No GPU was lost.",
        evidence=[
            f"{res}: capacity {capacity[res]}, allocatable {allocatable.get(res, 0)}",
            f"the device plugin serves now: {', '.join(served)}" if served else "",
            f"label {MIG_STRATEGY}={view.labels[MIG_STRATEGY]}" if MIG_STRATEGY in view.labels else "",
            "kubernetes pkg/kubelet/nodestatus/setters.go@v1.34.4 (a removed device plugin resource is kept)",
        ],
        fix=f"kubectl patch node {view.name} --subresource=status --type=json -p '[{ops}]'   # removes {res}; "
        "then point the pods that request it at a resource the node serves "
        "(kubernetes.io/docs/tasks/administer-cluster/extended-resource-node/#clean-up-extended-resources)",
    )

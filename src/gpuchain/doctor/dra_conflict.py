"""A node whose GPUs a device plugin and a DRA driver both announce: one GPU can go to two pods.

The device plugin announces a count on the Node (capacity ``nvidia.com/gpu*``, ``nvidia.com/mig-*``)
and the kubelet hands it out; a DRA driver publishes devices in a ResourceSlice for the node and the
scheduler allocates them to claims. Neither knows what the other gave away, so when both announce
the same node's GPUs, a pod asking ``nvidia.com/gpu: 1`` and a pod with a ResourceClaim can run on
the same GPU. gpuchain's own pair never does (``kube.allocator``: the Node label
``gpuchain.io/gpu.allocator`` gives the node's GPUs to one of them); this finds the nodes where two
stacks were installed side by side, or a DRA driver that does not read the label.

The fix for gpuchain's DRA driver is the label: ``device-plugin`` keeps the GPUs with the device
plugin (pods running on them keep them) and the driver withdraws its devices at once. For another
DRA driver (NVIDIA's ``gpu.nvidia.com``), the fix keeps that driver and opts the node out of the
device plugin with NVIDIA's deploy label.
"""

from __future__ import annotations

from collections import defaultdict

from gpuchain.common.labels import DEPLOY_PREFIX
from gpuchain.common.remember import remembered
from gpuchain.doctor.model import Finding, Fix, FixOp, Severity
from gpuchain.doctor.structs import Snapshot, Stack
from gpuchain.dra.kinds import DRIVER
from gpuchain.kube.allocator import ALLOCATOR_LABEL, DEVICE_PLUGIN, device_plugin_announces
from gpuchain.kube.objects import Obj, name_of

#: DRA drivers that publish whole GPUs or MIG devices (gpuchain's, NVIDIA's k8s-dra-driver-gpu).
GPU_DRA_DRIVERS = (DRIVER, "gpu.nvidia.com")


@remembered
def published_devices(snapshot: Snapshot) -> dict[str, dict[str, int]]:
    """Per node: the number of devices each GPU DRA driver publishes for it (slices with none left out). Worked out
    once a diagnosis (`remembered`): the DRA plugin's check asks it for every node, so at 10,000 nodes a scan of
    every slice each time grew with the square of the nodes. Callers read it, never change it."""
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for s in snapshot.resource_slices:
        spec = s.get("spec") or {}
        driver, node, devices = spec.get("driver"), spec.get("nodeName"), spec.get("devices") or []
        if driver in GPU_DRA_DRIVERS and node and devices:
            out[str(node)][str(driver)] = out[str(node)].get(str(driver), 0) + len(devices)
    return dict(out)


def _finding(stack: Stack, node: Obj, announced: dict[str, int], drivers: dict[str, int]) -> Finding:
    name = name_of(node)
    if DRIVER in drivers:
        action = Fix(FixOp.LABEL_NODE, name, {ALLOCATOR_LABEL: DEVICE_PLUGIN})
        how = (
            "   # keeps the GPUs with the device plugin and gpuchain's DRA driver withdraws its devices; "
            f"{ALLOCATOR_LABEL}=dra instead moves them to DRA once the device plugin announces none"
        )
    else:
        action = Fix(FixOp.LABEL_NODE, name, {DEPLOY_PREFIX + "device-plugin": "false"})
        how = "   # keeps the DRA driver and takes the device plugin off the node (drain its GPU pods first)"
    counts = ", ".join(f"{k}={v}" for k, v in sorted(announced.items()))
    published = ", ".join(f"{d}: {n} devices" for d, n in sorted(drivers.items()))
    return Finding(
        id="device-plugin.dra-conflict",
        severity=Severity.ERROR,
        link="device-plugin",
        cause=f"a device plugin and a DRA driver both announce this node's GPUs ({counts} in capacity; {published} in "
        "ResourceSlices): neither knows what the other handed out, so one GPU can be given to two pods.",
        evidence=(
            f"node capacity: {counts}",
            *(f"ResourceSlice for {name}, driver {d}: {n} devices" for d, n in sorted(drivers.items())),
        ),
        fix=stack.render(action) + how,
        node=name,
        root=True,  # nothing below it explains it: the two were installed side by side
        action=action,
    )


def dra_conflicts(snapshot: Snapshot, stack: Stack) -> list[Finding]:
    """One finding per node where a device plugin and a GPU DRA driver both announce GPUs now."""
    published = published_devices(snapshot)
    findings = []
    for node in snapshot.nodes:
        drivers = published.get(name_of(node))
        announced = device_plugin_announces(node) if drivers else {}
        if drivers and announced:
            findings.append(_finding(stack, node, announced, drivers))
    return findings

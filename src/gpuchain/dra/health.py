"""Which devices a health event withdraws from the slice: a pure function over the XID policy.

The policy is the device plugin's (``gpuchain.gpu.xid``), so both resource models agree on what
an XID means: application errors (13, 31, 43, 45, 68, 109 by default) leave the device
published; any other XID withdraws it. An XID that names a MIG device withdraws only that MIG
device; one on the GPU withdraws the GPU and every MIG device on it. Unlike NVIDIA's plugin, a
GPU that answers again after a reset (``gpu-recovered``) is published again, with all its MIG
devices.
"""

from __future__ import annotations

from gpuchain.gpu.model import EventKind, HealthEvent, Inventory
from gpuchain.gpu.xid import HealthPolicy


def apply_event(
    unhealthy: frozenset[str], event: HealthEvent, inventory: Inventory, policy: HealthPolicy
) -> frozenset[str]:
    """The unhealthy set (GPU and MIG UUIDs) after ``event``; unchanged when the policy ignores it."""
    if event.kind is EventKind.GPU_RECOVERED:
        children = {m.uuid for g in inventory.gpus if g.uuid == event.gpu_uuid for m in g.mig_devices}
        return unhealthy - {event.gpu_uuid} - children
    if event.kind is EventKind.GPU_LOST:
        return unhealthy | {event.gpu_uuid} if policy.checks else unhealthy
    if event.xid is None or not policy.marks_unhealthy(event.xid):
        return unhealthy
    return unhealthy | {event.mig_uuid or event.gpu_uuid}

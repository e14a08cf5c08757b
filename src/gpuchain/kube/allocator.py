"""Who hands out a node's GPUs: the device plugin or the DRA driver, never both.

Both announce the same silicon in different ways: the device plugin as a count on the Node
(``nvidia.com/gpu: 8``) that the kubelet hands out, the DRA driver as devices in a ResourceSlice
that the scheduler allocates to claims. If both announce a GPU, a pod with ``nvidia.com/gpu: 1``
and a pod with a ResourceClaim can be given the same GPU. The two sides agree through their Node,
which each already follows (for the repair loop's quarantine list):

- the label ``gpuchain.io/gpu.allocator=dra`` hands every GPU of the node to the DRA driver: the
  device plugin then announces nothing;
- any other value (``device-plugin``) leaves them to the device plugin: the DRA driver publishes
  no device;
- a node without the label belongs to the device plugin, unless the DRA driver was started to
  serve unlabelled nodes (the chart does that only where it deploys no device plugin);
- and whatever the label says, the DRA driver publishes nothing while the Node shows GPUs a device
  plugin announces (capacity ``nvidia.com/gpu*`` or ``nvidia.com/mig-*`` above 0): a device plugin
  that does not read the label (NVIDIA's) is not double-booked either, and when a node moves to DRA
  the driver waits until the device plugin has let go. Capacity, not allocatable: a device plugin
  whose GPUs are all unhealthy has 0 allocatable but still holds them, and hands them out again
  when they recover; the kubelet drops a resource from capacity only once its plugin is gone (after
  its grace period) or announces no device.

Pure functions over the Node object; the doctor reads the same to find a node where both announce.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import labels_of

ALLOCATOR_LABEL = "gpuchain.io/gpu.allocator"
"""Node label: ``dra`` gives the node's GPUs to the DRA driver, ``device-plugin`` to the device plugin."""

Allocator = Literal["dra", "device-plugin"]
DRA: Final = "dra"
DEVICE_PLUGIN: Final = "device-plugin"


def allocator_of(node: Mapping[str, Any] | None, unlabelled: Allocator = DEVICE_PLUGIN) -> Allocator:
    """Which side the Node's label gives its GPUs to; ``unlabelled`` when it has no label.

    Only ``dra`` names the DRA driver: a misspelt value leaves the GPUs where they were by default
    (with the device plugin), so a typo never makes both sides, or neither, serve.
    """
    value = labels_of(dict(node or {})).get(ALLOCATOR_LABEL)
    if value is None:
        return unlabelled
    return DRA if value == DRA else DEVICE_PLUGIN


def device_plugin_announces(node: Mapping[str, Any] | None) -> dict[str, int]:
    """The device plugin GPU resources the Node announces (capacity above 0), by name."""
    return {k: v for k, v in node_gpu_resources(node or {}).items() if v > 0}


def dra_may_publish(node: Mapping[str, Any] | None, unlabelled: Allocator = DEVICE_PLUGIN) -> str | None:
    """None when the DRA driver may publish the Node's GPUs; otherwise why not, in words."""
    if allocator_of(node, unlabelled) != DRA:
        value = labels_of(dict(node or {})).get(ALLOCATOR_LABEL)
        said = f"{ALLOCATOR_LABEL}={value}" if value is not None else f"no {ALLOCATOR_LABEL} label"
        return f"the node's GPUs belong to the device plugin ({said}; label the node {ALLOCATOR_LABEL}={DRA})"
    announced = device_plugin_announces(node)
    if announced:
        counts = ", ".join(f"{k}={v}" for k, v in sorted(announced.items()))
        return (
            f"a device plugin still announces GPUs on the node ({counts} in its capacity); "
            "waiting until it announces none, so no GPU is handed out twice"
        )
    return None

"""What a node announces of its passthrough GPUs, and what NVIDIA's KubeVirt GPU device plugin says it found.

The plugin (NVIDIA/kubevirt-gpu-device-plugin pkg/device_plugin/device_plugin.go) walks /sys/bus/pci/devices, and for
each NVIDIA device bound to vfio-pci logs "Iommu Group <group>" and, for the first device of a group, "Device Id
<id>" (createIommuDeviceMap); it then starts one device plugin per device ID, named from the ID's line in its
bundled pci.ids (getDeviceName: upper case, spaces, '/' and '.' to '_', e.g. nvidia.com/GA102GL_A10), each IOMMU
group one device. An ID its pci.ids does not name logs "Error: Could not find device name for device id: <id>";
from v1.0.1 the plugin then registers the GPUs under the bare ID (nvidia.com/2235), before it skipped them (#22,
commit dbffff98 "Register device even if it is not in pci.ids"). These helpers are shared by the gather step (which
plugin's log is worth a read) and the finding (`gpuchain.doctor.links.vm_resources`), so both read one shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpuchain.kube.gpu_resources import is_gpu_resource

#: The plugin's image name (nvcr.io/nvidia/kubevirt-gpu-device-plugin), standalone or as the GPU Operator's
#: sandbox device plugin.
PLUGIN_IMAGE = "kubevirt-gpu-device-plugin"
#: A resource named by a bare PCI device ID: what the plugin registers where its pci.ids names no model.
BARE_ID = re.compile(r"nvidia\.com/([0-9a-fA-F]{4})")
#: The plugin's line for an ID its pci.ids does not name (createDevicePlugins).
UNNAMED = re.compile(r"Could not find device name for device id: ([0-9a-fA-F]{4})")
_GROUP = re.compile(r"Iommu Group (\S+)")
_DEVICE = re.compile(r"Device Id ([0-9a-fA-F]{4})")


def passthrough_resources(node: Mapping[str, Any]) -> dict[str, int]:
    """The node's ``nvidia.com/`` resources in capacity that are no container GPU (``nvidia.com/gpu``, its shared
    forms, MIG slices): the KubeVirt plugin's passthrough models or vGPU types, zeros included."""
    capacity = (node.get("status") or {}).get("capacity") or {}
    out = {}
    for name, value in capacity.items():
        name = str(name)
        if name.startswith("nvidia.com/") and not is_gpu_resource(name):
            try:
                out[name] = int(str(value))
            except ValueError:
                continue
    return out


def bare_ids(node: Mapping[str, Any]) -> dict[str, int]:
    """The node's passthrough resources named by a bare device ID, with a count above zero (a zero is a name the
    kubelet keeps from a plugin that once registered it, harmless)."""
    return {k: v for k, v in passthrough_resources(node).items() if v > 0 and BARE_ID.fullmatch(k)}


def wants_plugin_log(node: Mapping[str, Any]) -> bool:
    """Whether a running KubeVirt plugin's log can say something its node does not: the node announces no
    passthrough GPU, or announces some by bare device ID (how many it found, and which it could not name)."""
    announced = passthrough_resources(node)
    return not any(v > 0 for v in announced.values()) or bool(bare_ids(node))


def found_groups(log: str) -> dict[str, set[str]]:
    """Device ID -> the IOMMU groups the plugin found of it, from its "Iommu Group" / "Device Id" pairs (a set:
    a log with several scans counts each group once)."""
    out: dict[str, set[str]] = {}
    group = ""
    for line in log.splitlines():
        at = _GROUP.search(line)
        if at is not None:
            group = at.group(1)
            continue
        dev = _DEVICE.search(line)
        if dev is not None and group:
            out.setdefault(dev.group(1).lower(), set()).add(group)
            group = ""
    return out


def unnamed(log: str) -> list[str]:
    """The device IDs the plugin's pci.ids did not name, in the order it said so."""
    return list(dict.fromkeys(m.group(1).lower() for m in UNNAMED.finditer(log)))


def asked_passthrough(pod: Mapping[str, Any]) -> set[str]:
    """The ``nvidia.com/`` resources other than container GPUs that ``pod``'s containers ask for (a VM's passthrough
    GPU or vGPU: KubeVirt's virt-launcher pod carries the VM's deviceName as a resource request)."""
    out = set()
    for container in (pod.get("spec") or {}).get("containers") or ():
        res = container.get("resources") or {}
        for part in ("limits", "requests"):
            out |= {
                str(k) for k in (res.get(part) or {}) if str(k).startswith("nvidia.com/") and not is_gpu_resource(k)
            }
    return out


#: At most how many running KubeVirt plugins' logs one gather reads.
MAX_PASSTHROUGH_LOGS = 4


def vm_plugin_log(
    pod: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]]
) -> list[tuple[tuple[str, str, str], Any]]:
    """The running, ready KubeVirt plugin container of ``pod`` as a log key with its status, where its node (from
    ``nodes``, by name) `wants_plugin_log`; [] otherwise."""
    node = nodes.get(str((pod.get("spec") or {}).get("nodeName")))
    if node is None or not wants_plugin_log(node):
        return []
    meta = pod.get("metadata") or {}
    images = {str(c.get("name")): str(c.get("image", "")) for c in (pod.get("spec") or {}).get("containers") or ()}
    return [
        ((str(meta.get("namespace")), str(meta.get("name")), str(cs.get("name"))), cs)
        for cs in (pod.get("status") or {}).get("containerStatuses") or ()
        if PLUGIN_IMAGE in images.get(str(cs.get("name")), "") and "running" in (cs.get("state") or {})
    ]

"""Which extended resources are GPUs, how many a node offers and how many a pod asks for.

One answer for every layer that counts GPUs (the MIG manager deciding which pods to move, the driver upgrade
draining a node, the doctor explaining a Pending pod, the validator checking the plugin registered), so they
cannot disagree about what a GPU pod is.

A resource is a GPU when it is ``nvidia.com/gpu``, a shared or renamed form of it (``nvidia.com/gpu.shared``,
``nvidia.com/gpu.<x>``), a MIG device (``nvidia.com/mig-<profile>``, shared forms included), or
``volcano.sh/vgpu-number``: what HAMi's device plugin announces as ``nvidia.com/gpu`` (each GPU split into
vGPUs), its plugin for Volcano announces under Volcano's name (Project-HAMi/volcano-vgpu-device-plugin
values.yaml resourceCountName). A pod's request is counted as the kubelet and scheduler count it: the sum of
its containers, or the largest init container if that is more, with sidecars (init containers with
``restartPolicy: Always``) running beside both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuchain.common.remember import remembered

GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
#: HAMi's vGPUs as its device plugin for Volcano announces them.
VOLCANO_VGPU = "volcano.sh/vgpu-number"
_PREFIXES = (GPU + ".", MIG_PREFIX, VOLCANO_VGPU)


def is_gpu_resource(name: str) -> bool:
    """``nvidia.com/gpu``, ``nvidia.com/gpu.<x>``, ``nvidia.com/mig-<x>`` or ``volcano.sh/vgpu-number``."""
    return name == GPU or name.startswith(_PREFIXES)


def _count(quantity: Any) -> int | None:
    """An extended resource is a whole number; anything else is not a count we can use."""
    try:
        return int(str(quantity))
    except ValueError:
        return None


def _gpu_counts(resources: Mapping[str, Any]) -> dict[str, int]:
    out = {}
    for name, quantity in resources.items():
        name = str(name)
        if name == GPU or name.startswith(_PREFIXES):  # before parsing: most resources (cpu, memory) are not GPUs
            count = _count(quantity)
            if count is not None:
                out[name] = count
    return out


def node_gpu_resources(node: Mapping[str, Any], field: str = "capacity") -> dict[str, int]:
    """GPU resources from ``status.capacity`` (or ``status.allocatable``), zeros included."""
    if field == "capacity":
        return dict(_capacity(node))
    if field == "allocatable":
        return dict(_allocatable(node))
    return _node_counts(node, field)


def offered_gpus(node: Mapping[str, Any]) -> dict[str, int]:
    """The GPU resources the node offers pods now: those of ``status.allocatable`` above zero."""
    return {name: count for name, count in _allocatable(node).items() if count > 0}


def _node_counts(node: Mapping[str, Any], field: str) -> dict[str, int]:
    status = node.get("status") or {}
    return _gpu_counts(status.get(field) or {})


@remembered
def _capacity(node: Mapping[str, Any]) -> dict[str, int]:
    """A node's GPU capacity, worked out once per node in a diagnosis (its checks ask some six times a node)."""
    return _node_counts(node, "capacity")


@remembered
def _allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    """A node's allocatable GPUs, worked out once per node in a diagnosis."""
    return _node_counts(node, "allocatable")


def _container_gpus(container: Mapping[str, Any]) -> dict[str, int]:
    """Limits, else requests: an extended resource's request equals its limit when both are set."""
    resources = container.get("resources") or {}
    return {**_gpu_counts(resources.get("requests") or {}), **_gpu_counts(resources.get("limits") or {})}


def _add(total: dict[str, int], more: Mapping[str, int]) -> dict[str, int]:
    return {k: total.get(k, 0) + more.get(k, 0) for k in {*total, *more}}


def _at_least(total: dict[str, int], other: Mapping[str, int]) -> dict[str, int]:
    return {k: max(total.get(k, 0), other.get(k, 0)) for k in {*total, *other}}


def pod_gpu_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """The GPU resources a pod holds on its node, by name; resources it asks 0 of are left out.

    As the kubelet counts it: max(sum of app containers + sidecars, each init container + the
    sidecars started before it), per resource.
    """
    return dict(_pod_requests(pod))


def shares_a_gpu(pod: Mapping[str, Any]) -> bool:
    """Does ``pod`` ask a GPU-sharing scheduler's device plugin for part of a GPU: an extended resource of another
    domain whose name says gpu (Koordinator's ``koordinator.sh/gpu.shared``, ``gpu-core`` and ``gpu-memory``, ACK's
    ``aliyun.com/gpu-mem``, Volcano's ``volcano.sh/vgpu-memory``), which `pod_gpu_requests` does not count as a whole
    GPU. Such a plugin hands the pod a GPU on an NVIDIA node all the same, so what its container lacks of the driver
    is read as a GPU pod's."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        for name, quantity in (*(resources.get("limits") or {}).items(), *(resources.get("requests") or {}).items()):
            domain, _, resource = str(name).partition("/")
            if "gpu" in resource.lower() and not domain.endswith("kubernetes.io") and str(quantity) != "0":
                return True
    return False


@remembered
def _pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """`pod_gpu_requests`, worked out once per pod in a diagnosis (its checks ask some seven times a GPU pod)."""
    spec = pod.get("spec") or {}
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or []:
        gpus = _container_gpus(container)
        if container.get("restartPolicy") == "Always":
            sidecars = _add(sidecars, gpus)
            init_peak = _at_least(init_peak, sidecars)
        else:
            init_peak = _at_least(init_peak, _add(sidecars, gpus))
    app: dict[str, int] = dict(sidecars)
    for container in spec.get("containers") or []:
        app = _add(app, _container_gpus(container))
    return {k: v for k, v in sorted(_at_least(app, init_peak).items()) if v > 0}


def uses_gpus(pod: Mapping[str, Any]) -> bool:
    """Whether the pod holds any GPU, shared GPU or MIG device."""
    return bool(pod_gpu_requests(pod))

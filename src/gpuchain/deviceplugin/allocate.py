"""What Allocate answers for one container: environment, mounts, device nodes, CDI devices.

Pure: ``allocate_container(resource, ids, flags)`` decides everything from the announced devices
and ``flags.plugin``; the gRPC servicer only converts the result to protobuf. The strategies are
NVIDIA's, so the container runtime (nvidia-container-toolkit) reads the answer the same way:

- ``envvar``: ``NVIDIA_VISIBLE_DEVICES=<id>,<id>``.
- ``volume-mounts``: ``NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices`` plus one
  ``/dev/null`` mount per id under that directory (the runtime reads the mount names, which an
  unprivileged pod cannot forge through its own environment).
- ``cdi-annotations``: CDI device names, comma-joined, in an annotation under ``cdiAnnotationPrefix``.
- ``cdi-cri``: the same names in the CRI ``cdi_devices`` field. The runtime resolves them
  through the spec the plugin writes for them (``deviceplugin.cdi``).
- ``passDeviceSpecs``: the control devices (``gpu.devnodes``) and ``/dev/nvidiaN`` (plus MIG
  capability devices).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from gpuchain.api.config.v1.flags import DeviceIdStrategy, DeviceListStrategy, PluginFlags
from gpuchain.common.uuid5 import NAMESPACE_URL, uuid5
from gpuchain.deviceplugin.resources import AnnouncedDevice, Resource
from gpuchain.gpu.cdi import qualified_name
from gpuchain.gpu.devnodes import control_device_nodes

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
VOLUME_MOUNT_ROOT = "/var/run/nvidia-container-devices"
CDI_KIND = "k8s.device-plugin.nvidia.com/gpu"
"""NVIDIA's plugin's CDI vendor and class: the kind of the spec ``deviceplugin.cdi`` writes."""
CDI_STRATEGIES = frozenset({DeviceListStrategy.CDI_ANNOTATIONS, DeviceListStrategy.CDI_CRI})
MIG_CAPS_PER_GI = 9
"""nvidia-caps minors per GPU instance: one for the GI, eight for its compute instances."""
MIG_CAPS_PER_GPU = 15 * MIG_CAPS_PER_GI
MIG_CAPS_FIRST = 3
"""Minors 1 and 2 are the MIG config and monitor capabilities; GPU 0 / GI 0 starts at 3."""


class AllocationError(ValueError):
    """The kubelet asked for something this plugin cannot give; the message names the id and why."""


@dataclass(frozen=True)
class MountSpec:
    """One mount of an Allocate answer. Writable unless said, as every mount NVIDIA's plugin answers
    is (it never sets ReadOnly; found by the differential test against its v0.18.0)."""

    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True)
class DeviceNode:
    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True, kw_only=True)
class ContainerAllocation:
    """Everything one ContainerAllocateResponse carries."""

    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[MountSpec, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()


def resolve_ids(resource: Resource, ids: Sequence[str]) -> list[AnnouncedDevice]:
    """The announced devices behind ``ids``; raises AllocationError for unknown, repeated or oversized asks."""
    if not ids:
        raise AllocationError(f"empty device list for {resource.name}: ask for at least one device")
    seen: set[str] = set()
    devices = []
    for device_id in ids:
        if device_id in seen:
            raise AllocationError(f"device id {device_id!r} appears twice in one request for {resource.name}")
        seen.add(device_id)
        device = resource.device(device_id)
        if device is None:
            raise AllocationError(
                f"unknown device id {device_id!r} for {resource.name}: this plugin does not announce it "
                "(stale id after a restart or reconfiguration?)"
            )
        devices.append(device)
    if resource.shared and resource.fail_requests_greater_than_one and len(ids) > 1:
        raise AllocationError(
            f"request for {len(ids)} devices of shared resource {resource.name}: maximum request size for "
            "shared resources is 1 (failRequestsGreaterThanOne is set)"
        )
    return devices


def visible_ids(devices: Sequence[AnnouncedDevice], strategy: DeviceIdStrategy) -> list[str]:
    """Distinct physical units in request order, as UUIDs or indexes (replicas collapse to their unit)."""
    units: dict[str, AnnouncedDevice] = {}
    for d in devices:
        units.setdefault(d.unit_uuid, d)
    if strategy is DeviceIdStrategy.INDEX:
        return [d.index_id for d in units.values()]
    return list(units)


def allocate_container(
    resource: Resource, *, ids: Sequence[str], flags: PluginFlags, dev_root: str = "/"
) -> ContainerAllocation:
    """The response for one container asking for ``ids`` of ``resource``."""
    devices = resolve_ids(resource, ids)
    visible = visible_ids(devices, flags.device_id_strategy)
    strategies = set(flags.device_list_strategy)
    envs: dict[str, str] = {}
    mounts: list[MountSpec] = []
    annotations: dict[str, str] = {}
    cdi: tuple[str, ...] = ()
    if DeviceListStrategy.ENVVAR in strategies:
        envs[VISIBLE_DEVICES] = ",".join(visible)
    if DeviceListStrategy.VOLUME_MOUNTS in strategies:
        envs[VISIBLE_DEVICES] = VOLUME_MOUNT_ROOT
        mounts = [MountSpec(f"{VOLUME_MOUNT_ROOT}/{v}", "/dev/null") for v in visible]
    if strategies & CDI_STRATEGIES:
        cdi = tuple(qualified_name(CDI_KIND, v) for v in visible)
        if DeviceListStrategy.CDI_ANNOTATIONS in strategies:
            annotations[cdi_annotation_key(flags.cdi_annotation_prefix, resource=resource, visible=visible)] = ",".join(
                cdi
            )
        if DeviceListStrategy.CDI_CRI not in strategies:
            cdi = ()
    specs = device_specs(devices, dev_root) if flags.pass_device_specs else ()
    return ContainerAllocation(envs=envs, mounts=tuple(mounts), devices=specs, annotations=annotations, cdi_devices=cdi)


def cdi_annotation_key(prefix: str, *, resource: Resource, visible: Sequence[str]) -> str:
    """``<prefix>nvidia-device-plugin_<id>``: unique per request, stable for the same request."""
    request = uuid5(NAMESPACE_URL, resource.name + "|" + ",".join(visible))
    return f"{prefix}nvidia-device-plugin_{request}"


def gpu_device_node(device: AnnouncedDevice) -> str:
    """The ``/dev/nvidiaN`` of the GPU ``device`` is (on)."""
    return f"/dev/nvidia{device.minor_number}"


def mig_capability_nodes(device: AnnouncedDevice) -> list[str]:
    """A MIG device's GPU-instance and compute-instance capability devices (none for a whole GPU)."""
    if device.mig_gi_id is None or device.mig_ci_id is None:
        return []
    gi = MIG_CAPS_FIRST + device.gpu_index * MIG_CAPS_PER_GPU + device.mig_gi_id * MIG_CAPS_PER_GI
    return [f"/dev/nvidia-caps/nvidia-cap{gi}", f"/dev/nvidia-caps/nvidia-cap{gi + 1 + device.mig_ci_id}"]


def device_specs(devices: Sequence[AnnouncedDevice], dev_root: str = "/") -> tuple[DeviceNode, ...]:
    """Control devices, then each GPU's ``/dev/nvidiaN``, then MIG capability devices, without repeats.

    ``/dev/nvidia-modeset`` is among the control devices only when it exists under ``dev_root``.
    """
    paths = control_device_nodes(dev_root)
    paths += [gpu_device_node(d) for d in devices]
    for d in devices:
        paths += mig_capability_nodes(d)
    root = PurePosixPath(dev_root)
    return tuple(DeviceNode(p, str(root / p.lstrip("/"))) for p in dict.fromkeys(paths))

"""Which resources a node announces, and which devices each holds: ``map_resources(inventory, config)``.

A pure function of the GPU inventory and the config, shared by the device plugin (one gRPC
endpoint per resource) and feature discovery (labels per resource), so both always agree on
names and counts.

- MIG strategy ``none``: every GPU is ``nvidia.com/gpu``.
- ``single``: MIG devices are ``nvidia.com/gpu``; valid only when every GPU has MIG enabled with
  one and the same profile (or no GPU has MIG enabled: then whole GPUs, as ``none``).
- ``mixed``: GPUs without MIG are ``nvidia.com/gpu``; each MIG profile is ``nvidia.com/mig-<profile>``.
- Time-slicing / MPS: a selected device is announced ``replicas`` times as ``<UUID>::<n>``, under the
  same name, its ``rename``, or ``<name>.shared`` with ``renameByDefault``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from gpuchain.api.config.v1.config import Config
from gpuchain.api.config.v1.flags import MigStrategy
from gpuchain.api.config.v1.replicas import ReplicatedResource, ReplicatedResources
from gpuchain.api.config.v1.resources import RESOURCE_PREFIX, ResourcePattern
from gpuchain.gpu.catalog import resource_safe
from gpuchain.gpu.model import Gpu, Inventory, MigDevice

GPU_RESOURCE = RESOURCE_PREFIX + "gpu"
REPLICA_SEPARATOR = "::"


class ResourceMappingError(ValueError):
    """The inventory cannot be announced under the config (an invalid ``single`` layout)."""


@dataclass(frozen=True, kw_only=True)
class AnnouncedDevice:
    """One device id as ListAndWatch announces it, and the hardware behind it.

    ``id`` is the GPU UUID, the MIG device UUID, or ``<UUID>::<n>`` for replica ``n``.
    """

    id: str
    gpu_uuid: str
    gpu_index: int
    numa_node: int | None = None
    mig_uuid: str | None = None
    mig_index: int | None = None
    mig_profile: str | None = None
    replica: int | None = None
    minor_number: int = 0
    mig_gi_id: int | None = None
    mig_ci_id: int | None = None

    @property
    def unit_uuid(self) -> str:
        """The UUID of the physical unit this id hands out (the MIG device, else the GPU)."""
        return self.mig_uuid or self.gpu_uuid

    @property
    def index_id(self) -> str:
        """The id under deviceIDStrategy ``index``: ``3`` for a GPU, ``3:1`` for a MIG device."""
        if self.mig_index is None:
            return str(self.gpu_index)
        return f"{self.gpu_index}:{self.mig_index}"


@dataclass(frozen=True, kw_only=True)
class Resource:
    """One extended resource of the node and every device id it announces."""

    name: str
    devices: tuple[AnnouncedDevice, ...]
    sharing: str = "none"
    replicas: int = 1
    fail_requests_greater_than_one: bool = False
    renamed: bool = False
    mig_profile: str | None = None
    product: str = ""

    @property
    def short_name(self) -> str:
        """The name without the ``nvidia.com/`` prefix: ``gpu``, ``mig-1g.10gb``, ``gpu.shared``."""
        return self.name.split("/", 1)[1]

    @property
    def endpoint(self) -> str:
        """The plugin's socket file name for this resource, as NVIDIA names it."""
        return f"nvidia-{self.short_name}.sock"

    @property
    def shared(self) -> bool:
        return any(d.replica is not None for d in self.devices)

    @property
    def unit_uuids(self) -> tuple[str, ...]:
        """Distinct physical units behind the ids, in announcement order."""
        return tuple(dict.fromkeys(d.unit_uuid for d in self.devices))

    def device(self, device_id: str) -> AnnouncedDevice | None:
        for d in self.devices:
            if d.id == device_id:
                return d
        return None


def mig_strategy_problems(inventory: Inventory, strategy: MigStrategy) -> list[str]:
    """Why ``inventory`` is invalid under ``strategy`` (empty when valid). Only ``single`` has rules."""
    if strategy is not MigStrategy.SINGLE:
        return []
    enabled = [g for g in inventory.gpus if g.mig_enabled]
    if not enabled:
        return []
    problems = []
    disabled = [g.index for g in inventory.gpus if not g.mig_enabled]
    if disabled:
        problems.append(f"GPUs {_ints(disabled)} have MIG disabled while others have it enabled")
    empty = [g.index for g in enabled if not g.mig_devices]
    if empty:
        problems.append(f"GPUs {_ints(empty)} have MIG enabled but no MIG devices")
    profiles = sorted({m.profile for g in enabled for m in g.mig_devices})
    if len(profiles) > 1:
        problems.append(f"more than one MIG profile in use ({', '.join(profiles)}); single needs exactly one")
    return problems


def map_resources(inventory: Inventory, config: Config) -> list[Resource]:
    """The node's resources, sorted by name, each with its devices sorted by GPU, MIG and replica.

    Raises ResourceMappingError when the ``single`` MIG strategy does not fit the inventory.
    """
    strategy = config.flags.mig_strategy
    problems = mig_strategy_problems(inventory, strategy)
    if problems:
        raise ResourceMappingError(
            f"migStrategy single does not fit this node: {'; '.join(problems)}. "
            "Use migStrategy mixed, or give every GPU the same MIG layout."
        )
    base: dict[str, list[AnnouncedDevice]] = {}
    meta: dict[str, tuple[str | None, str]] = {}
    patterns = config.resources
    for gpu in inventory.gpus:
        if strategy is MigStrategy.NONE or not gpu.mig_enabled:
            name = _named(patterns.gpus, gpu.name, GPU_RESOURCE)
            base.setdefault(name, []).append(_whole(gpu))
            meta.setdefault(name, (None, gpu.name))
            continue
        for mig in gpu.mig_devices:
            if strategy is MigStrategy.SINGLE:
                default = GPU_RESOURCE
            else:
                default = f"{RESOURCE_PREFIX}mig-{resource_safe(mig.profile)}"
            name = _named(patterns.mig, mig.profile, default)
            base.setdefault(name, []).append(_mig(gpu, mig))
            meta.setdefault(name, (mig.profile, f"{gpu.name}-MIG-{mig.profile}"))
    resources = [
        Resource(name=name, devices=tuple(devs), mig_profile=meta[name][0], product=meta[name][1])
        for name, devs in base.items()
    ]
    replication = config.replication
    if replication is not None:
        resources = _replicate(resources, replication[0], replication[1])
    return sorted(resources, key=lambda r: r.name)


def _replicate(resources: list[Resource], kind: str, settings: ReplicatedResources) -> list[Resource]:
    out: dict[str, Resource] = {}
    for res in resources:
        entry = next((e for e in settings.resources if e.name == res.name), None)
        if entry is None:
            out.setdefault(res.name, res)
            continue
        chosen = _select(res.devices, entry)
        kept = tuple(d for d in res.devices if d not in chosen)
        target = entry.rename or (f"{res.name}.shared" if settings.rename_by_default else res.name)
        copies = tuple(
            replace(d, id=f"{d.unit_uuid}{REPLICA_SEPARATOR}{i}", replica=i)
            for d in chosen
            for i in range(entry.replicas)
        )
        shared = Resource(
            name=target,
            devices=copies,
            sharing=kind,
            replicas=entry.replicas,
            fail_requests_greater_than_one=settings.fail_requests_greater_than_one is True,
            renamed=target != res.name,
            mig_profile=res.mig_profile,
            product=res.product,
        )
        if kept:
            out[res.name] = replace(res, devices=kept)
        _merge(out, shared)
    return list(out.values())


def _merge(out: dict[str, Resource], res: Resource) -> None:
    """Add ``res``; a name already present (unshared devices kept under the same name) is merged."""
    have = out.get(res.name)
    if have is None:
        out[res.name] = res
        return
    out[res.name] = replace(res, devices=have.devices + res.devices)


def _select(devices: Sequence[AnnouncedDevice], entry: ReplicatedResource) -> tuple[AnnouncedDevice, ...]:
    sel = entry.devices
    if sel == "all":
        return tuple(devices)
    if isinstance(sel, int):
        if sel > len(devices):
            raise ResourceMappingError(
                f"sharing: {entry.name} asks to replicate {sel} devices but the node has {len(devices)}"
            )
        return tuple(devices[:sel])
    wanted = {str(s) for s in sel}
    return tuple(d for d in devices if wanted & {d.index_id, d.unit_uuid, d.gpu_uuid, str(d.gpu_index)})


def _named(patterns: Iterable[ResourcePattern], subject: str, default: str) -> str:
    """The name of the first pattern matching ``subject`` (NVIDIA's wildcard: only ``*`` is special)."""
    for p in patterns:
        if re.fullmatch(".*".join(re.escape(part) for part in p.pattern.split("*")), subject):
            return p.name
    return default


def _whole(gpu: Gpu) -> AnnouncedDevice:
    return AnnouncedDevice(
        id=gpu.uuid, gpu_uuid=gpu.uuid, gpu_index=gpu.index, numa_node=gpu.numa_node, minor_number=gpu.minor_number
    )


def _mig(gpu: Gpu, mig: MigDevice) -> AnnouncedDevice:
    return AnnouncedDevice(
        id=mig.uuid,
        gpu_uuid=gpu.uuid,
        gpu_index=gpu.index,
        numa_node=gpu.numa_node,
        mig_uuid=mig.uuid,
        mig_index=mig.index,
        mig_profile=mig.profile,
        minor_number=gpu.minor_number,
        mig_gi_id=mig.gi_id,
        mig_ci_id=mig.ci_id,
    )


def _ints(values: Iterable[int]) -> str:
    return ", ".join(str(v) for v in values)

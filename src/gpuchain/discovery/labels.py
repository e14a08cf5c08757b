"""GPU feature discovery labels, named and valued as NVIDIA's GFD names and values them.

``gfd_labels(inventory, config)`` is a pure function: the node's GPUs and the device plugin's
config (GFD reads the same file as the plugin, so MIG strategy and sharing agree) in, the
``nvidia.com/*`` labels out. Existing nodeSelectors and affinities written against GFD's labels
keep matching, including its quirks, which are deliberate here:

- ``gpu.count`` counts every GPU of the model, MIG-enabled or not; ``gpu.replicas`` is 0 on a
  node whose GPUs are all MIG-enabled (their full-GPU labels carry no sharing).
- ``gpu.product`` gets ``-SHARED`` when the resource is replicated under its own name, not when
  it is renamed (a renamed resource is already distinguishable).
- MIG ``single`` with a layout that does not fit reports ``<model>-MIG-INVALID`` with count 0
  and an empty ``sharing-strategy``, so a selector on the product matches nothing instead of the
  wrong devices.

``is_owned(key)`` says which labels this module writes, so the node-label output can remove
labels that no longer apply without touching anyone else's (``nvidia.com/gpu.present``,
``nvidia.com/gpu.deploy.*``, ``nvidia.com/mig.config`` belong to the operator and MIG manager).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuchain.api.config.v1.config import Config
from gpuchain.api.config.v1.flags import MigStrategy
from gpuchain.api.config.v1.replicas import ReplicatedResource
from gpuchain.deviceplugin.resources import GPU_RESOURCE, mig_strategy_problems
from gpuchain.gpu import catalog
from gpuchain.gpu.errors import InvalidConfigError
from gpuchain.gpu.model import DriverInfo, Gpu, Inventory, MigDevice

PREFIX = "nvidia.com/"
UNKNOWN_MACHINE = "unknown"

Labels = dict[str, str]


class LabelError(ValueError):
    """The node reports something GFD labels cannot express; the message names the value."""


_RESOURCE_KEYS = (
    r"product|count|replicas|sharing-strategy|memory|family|compute\.major|compute\.minor"
    r"|multiprocessors|slices\.gi|slices\.ci|engines\.[a-z]+"
)
_OWNED = re.compile(
    r"^nvidia\.com/(?:"
    r"gfd\.timestamp"
    r"|cuda\.(?:driver|runtime|driver-version|runtime-version)\.[a-z]+"
    r"|gpu\.machine|gpu\.mode|mig\.capable|mig\.strategy|mps\.capable|vgpu\.present"
    rf"|(?:gpu|mig-[A-Za-z0-9.+_-]+)\.(?:{_RESOURCE_KEYS})"
    r")$"
)


def is_owned(key: str) -> bool:
    """Whether ``key`` is a label feature discovery writes (and may therefore remove)."""
    return _OWNED.match(key) is not None


_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9\-_. ]")


def sanitize(text: str) -> str:
    """GFD's product sanitizing: drop characters a label value cannot hold, spaces become '-'."""
    return "-".join(_NOT_ALLOWED.sub("", text).split())


def label_value(text: str) -> str:
    """``sanitize`` plus Kubernetes' value rules: at most 63 characters, alphanumeric at both ends."""
    value = sanitize(text)[:63]
    return value.strip("-_.")


PCI_CLASS_MODES = {0x030000: "graphics", 0x030200: "compute"}
"""GFD's ``gpu.mode`` per PCI class code: a VGA controller drives displays, a 3D controller does not."""
UNKNOWN_MODE = "unknown"


def gpu_mode(gpus: Iterable[Gpu]) -> str:
    """``graphics`` or ``compute`` when every GPU has that PCI class, else ``unknown`` (as GFD).

    A GPU whose class could not be read, or a node mixing classes, is ``unknown``.
    """
    classes = {g.pci_class for g in gpus}
    if len(classes) != 1:
        return UNKNOWN_MODE
    (pci_class,) = classes
    return PCI_CLASS_MODES.get(pci_class, UNKNOWN_MODE) if pci_class is not None else UNKNOWN_MODE


def version_labels(driver: DriverInfo) -> Labels:
    """Driver and CUDA versions, under the current names and GFD's deprecated ones."""
    parts = driver.version.split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise LabelError(f"driver version {driver.version!r} is not of the form X.Y[.Z]")
    major, minor = parts[0], parts[1]
    revision = parts[2] if len(parts) == 3 else ""
    cuda_major, cuda_minor = driver.cuda_major_minor
    return {
        f"{PREFIX}cuda.driver-version.major": major,
        f"{PREFIX}cuda.driver-version.minor": minor,
        f"{PREFIX}cuda.driver-version.revision": revision,
        f"{PREFIX}cuda.driver-version.full": driver.version,
        f"{PREFIX}cuda.driver.major": major,
        f"{PREFIX}cuda.driver.minor": minor,
        f"{PREFIX}cuda.driver.rev": revision,
        f"{PREFIX}cuda.runtime-version.major": str(cuda_major),
        f"{PREFIX}cuda.runtime-version.minor": str(cuda_minor),
        f"{PREFIX}cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
        f"{PREFIX}cuda.runtime.major": str(cuda_major),
        f"{PREFIX}cuda.runtime.minor": str(cuda_minor),
    }


@dataclass(frozen=True)
class _Sharing:
    """The sharing section as GFD reads it: the kind in use and the replicated entries by name."""

    kind: str
    entries: Mapping[str, ReplicatedResource]
    rename_by_default: bool


def _sharing(config: Config) -> _Sharing:
    replication = config.replication
    if replication is None:
        return _Sharing("none", {}, False)
    kind, settings = replication
    return _Sharing(kind, {r.name: r for r in settings.resources}, settings.rename_by_default)


def _resource_base(resource: str, count: int, parts: Iterable[str], sharing: _Sharing | None) -> Labels:
    """``product``, ``count``, ``replicas`` and ``sharing-strategy`` of one resource.

    ``sharing`` None means "labelled without sharing" (MIG-enabled GPUs' full-GPU labels): replicas 0.
    """
    entry = sharing.entries.get(resource) if sharing else None
    if sharing is None:
        replicas = 0
    elif entry is not None:
        replicas = entry.replicas
    else:
        replicas = 1
    strategy = sharing.kind if sharing is not None and replicas > 1 else "none"
    renamed = entry is not None and (entry.rename is not None or (sharing is not None and sharing.rename_by_default))
    product = "-".join(sanitize(p) for p in parts if p)
    if entry is not None and entry.replicas > 1 and not renamed:
        product += "-SHARED"
    return {
        f"{resource}.product": product,
        f"{resource}.count": str(count),
        f"{resource}.replicas": str(replicas),
        f"{resource}.sharing-strategy": strategy,
    }


def _full_gpu(gpu: Gpu, count: int, sharing: _Sharing | None) -> Labels:
    labels = _resource_base(GPU_RESOURCE, count, [gpu.name], sharing)
    if gpu.memory_mib:
        labels[f"{GPU_RESOURCE}.memory"] = str(gpu.memory_mib)
    major, minor = gpu.compute_capability
    if major:
        labels[f"{GPU_RESOURCE}.family"] = catalog.architecture(gpu.compute_capability)
        labels[f"{GPU_RESOURCE}.compute.major"] = str(major)
        labels[f"{GPU_RESOURCE}.compute.minor"] = str(minor)
    return labels


def _mig_name(mig: MigDevice) -> str:
    """The MIG device's name as GFD and the plugin spell it: ``+`` becomes ``.`` (``1g.10gb.me``)."""
    return catalog.resource_safe(mig.profile)


def _mig_attributes(resource: str, parent: Gpu, mig: MigDevice) -> Labels:
    """Memory, SMs, slices and engines of one MIG device, as NVIDIA's GFD reads them from the
    device's attributes: ``slices.ci`` is its compute instance's slices (1 for ``1c.3g.40gb``,
    all of the GPU instance's for ``3g.40gb``), the engines its GPU instance's."""
    labels = {
        f"{resource}.memory": str(mig.memory_mib),
        f"{resource}.multiprocessors": str(mig.multiprocessors),
        f"{resource}.slices.gi": str(mig.gi_slices),
        f"{resource}.slices.ci": str(mig.ci_slices),
    }
    profile = _catalog_profile(parent, mig)
    if profile is not None:
        labels.update(
            {
                f"{resource}.engines.copy": str(profile.copy_engines),
                f"{resource}.engines.decoder": str(profile.decoders),
                f"{resource}.engines.encoder": str(profile.encoders),
                f"{resource}.engines.jpeg": str(profile.jpeg),
                f"{resource}.engines.ofa": str(profile.ofa),
            }
        )
    return labels


def _catalog_profile(parent: Gpu, mig: MigDevice) -> catalog.MigProfile | None:
    """The catalogued profile (engine counts); None for a card or profile the catalog lacks."""
    model = catalog.model_for_name(parent.name, parent.pci_device_id)
    if model is None:
        return None
    try:
        return model.profile(mig.profile)
    except InvalidConfigError:
        return None


def _mig_resource(resource: str, devices: list[tuple[Gpu, MigDevice]], sharing: _Sharing) -> Labels:
    parent, first = devices[0]
    labels = _resource_base(resource, len(devices), [parent.name, "MIG", _mig_name(first)], sharing)
    labels.update(_mig_attributes(resource, parent, first))
    return labels


def _full_gpu_labels(inventory: Inventory, sharing: _Sharing) -> Labels:
    """Full-GPU labels: MIG-enabled models without sharing first, then whole GPUs over them."""
    counts: dict[str, int] = {}
    for gpu in inventory.gpus:
        counts[gpu.name] = counts.get(gpu.name, 0) + 1
    mig_enabled = {g.name: g for g in reversed(inventory.gpus) if g.mig_enabled}
    whole = {g.name: g for g in reversed(inventory.gpus) if not g.mig_enabled}
    labels: Labels = {}
    for name in sorted(mig_enabled):
        labels.update(_full_gpu(mig_enabled[name], counts[name], None))
    for name in sorted(whole):
        labels.update(_full_gpu(whole[name], counts[name], sharing))
    return labels


def _by_profile(inventory: Inventory) -> dict[str, list[tuple[Gpu, MigDevice]]]:
    groups: dict[str, list[tuple[Gpu, MigDevice]]] = {}
    for gpu in inventory.gpus:
        if not gpu.mig_enabled:
            continue
        for mig in gpu.mig_devices:
            groups.setdefault(_mig_name(mig), []).append((gpu, mig))
    return groups


def _single_labels(inventory: Inventory, sharing: _Sharing) -> Labels:
    enabled = [g for g in inventory.gpus if g.mig_enabled]
    if not enabled:
        return {}
    if mig_strategy_problems(inventory, MigStrategy.SINGLE):
        return {
            f"{GPU_RESOURCE}.product": f"{sanitize(enabled[0].name)}-MIG-INVALID",
            f"{GPU_RESOURCE}.count": "0",
            f"{GPU_RESOURCE}.replicas": "0",
            f"{GPU_RESOURCE}.sharing-strategy": "",
            f"{GPU_RESOURCE}.memory": "0",
        }
    (devices,) = _by_profile(inventory).values()
    return _mig_resource(GPU_RESOURCE, devices, sharing)


def _mixed_labels(inventory: Inventory, sharing: _Sharing) -> Labels:
    labels: Labels = {}
    for name, devices in sorted(_by_profile(inventory).items()):
        labels.update(_mig_resource(f"{PREFIX}mig-{name}", devices, sharing))
    return labels


def resource_labels(inventory: Inventory, config: Config) -> Labels:
    """Per-resource labels for the node's GPUs under the config's MIG strategy and sharing."""
    if not inventory.gpus:
        return {}
    sharing = _sharing(config)
    labels = _full_gpu_labels(inventory, sharing)
    strategy = config.flags.mig_strategy
    if strategy is MigStrategy.NONE:
        return labels
    labels[f"{PREFIX}mig.strategy"] = strategy.value
    labels.update(_single_labels(inventory, sharing) if strategy is MigStrategy.SINGLE else {})
    labels.update(_mixed_labels(inventory, sharing) if strategy is MigStrategy.MIXED else {})
    return labels


def gfd_labels(
    inventory: Inventory, *, config: Config, timestamp: int | None = None, machine: str = UNKNOWN_MACHINE
) -> Labels:
    """Every feature-discovery label for one node, sorted by key.

    ``timestamp`` (Unix seconds) becomes ``gfd.timestamp``; None leaves it out (``noTimestamp``).
    A node without GPUs gets no GPU labels at all, so the output removes stale ones.
    Raises LabelError on a driver version GFD cannot label.
    """
    labels: Labels = {}
    if timestamp is not None:
        labels[f"{PREFIX}gfd.timestamp"] = str(timestamp)
    if inventory.gpus:
        labels[f"{PREFIX}gpu.machine"] = label_value(machine) or UNKNOWN_MACHINE
        labels[f"{PREFIX}gpu.mode"] = gpu_mode(inventory.gpus)
        labels.update(version_labels(inventory.driver))
        labels[f"{PREFIX}mig.capable"] = str(any(g.mig_capable for g in inventory.gpus)).lower()
        labels[f"{PREFIX}mps.capable"] = str(config.mps is not None).lower()
        labels[f"{PREFIX}vgpu.present"] = str(any(g.vgpu for g in inventory.gpus)).lower()
        labels.update(resource_labels(inventory, config))
    return dict(sorted(labels.items()))

"""Render a node's GPUs as DRA devices and its ResourceSlice: pure functions over an Inventory.

One device per whole GPU that is not in MIG mode and one per MIG device. A GPU in MIG mode is
not published whole: its memory and SMs already belong to its MIG devices, and offering both
would let the scheduler hand out the same silicon twice. Devices withdrawn for health are simply
absent, which is how DRA tells the scheduler not to use them.

With partitionable MIG (``partitions``) each MIG-capable GPU is instead published in a slice of
its own (``render_gpu_slices``, ``gpu_slice_name``): the whole GPU and every MIG placement,
consuming the GPU's counters, so offering both is safe there; the counter sets themselves go in
slices without devices (``counter_slice_name``), as Kubernetes 1.35 and later require
(``pool_slices``). With shares (``shares``) each whole GPU is published for several claims to
share, each booking part of its memory and SMs.

The pool (one per node, named after it: the plain slice, plus with partitions the counter slices
and a slice per partitionable GPU) carries a generation that must grow whenever the published
devices change; consumers ignore slices of an older generation. ``pool_generation`` decides it
from what is live, so a restarted plugin continues the count instead of restarting it.

Names follow the API server's rules, checked by ``check_slice`` before anything is written:
device names are DNS labels, attribute and capacity names C identifiers of at most 32
characters, at most 32 of them per device, strings at most 64 characters, versions semver.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from gpuchain.dra import cdi, partitions, shares
from gpuchain.dra.kinds import API_VERSION, DRIVER
from gpuchain.gpu import catalog
from gpuchain.gpu.model import DriverInfo, Gpu, Inventory, MigDevice
from gpuchain.kube.objects import Obj, is_subset

MAX_DEVICES_PER_SLICE = 128
MAX_ATTRIBUTES_PER_DEVICE = 32
MAX_STRING = 64
MAX_IDENTIFIER = 32

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")


class SliceError(ValueError):
    """A rendered object breaks a rule the API server enforces; the message names device and field."""


def architecture(compute_capability: tuple[int, int]) -> str:
    """The catalog's architecture, capitalised for the DRA attribute (``Ada Lovelace``, ``Unknown``)."""
    name = catalog.architecture(compute_capability)
    if name == catalog.UNKNOWN_ARCHITECTURE:
        return "Unknown"
    return " ".join(word.capitalize() for word in name.split("-"))


def semver(version: str) -> str:
    """A driver or CUDA version as the strict semver DRA's ``version`` attributes require.

    ``12.8`` becomes ``12.8.0``; leading zeros are dropped (``535.104.05`` -> ``535.104.5``),
    since semver forbids them. Raises SliceError for a version with non-numeric parts.
    """
    parts = version.strip().split(".")
    if not parts or not all(p.isdigit() for p in parts):
        raise SliceError(f"version {version!r} is not numeric dotted (like 570.86.15)")
    numbers = [int(p) for p in parts[:3]] + [0] * (3 - min(len(parts), 3))
    return ".".join(map(str, numbers))


def profile_slug(profile: str) -> str:
    """A MIG profile inside a DNS label: ``1g.10gb`` -> ``1g10gb``, ``1g.10gb+me`` -> ``1g10gbme``."""
    return re.sub(r"[^a-z0-9]", "", profile.lower())


def gpu_device_name(gpu: Gpu) -> str:
    """``gpu-<index>``: the whole GPU."""
    return f"gpu-{gpu.index}"


_GPU_OF_DEVICE = re.compile(r"^gpu-(\d+)(?:-|$)")


def gpu_index_of(device: str) -> int | None:
    """The GPU a device of gpu.gpuchain.io is on, from its name: the whole GPU (``gpu-<index>``), a
    MIG device or a MIG placement (``gpu-<index>-mig-...``); None for a name the driver never gives."""
    found = _GPU_OF_DEVICE.match(device)
    return int(found.group(1)) if found else None


def mig_device_name(mig: MigDevice) -> str:
    """``gpu-<parent index>-mig-<profile>-<gi>-<ci>``: stable while the MIG layout stays the same."""
    return f"gpu-{mig.parent_index}-mig-{profile_slug(mig.profile)}-{mig.gi_id}-{mig.ci_id}"


def _string(value: str) -> dict[str, Any]:
    return {"string": value}


def _common(gpu: Gpu, driver: DriverInfo) -> dict[str, dict[str, Any]]:
    cc = gpu.compute_capability
    attrs: dict[str, dict[str, Any]] = {
        "productName": _string(gpu.name),
        "architecture": _string(architecture(cc)),
        "cudaComputeCapability": {"version": f"{cc[0]}.{cc[1]}.0"},
        "driverVersion": {"version": semver(driver.version)},
        "cudaDriverVersion": {"version": semver(driver.cuda_version)},
        "pciBusID": _string(gpu.pci_bus_id),
        "index": {"int": gpu.index},
    }
    if gpu.numa_node is not None:
        attrs["numaNode"] = {"int": gpu.numa_node}
    return attrs


def gpu_device(gpu: Gpu, driver: DriverInfo) -> Obj:
    """The DRA device for a whole GPU."""
    attrs = {"type": _string("gpu"), "uuid": _string(gpu.uuid), **_common(gpu, driver)}
    attrs["migCapable"] = {"bool": gpu.mig_capable}
    return {
        "name": gpu_device_name(gpu),
        "attributes": attrs,
        "capacity": {
            "memory": {"value": f"{gpu.memory_mib}Mi"},
            "multiprocessors": {"value": str(gpu.multiprocessors)},
        },
    }


def mig_device(mig: MigDevice, *, parent: Gpu, driver: DriverInfo) -> Obj:
    """The DRA device for one MIG device; PCI, NUMA and product attributes are its parent's."""
    attrs = {"type": _string("mig"), "uuid": _string(mig.uuid), **_common(parent, driver)}
    attrs["migProfile"] = _string(mig.profile)
    attrs["parentUUID"] = _string(parent.uuid)
    return {
        "name": mig_device_name(mig),
        "attributes": attrs,
        "capacity": {
            "memory": {"value": f"{mig.memory_mib}Mi"},
            "multiprocessors": {"value": str(mig.multiprocessors)},
        },
    }


def withdrawn(gpu: Gpu, unhealthy: Collection[str]) -> bool:
    """A GPU is withdrawn when its UUID is unhealthy; its MIG devices go with it."""
    return gpu.uuid in unhealthy


TaintOf = Callable[[str, str | None], Obj | None]
"""A device's taint from its GPU UUID and MIG UUID (None for a whole GPU), None when healthy."""


def render_devices(
    inventory: Inventory,
    *,
    unhealthy: Collection[str] = (),
    taint_of: TaintOf | None = None,
    partitionable: bool = False,
    shared: bool = False,
) -> list[Obj]:
    """The node's devices in a stable order. Without ``taint_of`` every unhealthy GPU or MIG device
    (by UUID) is left out; with it every device is published, an unhealthy one with its taint.
    ``partitionable``: GPUs published as partitionable devices (``render_gpu_slices``) are not here.
    ``shared``: whole GPUs are published for several claims to share (``shares``)."""

    def add(device: Obj, gpu_uuid: str, mig_uuid: str | None) -> None:
        if taint_of is not None:
            taint = taint_of(gpu_uuid, mig_uuid)
            # an empty list, not no key, so a taint that is gone is a change (kube.objects.is_subset)
            devices.append({**device, "taints": [taint] if taint else []})
        elif gpu_uuid not in unhealthy and (mig_uuid is None or mig_uuid not in unhealthy):
            devices.append(device)

    devices: list[Obj] = []
    for gpu in sorted(inventory.gpus, key=lambda g: g.index):
        if partitionable and partitions.partitionable(gpu) is not None:
            continue
        if not gpu.mig_enabled:
            whole = gpu_device(gpu, inventory.driver)
            add(shares.shared_device(whole, gpu) if shared else whole, gpu.uuid, None)
            continue
        for mig in sorted(gpu.mig_devices, key=lambda m: (m.gi_id, m.ci_id)):
            add(mig_device(mig, parent=gpu, driver=inventory.driver), gpu.uuid, mig.uuid)
    return devices


def render_gpu_slices(
    inventory: Inventory, *, unhealthy: Collection[str] = (), taint_of: TaintOf | None = None
) -> list[partitions.GpuSlice]:
    """One slice's content per partitionable GPU (``partitions``), in GPU order; health as in
    ``render_devices``, the GPU's own deciding for the full GPU and every placement on it."""
    out: list[partitions.GpuSlice] = []
    for gpu in sorted(inventory.gpus, key=lambda g: g.index):
        model = partitions.partitionable(gpu)
        if model is None:
            continue
        whole = gpu_device(gpu, inventory.driver)
        if taint_of is not None:
            taint = taint_of(gpu.uuid, None)
            out.append(partitions.gpu_slice(gpu, model=model, whole=whole, taints=[taint] if taint else []))
        else:
            out.append(partitions.gpu_slice(gpu, model=model, whole=whole, withdrawn=withdrawn(gpu, unhealthy)))
    return out


def slice_name(node: str) -> str:
    """The node's ResourceSlice of plain devices: ``<node>-gpu.gpuchain.io``."""
    return f"{node}-{DRIVER}"


def gpu_slice_name(node: str, gpu_index: int) -> str:
    """The ResourceSlice of one partitionable GPU: ``<node>-gpu.gpuchain.io-gpu-<index>``."""
    return f"{slice_name(node)}-gpu-{gpu_index}"


def counter_slice_name(node: str, chunk: int) -> str:
    """The ResourceSlice of the pool's counter sets ``chunk * 8`` on: ``<node>-gpu.gpuchain.io-counters-<chunk>``."""
    return f"{slice_name(node)}-counters-{chunk}"


def pool_slices(
    node: str, *, plain: list[Obj], parts: Sequence[partitions.GpuSlice], owner: Obj | None = None
) -> list[Obj]:
    """The node's pool as ResourceSlices, generation 0 (``pool_generation`` sets it): the plain
    devices' slice, the partitionable GPUs' counter sets in slices without devices (8 sets each),
    then each GPU's devices in a slice of its own. Raises ValueError for a GPU the API server would
    refuse (``partitions.check_gpu_slice``)."""
    per = partitions.MAX_COUNTER_SETS_PER_SLICE
    chunks = [parts[i : i + per] for i in range(0, len(parts), per)]
    count = 1 + len(chunks) + len(parts)
    out = [resource_slice(node, devices=plain, generation=0, owner=owner, slice_count=count)]
    for k, chunk in enumerate(chunks):
        out.append(
            resource_slice(
                node,
                devices=None,
                generation=0,
                owner=owner,
                name=counter_slice_name(node, k),
                slice_count=count,
                shared_counters=[p.counter_set for p in chunk],
            )
        )
    for part in parts:
        partitions.check_gpu_slice(part)
        out.append(
            resource_slice(
                node,
                devices=part.devices,
                generation=0,
                owner=owner,
                name=gpu_slice_name(node, part.gpu.index),
                slice_count=count,
            )
        )
    return out


def devices_of(obj: Obj) -> list[Obj]:
    """A ResourceSlice's devices: none in a slice of counter sets, which has no ``devices`` key."""
    return list(obj.get("spec", {}).get("devices") or [])


def live_generation(live: Obj | None) -> int:
    """The pool generation of a live slice, 0 when there is none."""
    if live is None:
        return 0
    return int(live.get("spec", {}).get("pool", {}).get("generation", 0))


def _published(obj: Obj) -> Obj:
    """What of a slice's spec the driver decides: its devices, counters and the pool's slice count."""
    spec = obj.get("spec", {})
    return {
        "devices": devices_of(obj),
        "sharedCounters": spec.get("sharedCounters", []),
        "count": spec.get("pool", {}).get("resourceSliceCount"),
    }


def pool_generation(lives: Mapping[str, Obj], desired: Sequence[Obj]) -> int:
    """The generation to publish the pool's ``desired`` slices under (``lives``: its slices now, by
    name): the live one if every slice is there unchanged and no other, else one more than any.

    All slices of a pool carry one generation. Fields the API server adds to what was written (a
    taint's ``timeAdded``) are no change."""
    newest = max((live_generation(live) for live in lives.values()), default=0)
    names = {str(d["metadata"]["name"]) for d in desired}
    same = (
        bool(lives)
        and names == set(lives)
        and all(
            live_generation(lives[str(d["metadata"]["name"])]) == newest
            and is_subset(_published(d), _published(lives[str(d["metadata"]["name"])]))
            for d in desired
        )
    )
    return newest if same else newest + 1


def resource_slice(
    node: str,
    *,
    devices: list[Obj] | None,
    generation: int,
    owner: Obj | None = None,
    name: str | None = None,
    slice_count: int = 1,
    shared_counters: list[Obj] | None = None,
) -> Obj:
    """One ResourceSlice of the node's pool (named after the node; ``slice_count`` slices in all,
    one unless GPUs are partitionable).

    ``owner``: the Node object, when known, so the slice is garbage collected with the node.
    ``name``: the slice's name (default ``slice_name``); ``shared_counters``: its counter sets.
    ``devices`` None: a slice of counter sets, without the ``devices`` key (an empty list there is
    a list the API server refuses beside ``sharedCounters``).
    """
    meta: dict[str, Any] = {"name": name or slice_name(node), "labels": {"app.kubernetes.io/managed-by": "gpuchain"}}
    node_uid = (owner or {}).get("metadata", {}).get("uid")
    if node_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
        ]
    spec: dict[str, Any] = {
        "driver": DRIVER,
        "nodeName": node,
        "pool": {"name": node, "generation": generation, "resourceSliceCount": slice_count},
    }
    if devices is not None:
        spec["devices"] = devices
    if shared_counters:
        spec["sharedCounters"] = shared_counters
    return {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": meta, "spec": spec}


def _check_attribute(where: str, name: str, value: Any) -> None:
    if not isinstance(value, dict) or len(value) != 1:
        raise SliceError(f"{where}: attribute {name!r} must have exactly one of string, int, bool, version")
    ((kind, v),) = value.items()
    if kind == "string":
        if not isinstance(v, str) or len(v) > MAX_STRING:
            raise SliceError(f"{where}: attribute {name!r}: strings are at most {MAX_STRING} characters")
    elif kind == "version":
        if not isinstance(v, str) or not _SEMVER.match(v):
            raise SliceError(f"{where}: attribute {name!r}: {v!r} is not a semantic version like 1.2.3")
    elif kind == "int":
        if not isinstance(v, int) or isinstance(v, bool):
            raise SliceError(f"{where}: attribute {name!r}: int value {v!r} is not an integer")
    elif kind == "bool":
        if not isinstance(v, bool):
            raise SliceError(f"{where}: attribute {name!r}: bool value {v!r} is not true/false")
    else:
        raise SliceError(f"{where}: attribute {name!r}: unknown value type {kind!r}")


def check_devices(devices: Iterable[Obj]) -> None:
    """Raise SliceError for anything the API server would reject in ``devices``."""
    seen: set[str] = set()
    count = 0
    for device in devices:
        count += 1
        name = str(device.get("name", ""))
        where = f"device {name!r}"
        if len(name) > 63 or not _DNS_LABEL.match(name):
            raise SliceError(f"{where}: name must be a DNS label (lower-case letters, digits, '-', at most 63)")
        if name in seen:
            raise SliceError(f"{where}: name is used twice in the pool")
        seen.add(name)
        attrs, capacity = device.get("attributes", {}), device.get("capacity", {})
        if len(attrs) + len(capacity) > MAX_ATTRIBUTES_PER_DEVICE:
            raise SliceError(f"{where}: at most {MAX_ATTRIBUTES_PER_DEVICE} attributes and capacities together")
        for key in (*attrs, *capacity):
            if len(key) > MAX_IDENTIFIER or not _IDENTIFIER.match(key):
                raise SliceError(f"{where}: {key!r} must be a C identifier of at most {MAX_IDENTIFIER} characters")
        for key, value in attrs.items():
            _check_attribute(where, key, value)
        for key, value in capacity.items():
            try:
                shares.check_capacity(
                    where, name=key, capacity=value, multiple=device.get("allowMultipleAllocations") is True
                )
            except ValueError as exc:
                raise SliceError(str(exc)) from None
    if count > MAX_DEVICES_PER_SLICE:
        raise SliceError(f"a slice holds at most {MAX_DEVICES_PER_SLICE} devices, this one {count}")


def check_slice(obj: Obj) -> None:
    """Raise SliceError for a ResourceSlice the API server would reject beyond its JSON schema."""
    spec = obj.get("spec", {})
    if spec.get("driver") != DRIVER:
        raise SliceError(f"spec.driver is {spec.get('driver')!r}, expected {DRIVER!r}")
    if int(spec.get("pool", {}).get("generation", 0)) < 1:
        raise SliceError("spec.pool.generation must be at least 1")
    if "sharedCounters" in spec and "devices" in spec:
        raise SliceError("a slice holds counter sets (sharedCounters) or devices, not both (Kubernetes 1.35 and later)")
    if len(spec.get("sharedCounters", [])) > partitions.MAX_COUNTER_SETS_PER_SLICE:
        raise SliceError(f"a slice holds at most {partitions.MAX_COUNTER_SETS_PER_SLICE} counter sets")
    check_devices(devices_of(obj))


def node_devices(
    gpus: Iterable[Gpu], *, unhealthy: Collection[str], partitionable: bool
) -> dict[str, tuple[cdi.CdiDevice, bool]]:
    """Every device of ``gpus`` (published or withdrawn) by DRA name, as Prepare hands it out, with
    its health: a ``partitionable`` GPU's full device and placements (the MIG device is made on
    Prepare), else the whole GPU (MIG off) and its MIG devices."""
    found: dict[str, tuple[cdi.CdiDevice, bool]] = {}
    for gpu in gpus:
        gpu_ok = not withdrawn(gpu, unhealthy)
        model = partitions.partitionable(gpu) if partitionable else None
        if model is not None:
            if partitions.offers_full_gpu(gpu):
                found[gpu_device_name(gpu)] = (
                    cdi.CdiDevice(name=gpu_device_name(gpu), uuid=gpu.uuid, device_node=gpu.device_node),
                    gpu_ok,
                )
            for part in partitions.partitions(gpu, model):
                found[part.name] = (cdi.CdiDevice(name=part.name, uuid="", device_node=gpu.device_node), gpu_ok)
            continue
        if not gpu.mig_enabled:
            found[gpu_device_name(gpu)] = (
                cdi.CdiDevice(name=gpu_device_name(gpu), uuid=gpu.uuid, device_node=gpu.device_node),
                gpu_ok,
            )
        for mig in gpu.mig_devices:
            name = mig_device_name(mig)
            mig_ok = gpu_ok and mig.uuid not in unhealthy
            found[name] = (cdi.CdiDevice(name=name, uuid=mig.uuid, device_node=gpu.device_node), mig_ok)
    return found

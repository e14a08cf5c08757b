"""MIG as partitionable devices (KEP-4815): a GPU, every MIG placement it can hold, and the counters
they share, so the scheduler picks the profile per claim and never books one slice twice.

A partitionable GPU has one counter set (``gpu-<index>-counter-set``) and devices that consume
from it: the full GPU consumes all of it, each placement (a GPU-instance profile at one start slot,
from the catalog's MIG table) consumes its own memory slices, compute slices, SMs, engines and
memory. Two devices whose memory slices overlap cannot both be allocated (each memory slice is a
counter of 1), nor can the full GPU and any placement, nor combinations that need more compute
slices or media engines than the GPU has.

Counter and device names follow NVIDIA's DRA driver (``cmd/gpu-kubelet-plugin/partitions.go``,
``mig.go`` in NVIDIA/k8s-dra-driver-gpu): counters ``multiprocessors``, ``copy-engines``,
``decoders``, ``encoders``, ``jpeg-engines``, ``ofa-engines``, ``memory`` (the largest value any
profile has, as NVIDIA derives the GPU's set) and ``memory-slice-<i>``; devices
``gpu-<index>-mig-<profile>-<profile id>-<start>``. gpuchain adds ``compute-slices``, the rule its
catalog checks layouts with. The profile id here is the NVML_GPU_INSTANCE_PROFILE_* constant of the
catalog (NVIDIA's driver puts the id `nvidia-smi mig -lgip` prints there, which the catalog does not
hold); either way the name is stable and says profile and placement.

Which GPUs: those the catalog has a MIG table for, while their MIG mode is on or can be switched
without a GPU reset (Hopper and later, as NVIDIA's driver decides with ``supportsMIGModeToggle``).
The full GPU is offered while MIG mode is off or can be switched off without a reset; Prepare
switches the mode as the device needs it.

Kubernetes 1.35 and later (``pkg/apis/resource/validation`` of 1.37) want the counter sets in
ResourceSlices of their own ("only one of `sharedCounters` or `devices` is allowed"), at most 8
sets of at most 32 counters per slice, and the devices that consume them in other slices of the
same pool, at most 64 per slice where devices consume counters or carry taints. ``slices.pool_slices``
lays the pool out that way: the counter sets together, each GPU's devices in a slice of their own.
The 1.34 layout (counter set and devices in one slice, which 1.34 requires and 1.35 refuses) is not
written: 1.34 served partitionable devices only behind an alpha gate, and its API server refuses
these device slices, so the driver publishes the GPUs there without partitions (``DraDriver``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuchain.gpu import catalog
from gpuchain.gpu.catalog import GpuModel, MigProfile
from gpuchain.gpu.model import Gpu
from gpuchain.kube.objects import Obj

MAX_COUNTER_SETS_PER_SLICE = 8
"""Counter sets in one slice (``ResourceSliceMaxCounterSets``)."""
MAX_COUNTERS_PER_SET = 32
"""Counters in one counter set, and in one device's use of a set (``ResourceSliceMaxCountersPerCounterSet``,
``ResourceSliceMaxCountersPerDeviceCounterConsumption``)."""
MAX_DEVICES_WITH_COUNTERS = 64
"""Devices in one slice once any consumes counters (``ResourceSliceMaxDevicesWithAdvancedFeatures``)."""

ENGINE_CAPACITIES = ("copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines")
"""A placement's engine capacities, in ``MigProfile.engines`` order (NVIDIA's capacity names)."""


def toggles_without_reset(gpu: Gpu) -> bool:
    """Whether the GPU switches MIG mode without a reset: Hopper (compute capability 9) and later."""
    return gpu.compute_capability[0] >= 9


def mig_model(gpu: Gpu) -> GpuModel | None:
    """The catalog model whose MIG table this GPU's placements come from; None when it has none."""
    found = catalog.model_for_name(gpu.name, gpu.pci_device_id)
    return found if found is not None and found.mig_capable else None


def partitionable(gpu: Gpu) -> GpuModel | None:
    """The GPU's MIG model when it is published as partitionable now (see the module doc), else None."""
    found = mig_model(gpu)
    if found is None or gpu.vgpu or not (gpu.mig_enabled or toggles_without_reset(gpu)):
        return None
    return found


def offers_full_gpu(gpu: Gpu) -> bool:
    """Whether the whole GPU is offered beside its placements (MIG mode off, or off without a reset)."""
    return not gpu.mig_enabled or toggles_without_reset(gpu)


def counter_set_name(gpu: Gpu) -> str:
    """``gpu-<index>-counter-set``: the one counter set of a partitionable GPU."""
    return f"gpu-{gpu.index}-counter-set"


def memory_slice_counter(i: int) -> str:
    """``memory-slice-<i>``: one memory slice, a counter of 1."""
    return f"memory-slice-{i}"


def _dns_name(capacity: str) -> str:
    """A capacity name as a counter name (``copyEngines`` -> ``copy-engines``), as NVIDIA derives them."""
    return re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", capacity).lower()


def _profile_sizes(profile: MigProfile) -> dict[str, int]:
    """What one GPU instance of ``profile`` takes, by capacity name (memory in MiB)."""
    sizes = {"multiprocessors": profile.multiprocessors, "memory": profile.memory_mib}
    sizes.update(zip(ENGINE_CAPACITIES, profile.engines, strict=True))
    return sizes


def _quantity(capacity: str, value: int) -> str:
    return f"{value}Mi" if capacity == "memory" else str(value)


def _counters(sizes: dict[str, int], compute_slices: int, first_slice: int, memory_slices: int) -> dict[str, Obj]:
    counters = {_dns_name(k): {"value": _quantity(k, v)} for k, v in sizes.items()}
    counters["compute-slices"] = {"value": str(compute_slices)}
    for i in range(first_slice, first_slice + memory_slices):
        counters[memory_slice_counter(i)] = {"value": "1"}
    return counters


def gpu_counters(model: GpuModel) -> dict[str, Obj]:
    """The GPU's counter set: per capacity the largest any profile takes, every compute and memory slice.

    Memory is at least what any profile's memory per slice comes to over all memory slices: some
    catalog figures are derived from the profile's name (B200's ``7g.180gb`` as 180000 MiB, below
    four ``1g.45gb`` of 45312), and the memory counter must not refuse a layout the memory slices
    allow."""
    sizes: dict[str, int] = {}
    for profile in model.mig_profiles:
        for k, v in _profile_sizes(profile).items():
            sizes[k] = max(sizes.get(k, 0), v)
        per_slice = -(-profile.memory_mib * model.memory_slices // profile.memory_slices)
        sizes["memory"] = max(sizes["memory"], per_slice)
    return _counters(sizes, model.compute_slices, 0, model.memory_slices)


@dataclass(frozen=True)
class Partition:
    """One placement of a GPU-instance profile on one GPU: what a MIG device claim gets created as."""

    gpu: Gpu
    profile: MigProfile
    start: int

    @property
    def name(self) -> str:
        """``gpu-<index>-mig-<profile>-<profile id>-<start>`` (``gpu-0-mig-1g10gb-me-7-3``)."""
        slug = re.sub(r"[^a-z0-9]+", "-", self.profile.name.lower().replace(".", "")).strip("-")
        return f"gpu-{self.gpu.index}-mig-{slug}-{self.profile.nvml_gi_profile_id}-{self.start}"

    @property
    def memory_slices(self) -> range:
        """The memory slices this placement occupies."""
        return range(self.start, self.start + self.profile.memory_slices)

    def counters(self) -> dict[str, Obj]:
        """What allocating this placement takes from its GPU's counter set."""
        return _counters(_profile_sizes(self.profile), self.profile.gi_slices, self.start, self.profile.memory_slices)


def partitions(gpu: Gpu, model: GpuModel) -> list[Partition]:
    """Every placement the GPU's MIG table allows: each profile at each of its legal start slots."""
    return [
        Partition(gpu, profile, start)
        for profile in model.mig_profiles
        for start in profile.starts
        if start + profile.memory_slices <= model.memory_slices
    ]


def partition_device(part: Partition, attributes: dict[str, Obj]) -> Obj:
    """The DRA device of one placement: its parent's attributes (``attributes``), its profile, its
    capacities, and what it consumes."""
    capacity = {k: {"value": _quantity(k, v)} for k, v in _profile_sizes(part.profile).items()}
    return {
        "name": part.name,
        "attributes": {
            **attributes,
            "type": {"string": "mig"},
            "migProfile": {"string": part.profile.name},
            "parentUUID": {"string": part.gpu.uuid},
            "memorySliceStart": {"int": part.start},
        },
        "capacity": capacity,
        "consumesCounters": [{"counterSet": counter_set_name(part.gpu), "counters": part.counters()}],
    }


@dataclass(frozen=True)
class GpuSlice:
    """One partitionable GPU: its counter set and the devices that consume it."""

    gpu: Gpu
    counter_set: Obj
    devices: list[Obj]


def gpu_slice(
    gpu: Gpu,
    *,
    model: GpuModel,
    whole: Obj,
    withdrawn: bool = False,
    taints: list[Obj] | None = None,
) -> GpuSlice:
    """The counter set and devices of one partitionable GPU, in a stable order: the full GPU first
    (when offered), then every placement in catalog order.

    ``whole`` is the whole GPU as the plain slice renders it (``slices.gpu_device``); placements
    take its attributes. Health goes by the GPU, for all its devices alike: ``withdrawn`` leaves
    them out; ``taints`` (where the cluster serves device taints) is put on each, an empty list
    included, so a taint that went is a change.
    """
    counters = gpu_counters(model)
    devices: list[Obj] = []
    if offers_full_gpu(gpu):
        devices.append({**whole, "consumesCounters": [{"counterSet": counter_set_name(gpu), "counters": counters}]})
    parent = {k: v for k, v in whole["attributes"].items() if k not in ("type", "uuid", "migCapable")}
    devices.extend(partition_device(p, parent) for p in partitions(gpu, model))
    if withdrawn:
        devices = []
    elif taints is not None:
        devices = [{**d, "taints": list(taints)} for d in devices]
    return GpuSlice(gpu, {"name": counter_set_name(gpu), "counters": counters}, devices)


def check_gpu_slice(part: GpuSlice) -> None:
    """Raise ValueError for a GPU the API server would refuse: too many counters in its set or in a
    device's use of it, too many devices for one slice, or a device consuming a counter its set does
    not have (the scheduler would then find the pool invalid)."""
    have = part.counter_set["counters"]
    if len(have) > MAX_COUNTERS_PER_SET:
        raise ValueError(f"GPU {part.gpu.index}: {len(have)} counters in its set, a set holds {MAX_COUNTERS_PER_SET}")
    if len(part.devices) > MAX_DEVICES_WITH_COUNTERS:
        raise ValueError(
            f"GPU {part.gpu.index}: {len(part.devices)} devices, a slice holds {MAX_DEVICES_WITH_COUNTERS}"
        )
    for device in part.devices:
        for use in device.get("consumesCounters", []):
            if use["counterSet"] != part.counter_set["name"] or not set(use["counters"]) <= set(have):
                raise ValueError(f"device {device['name']}: consumes counters its GPU's counter set does not have")

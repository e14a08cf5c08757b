"""The hardware view shared by every layer: plain, frozen data about GPUs on one node.

Both backends (simulated and NVML) answer with these types, so everything above the GPU layer
is written once and tested on the simulator, and the backend parity tests can compare the two
with ``==``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import asdict, dataclass, field
from typing import Any


class TopologyLevel(enum.IntEnum):
    """Closest common ancestor of two GPUs on the PCIe tree, as NVML's nvmlGpuTopologyLevel_t.

    Lower is closer. The numeric values are NVML's, so the NVML backend passes them through.
    """

    INTERNAL = 0
    SINGLE = 10
    MULTIPLE = 20
    HOSTBRIDGE = 30
    NODE = 40
    SYSTEM = 50

    @property
    def short(self) -> str:
        """The abbreviation `nvidia-smi topo -m` prints (PIX, PXB, PHB, NODE, SYS)."""
        return _TOPO_SHORT[self]


_TOPO_SHORT = {
    TopologyLevel.INTERNAL: "X",
    TopologyLevel.SINGLE: "PIX",
    TopologyLevel.MULTIPLE: "PXB",
    TopologyLevel.HOSTBRIDGE: "PHB",
    TopologyLevel.NODE: "NODE",
    TopologyLevel.SYSTEM: "SYS",
}


@dataclass(frozen=True)
class DriverInfo:
    """Kernel driver version ("570.86.15") and the CUDA driver API version it supports ("12.8")."""

    version: str
    cuda_version: str

    @property
    def cuda_major_minor(self) -> tuple[int, int]:
        major, _, minor = self.cuda_version.partition(".")
        return int(major), int(minor or 0)


_DEVICE_PROFILE = re.compile(r"(?:(\d+)c\.)?(\d+)g\.")
"""The slice counts at the head of a MIG device's profile name: ``1c.3g.40gb``, ``3g.40gb``."""


@dataclass(frozen=True, kw_only=True)
class MigDevice:
    """One MIG device (a compute instance of a GPU instance) carved out of a parent GPU.

    ``profile`` is the device's name as NVIDIA prints it: the GPU instance's profile for its one
    full-size compute instance (``3g.40gb``), ``<c>c.`` before it for a smaller one
    (``1c.3g.40gb``). Such devices share their GPU instance's memory (``memory_mib``) and
    have the compute instance's own multiprocessors.
    """

    uuid: str
    parent_index: int
    parent_uuid: str
    index: int
    profile: str
    gi_id: int
    ci_id: int
    memory_mib: int
    multiprocessors: int

    @property
    def gi_slices(self) -> int:
        """Compute slices of the GPU instance: the ``3`` of ``3g.40gb`` and ``1c.3g.40gb``."""
        return int(self._slices().group(2))

    @property
    def ci_slices(self) -> int:
        """Compute slices of the compute instance: the ``1`` of ``1c.3g.40gb``, all of ``3g.40gb``."""
        ci = self._slices().group(1)
        return int(ci) if ci else self.gi_slices

    def _slices(self) -> re.Match[str]:
        found = _DEVICE_PROFILE.match(self.profile)
        if found is None:
            raise ValueError(f"MIG device {self.uuid}: {self.profile!r} is not a MIG profile name")
        return found


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """One physical GPU. ``mig_devices`` is empty unless MIG mode is enabled."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    pci_device_id: int
    memory_mib: int
    compute_capability: tuple[int, int]
    numa_node: int | None
    multiprocessors: int
    mig_capable: bool
    mig_enabled: bool
    mig_devices: tuple[MigDevice, ...] = ()
    minor_number: int = 0
    pci_class: int | None = None
    """The 24-bit PCI class code as sysfs spells it (0x030200: 3D controller, 0x030000: VGA).

    NVML does not report it; the NVML backend reads it from sysfs and leaves None when it cannot.
    Feature discovery derives ``nvidia.com/gpu.mode`` from it, as NVIDIA's GFD does.
    """
    vgpu: bool = False
    """A vGPU inside a virtual machine (NVML's virtualization mode VGPU); False on bare metal and
    for a GPU passed through whole. Feature discovery labels ``nvidia.com/vgpu.present`` from it:
    NVIDIA's GFD reads the same fact from the vGPU capability in the device's PCI config space.
    """

    @property
    def device_node(self) -> str:
        """The character device the container runtime exposes for this GPU."""
        return f"/dev/nvidia{self.minor_number}"


@dataclass(frozen=True, kw_only=True)
class MigMemory:
    """Framebuffer of one MIG device (its GPU instance's memory), in MiB.

    The parent GPU's memory reading covers every GPU instance at once, so a pod on one MIG
    device needs this per-device figure (NVML answers it on the MIG device handle).
    """

    uuid: str
    total_mib: int
    used_mib: int
    free_mib: int


@dataclass(frozen=True, kw_only=True)
class GpuLink:
    """How two GPUs reach each other: PCIe common ancestor and NVLink lanes (0 when none)."""

    a: int
    b: int
    level: TopologyLevel
    nvlinks: int = 0


@dataclass(frozen=True)
class Inventory:
    """Everything a node's GPUs look like at one moment. Equal inventories mean equal nodes."""

    driver: DriverInfo
    gpus: tuple[Gpu, ...]
    links: tuple[GpuLink, ...] = ()

    def gpu(self, key: int | str) -> Gpu:
        """Look a GPU up by index or UUID; raises KeyError naming the key."""
        for gpu in self.gpus:
            if key in (gpu.index, gpu.uuid):
                return gpu
        raise KeyError(f"no GPU {key!r} on this node")

    @property
    def mig_devices(self) -> tuple[MigDevice, ...]:
        return tuple(m for g in self.gpus for m in g.mig_devices)

    def link(self, a: int, b: int) -> GpuLink | None:
        """The link between two GPU indexes, in either order."""
        lo, hi = sorted((a, b))
        for link in self.links:
            if (link.a, link.b) == (lo, hi):
                return link
        return None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for link in data["links"]:
            link["level"] = TopologyLevel(link["level"]).short
        return data


class EventKind(enum.StrEnum):
    """What happened to a device."""

    XID = "xid"
    GPU_LOST = "gpu-lost"
    GPU_RECOVERED = "gpu-recovered"


@dataclass(frozen=True, kw_only=True)
class HealthEvent:
    """A health change reported by a backend. ``mig_uuid`` narrows an XID to one MIG device."""

    kind: EventKind
    gpu_uuid: str
    xid: int | None = None
    mig_uuid: str | None = None
    message: str = ""
    timestamp: float = field(default=0.0, compare=False)


@dataclass(frozen=True, kw_only=True)
class Telemetry:
    """Instantaneous readings for one GPU, in the units dcgm-exporter publishes.

    A field is None when the device does not support the reading.
    """

    uuid: str
    gpu_util: int | None = None
    mem_copy_util: int | None = None
    enc_util: int | None = None
    dec_util: int | None = None
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    memory_reserved_mib: int | None = None
    temperature_c: int | None = None
    memory_temperature_c: int | None = None
    power_w: float | None = None
    energy_mj: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    pcie_replay: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    row_remap_failure: int | None = None
    row_remap_pending: int | None = None
    """1 while a remapped row waits for a GPU reset to take effect (NVML ``isPending``)."""

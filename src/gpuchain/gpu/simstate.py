"""The state of one simulated GPU and its MIG layout, as `SimBackend` keeps it.

The MIG rules live here, apart from the backend's locking and events: GPU instances placed only
where the card allows (legal starts, no overlap, per-profile and compute-slice limits, one +me
instance), compute instances inside them, and the MIG devices derived from both as NVML lists
them. Every function takes the GPU's state and changes only it; the backend calls them under its lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuchain.gpu import catalog
from gpuchain.gpu.errors import InvalidConfigError, NotFoundError
from gpuchain.gpu.model import Gpu, MigDevice
from gpuchain.gpu.processes import GpuProcess
from gpuchain.gpu.topology import SimGpuSpec, stable_uuid

PCI_CLASS_3D_CONTROLLER = 0x030200
"""Every catalogued card is a data-centre GPU, which enumerates as a 3D controller (no display)."""


@dataclass
class GiState:
    """One GPU instance: its profile, first memory slice and compute instances."""

    profile: catalog.MigProfile
    start: int
    compute_instances: dict[int, tuple[int, int]] = field(default_factory=dict)
    """ci_id -> (first compute slice, compute slices)."""

    def add_compute_instance(self, slices: int, where: str) -> int:
        """Put a compute instance of ``slices`` at the first legal start no other one covers, as
        NVML does when asked without a placement; refuse what the GPU instance does not offer."""
        gi_slices = self.profile.gi_slices
        starts = catalog.compute_starts(slices, gi_slices)
        if not starts:
            raise InvalidConfigError(
                f"{where}: a {self.profile.name} GPU instance has no {slices}-slice compute instance"
            )
        used = [(start, n) for start, n in self.compute_instances.values()]
        free = [s for s in starts if not any(s < u + n and u < s + slices for u, n in used)]
        if not free:
            raise InvalidConfigError(f"{where}: no room for another {slices}-slice compute instance")
        ci_id = next(i for i in range(8) if i not in self.compute_instances)
        self.compute_instances[ci_id] = (free[0], slices)
        return ci_id


@dataclass(kw_only=True)
class GpuState:
    """One simulated GPU as the driver holds it: lost or not, MIG mode and layout, readings set by
    tests, processes, and the failures a test asked for."""

    spec: SimGpuSpec
    lost: bool = False
    mig_enabled: bool = False
    mig_pending: bool = False
    mig_devices: list[MigDevice] = field(default_factory=list)
    instances: dict[int, GiState] = field(default_factory=dict)
    telemetry: dict[str, Any] = field(default_factory=dict)
    mig_used_mib: dict[str, int] = field(default_factory=dict)
    """MIG device UUID -> framebuffer used (MiB); a device not listed uses none."""
    processes: dict[int, GpuProcess] = field(default_factory=dict)
    """PID -> a process running on this GPU or one of its MIG devices (``run_process``)."""
    reset_failures: int = 0
    """How many coming resets fail (-1: every one), set by ``fail_reset``."""
    reset_failure: str = ""
    """What a failing reset says (nvidia-smi's words); empty: a generic failure."""
    burn_in_failures: dict[str, int] = field(default_factory=dict)
    """Burn-in check name -> how many coming burn-ins it fails (-1: every one), set by ``fail_burn_in``."""


def carve(state: GpuState, layout: dict[str, int]) -> None:
    """Lay out a whole GPU at once: GPU instances in start order, each with its compute
    instances (one full-size one unless the layout splits it)."""
    for placement in catalog.place_layout(state.spec.model, layout):
        gi_id = add_gpu_instance(state, prof=placement.profile, start=placement.start)
        gi = state.instances[gi_id]
        for slices in placement.compute or (placement.profile.gi_slices,):
            gi.add_compute_instance(slices, f"GPU {state.spec.index} GPU instance {gi_id}")
    refresh_mig_devices(state)


def add_gpu_instance(state: GpuState, *, prof: catalog.MigProfile, start: int) -> int:
    """Add a GPU instance of ``prof`` at slice ``start``, refusing exactly what the hardware refuses
    (an illegal start, overlap, per-profile and compute-slice limits, a second +me instance)."""
    where = f"GPU {state.spec.index} ({state.spec.model.key})"
    if start not in prof.starts:
        starts = ", ".join(map(str, prof.starts))
        raise InvalidConfigError(f"{where}: {prof.name} cannot start at slice {start}; legal starts: {starts}")
    used = {s for gi in state.instances.values() for s in range(gi.start, gi.start + gi.profile.memory_slices)}
    span = set(range(start, start + prof.memory_slices))
    if span & used or max(span) >= state.spec.model.memory_slices:
        raise InvalidConfigError(f"{where}: {prof.name} at slice {start} overlaps an existing GPU instance")
    same = sum(1 for gi in state.instances.values() if gi.profile.name == prof.name)
    if same >= prof.max_instances:
        raise InvalidConfigError(f"{where}: at most {prof.max_instances} x {prof.name} per GPU")
    taken = sum(gi.profile.gi_slices for gi in state.instances.values())
    if taken + prof.gi_slices > state.spec.model.compute_slices:
        raise InvalidConfigError(f"{where}: not enough compute slices left for {prof.name}")
    if prof.media_extensions and any(gi.profile.media_extensions for gi in state.instances.values()):
        raise InvalidConfigError(f"{where}: at most one +me GPU instance per GPU")
    gi_id = next(i for i in range(1, 16) if i not in state.instances)
    state.instances[gi_id] = GiState(prof, start)
    refresh_mig_devices(state)
    return gi_id


def refresh_mig_devices(state: GpuState) -> None:
    """Derive the MIG devices (one per compute instance) from the GPU instances.

    A compute instance smaller than its GPU instance is named ``<c>c.<profile>`` and has the
    GPU instance's memory and its share of the multiprocessors (``c/g`` of them, rounded
    down: the rule of NVIDIA's go-nvml A100 mock, 14 per slice; derived for other cards).
    """
    spec = state.spec
    devices: list[MigDevice] = []
    for gi_id, gi in sorted(state.instances.items()):
        full = gi.profile.gi_slices
        for ci_id, (_, slices) in sorted(gi.compute_instances.items()):
            name = gi.profile.name if slices == full else catalog.device_profile(gi.profile.name, slices)
            devices.append(
                MigDevice(
                    uuid=stable_uuid("MIG", f"{spec.uuid}/{gi_id}/{ci_id}/{name}/{gi.start}"),
                    parent_index=spec.index,
                    parent_uuid=spec.uuid,
                    index=len(devices),
                    profile=name,
                    gi_id=gi_id,
                    ci_id=ci_id,
                    memory_mib=gi.profile.memory_mib,
                    multiprocessors=gi.profile.multiprocessors * slices // full,
                )
            )
    state.mig_devices = devices
    live = {d.uuid for d in devices}
    state.mig_used_mib = {u: n for u, n in state.mig_used_mib.items() if u in live}


def gpu_instance(state: GpuState, gi_id: int) -> GiState:
    """The GPU instance ``gi_id`` of this GPU, or NotFoundError."""
    try:
        return state.instances[gi_id]
    except KeyError:
        raise NotFoundError(f"GPU {state.spec.index} has no GPU instance {gi_id}") from None


def gpu_of(state: GpuState) -> Gpu:
    """The GPU as the inventory reports it, from its state."""
    spec = state.spec
    return Gpu(
        index=spec.index,
        uuid=spec.uuid,
        name=spec.model.name,
        pci_bus_id=spec.pci_bus_id,
        pci_device_id=spec.model.pci_device_id,
        memory_mib=spec.model.memory_mib,
        compute_capability=spec.model.compute_capability,
        numa_node=spec.numa_node,
        multiprocessors=spec.model.multiprocessors,
        mig_capable=spec.model.mig_capable,
        mig_enabled=state.mig_enabled,
        mig_devices=tuple(state.mig_devices),
        minor_number=spec.index,
        pci_class=PCI_CLASS_3D_CONTROLLER,
    )

"""A simulated node's GPUs: the embedded default behind every command and most tests.

Built from a topology (preset or file). Faults are injected through methods (an XID on a GPU
or a MIG device, a GPU falling off the bus, its return) and reach every subscriber of
``events()`` at once, from any thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from gpuchain.gpu import catalog
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import GpuLostError, NotFoundError
from gpuchain.gpu.model import (
    EventKind,
    Gpu,
    HealthEvent,
    Inventory,
    MigDevice,
    Telemetry,
)
from gpuchain.gpu.topology import SimGpuSpec, Topology, load_preset, stable_uuid

XID_GPU_FALLEN_OFF_BUS = 79

Listener = Callable[[HealthEvent], None]


@dataclass
class _GpuState:
    spec: SimGpuSpec
    lost: bool = False
    mig_enabled: bool = False
    mig_devices: list[MigDevice] = field(default_factory=list)
    telemetry: dict[str, Any] = field(default_factory=dict)


class SimBackend(GpuBackend):
    """GPUs that exist only in memory, answering exactly as the NVML backend would."""

    name = "sim"

    def __init__(self, topology: Topology, clock: Callable[[], float] = time.monotonic) -> None:
        self.topology = topology
        self._clock = clock
        self._started = clock()
        self._lock = threading.RLock()
        self._listeners: list[Listener] = []
        self._driver = topology.driver_info()
        self._links = topology.gpu_links()
        self._gpus = [_GpuState(spec) for spec in topology.expanded()]
        for state in self._gpus:
            if state.spec.mig is not None:
                state.mig_enabled = True
                state.mig_devices = self._carve(state.spec, state.spec.mig)

    @classmethod
    def from_preset(cls, name: str, node: str | None = None) -> SimBackend:
        return cls(load_preset(name, node))

    # ---- GpuBackend ---------------------------------------------------------------------------

    def inventory(self) -> Inventory:
        with self._lock:
            gpus = tuple(self._gpu(s) for s in self._gpus if not s.lost)
        return Inventory(self._driver, gpus, self._links)

    def telemetry(self, gpu_uuid: str) -> Telemetry:
        with self._lock:
            state = self._state(gpu_uuid)
            if state.lost:
                raise GpuLostError(f"GPU {state.spec.uuid} is lost (fell off the bus); reset or reboot the node")
            spec = state.spec
            util = int(state.telemetry.get("gpu_util", 0))
            used = int(state.telemetry.get("memory_used_mib", 0))
            reserved = spec.model.memory_mib // 100
            power = 70.0 + util * 6.3
            elapsed = self._clock() - self._started
            base: dict[str, Any] = {
                "gpu_util": util,
                "mem_copy_util": util // 2,
                "enc_util": 0,
                "dec_util": 0,
                "memory_used_mib": used,
                "memory_free_mib": spec.model.memory_mib - reserved - used,
                "memory_reserved_mib": reserved,
                "temperature_c": 32 + util // 3,
                "memory_temperature_c": 38 + util // 4,
                "power_w": power,
                "energy_mj": int(power * elapsed * 1000),
                "sm_clock_mhz": 1980 if util else 345,
                "mem_clock_mhz": 2619,
                "pcie_replay": 0,
                "remapped_rows_correctable": 0,
                "remapped_rows_uncorrectable": 0,
                "row_remap_failure": 0,
            }
            base.update(state.telemetry)
        return Telemetry(uuid=spec.uuid, **base)

    async def events(self) -> AsyncIterator[HealthEvent]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[HealthEvent] = asyncio.Queue()

        def deliver(event: HealthEvent) -> None:
            try:
                same_loop = asyncio.get_running_loop() is loop
            except RuntimeError:
                same_loop = False
            if same_loop:
                queue.put_nowait(event)
            else:
                loop.call_soon_threadsafe(queue.put_nowait, event)

        self.add_listener(deliver)
        try:
            while True:
                yield await queue.get()
        finally:
            self.remove_listener(deliver)

    # ---- fault injection ----------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` synchronously, on the injecting thread, for every event."""
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def inject_xid(self, device: int | str, xid: int, message: str = "") -> HealthEvent:
        """Raise XID ``xid`` on a GPU (index or UUID) or on one MIG device (its UUID)."""
        with self._lock:
            state, mig = self._resolve(device, include_lost=True)
            event = HealthEvent(
                EventKind.XID,
                state.spec.uuid,
                xid=xid,
                mig_uuid=mig.uuid if mig else None,
                message=message or f"XID {xid}",
                timestamp=time.time(),
            )
        self._publish(event)
        return event

    def lose_gpu(self, device: int | str) -> list[HealthEvent]:
        """The GPU falls off the bus: XID 79, then it stops answering (left out of inventory)."""
        with self._lock:
            state, _ = self._resolve(device)
            state.lost = True
        xid = self.inject_xid(state.spec.uuid, XID_GPU_FALLEN_OFF_BUS, "GPU has fallen off the bus")
        lost = HealthEvent(EventKind.GPU_LOST, state.spec.uuid, message="GPU is lost", timestamp=time.time())
        self._publish(lost)
        return [xid, lost]

    def recover_gpu(self, device: int | str) -> HealthEvent:
        """The GPU answers again (after a reset)."""
        with self._lock:
            state, _ = self._resolve(device, include_lost=True)
            state.lost = False
        event = HealthEvent(
            EventKind.GPU_RECOVERED, state.spec.uuid, message="GPU answers again", timestamp=time.time()
        )
        self._publish(event)
        return event

    def set_telemetry(self, device: int | str, **readings: Any) -> None:
        """Override readings of one GPU (``gpu_util=90``, ``memory_used_mib=4000`` …)."""
        unknown = set(readings) - set(Telemetry.__dataclass_fields__) - {"uuid"}
        if unknown:
            raise ValueError(f"unknown telemetry fields: {', '.join(sorted(unknown))}")
        with self._lock:
            state, _ = self._resolve(device, include_lost=True)
            state.telemetry.update(readings)

    # ---- MIG state (the MIG manager drives these) --------------------------------------------

    def set_mig_layout(self, gpu_index: int, layout: dict[str, int] | None) -> None:
        """Enable MIG with ``layout`` on one GPU, or disable MIG with ``None``."""
        with self._lock:
            state, _ = self._resolve(gpu_index)
            if layout is None:
                state.mig_enabled = False
                state.mig_devices = []
            else:
                state.mig_enabled = True
                state.mig_devices = self._carve(state.spec, layout)

    # ---- internals ---------------------------------------------------------------------------

    def _publish(self, event: HealthEvent) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(event)

    def _carve(self, spec: SimGpuSpec, layout: dict[str, int]) -> list[MigDevice]:
        placements = catalog.place_layout(spec.model, layout)
        devices = []
        for i, placement in enumerate(placements):
            gi_id = i + 1
            devices.append(
                MigDevice(
                    uuid=stable_uuid("MIG", f"{spec.uuid}/{gi_id}/0/{placement.profile.name}/{placement.start}"),
                    parent_index=spec.index,
                    parent_uuid=spec.uuid,
                    index=i,
                    profile=placement.profile.name,
                    gi_id=gi_id,
                    ci_id=0,
                    memory_mib=placement.profile.memory_mib,
                    multiprocessors=placement.profile.multiprocessors,
                )
            )
        return devices

    def _gpu(self, state: _GpuState) -> Gpu:
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
        )

    def _state(self, gpu_uuid: str) -> _GpuState:
        for state in self._gpus:
            if state.spec.uuid == gpu_uuid:
                return state
        raise NotFoundError(f"no GPU with UUID {gpu_uuid} on node {self.topology.node}")

    def _resolve(self, device: int | str, include_lost: bool = False) -> tuple[_GpuState, MigDevice | None]:
        for state in self._gpus:
            if device in (state.spec.index, state.spec.uuid):
                if state.lost and not include_lost:
                    raise GpuLostError(f"GPU {state.spec.uuid} is lost")
                return state, None
            for mig in state.mig_devices:
                if device == mig.uuid:
                    return state, mig
        raise NotFoundError(f"no GPU or MIG device {device!r} on node {self.topology.node}")

    def snapshot_gpu(self, device: int | str) -> Gpu:
        """The current model of one GPU, even while it is lost (for tests and the simulator)."""
        with self._lock:
            state, _ = self._resolve(device, include_lost=True)
            return self._gpu(state)

    def is_lost(self, device: int | str) -> bool:
        """Whether a GPU (index or UUID) has fallen off the bus and not come back."""
        with self._lock:
            state, _ = self._resolve(device, include_lost=True)
            return state.lost

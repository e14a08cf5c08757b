"""A simulated node's GPUs seen by one agent process that can let go of NVML (the port's contract).

``ReleasableView`` wraps one ``SimBackend`` (the node's GPUs, shared by every simulated agent) as
one process's handle on it: while released every read raises ``ReleasedError`` and its event
subscriptions deliver nothing, as ``GpuBackend.release`` documents; the node's GPUs themselves
are untouched. It lets the agents' tolerance be tested without the NVML adapter.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from gpuchain.gpu.backend import GpuBackend, GpuInstance, MigMode
from gpuchain.gpu.errors import ReleasedError
from gpuchain.gpu.model import HealthEvent, Inventory, MigMemory, Telemetry
from gpuchain.gpu.probes import HealthReadings
from gpuchain.gpu.processes import GpuProcess
from gpuchain.gpu.sim import SimBackend


class ReleasableView(GpuBackend):
    name = "releasable-sim"

    def __init__(self, sim: SimBackend) -> None:
        self.sim = sim
        self._released = False
        self.reads_while_released = 0

    def _check(self) -> None:
        if self._released:
            self.reads_while_released += 1
            raise ReleasedError(f"{self.name}: NVML is let go for a GPU reset on this node")

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        self._released = True

    def reacquire(self) -> None:
        self._released = False

    def inventory(self) -> Inventory:
        self._check()
        return self.sim.inventory()

    def telemetry(self, gpu_uuid: str) -> Telemetry:
        self._check()
        return self.sim.telemetry(gpu_uuid)

    def processes(self, gpu_uuid: str) -> tuple[GpuProcess, ...]:
        self._check()
        return self.sim.processes(gpu_uuid)

    def health_readings(self, gpu_uuid: str) -> HealthReadings:
        self._check()
        return self.sim.health_readings(gpu_uuid)

    def mig_memory(self, mig_uuid: str) -> MigMemory:
        self._check()
        return self.sim.mig_memory(mig_uuid)

    def mig_mode(self, gpu_index: int) -> MigMode:
        self._check()
        return self.sim.mig_mode(gpu_index)

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> MigMode:
        self._check()
        return self.sim.set_mig_mode(gpu_index, enabled)

    def gpu_instances(self, gpu_index: int) -> tuple[GpuInstance, ...]:
        self._check()
        return self.sim.gpu_instances(gpu_index)

    def create_gpu_instance(self, gpu_index: int, profile: str, start: int) -> int:
        self._check()
        return self.sim.create_gpu_instance(gpu_index, profile=profile, start=start)

    def create_compute_instance(self, gpu_index: int, gi_id: int, slices: int | None = None) -> int:
        self._check()
        return self.sim.create_compute_instance(gpu_index, gi_id=gi_id, slices=slices)

    def destroy_gpu_instance(self, gpu_index: int, gi_id: int) -> None:
        self._check()
        self.sim.destroy_gpu_instance(gpu_index, gi_id)

    def reset_gpu(self, gpu_index: int) -> None:
        self._check()
        self.sim.reset_gpu(gpu_index)

    async def events(self) -> AsyncIterator[HealthEvent]:
        async for event in self.sim.events():
            while self._released:  # nothing is delivered while released; what came meanwhile follows
                await asyncio.sleep(0.01)
            yield event

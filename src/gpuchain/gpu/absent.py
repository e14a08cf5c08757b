"""The GPUs of a node whose driver did not answer: none, for a component told to run on anyway.

NVIDIA's GFD, with ``failOnInitError`` false, swaps its resource manager for a null one when NVML
fails to initialise (``internal/resource/factory.go``, ``null.go`` in NVIDIA/k8s-device-plugin):
no devices, so no GPU labels, and it keeps running. ``NoGpus`` is that null manager behind
gpuchain's one GPU port, so the labelling code needs no second path.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import NotFoundError
from gpuchain.gpu.model import DriverInfo, HealthEvent, Inventory, Telemetry


class NoGpus(GpuBackend):
    """No GPUs and no health events; ``reason`` says why the real backend could not be opened."""

    name = "none"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def inventory(self) -> Inventory:
        return Inventory(driver=DriverInfo(version="", cuda_version=""), gpus=())

    def telemetry(self, gpu_uuid: str) -> Telemetry:
        raise NotFoundError(f"no GPU {gpu_uuid!r}: {self.reason}")

    async def events(self) -> AsyncIterator[HealthEvent]:
        """An endless stream with nothing in it: GPUs that are not there have no health events."""
        nothing: asyncio.Queue[HealthEvent] = asyncio.Queue()
        while True:
            yield await nothing.get()

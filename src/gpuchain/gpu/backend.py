"""The one port every layer uses to see GPUs: ``GpuBackend``.

Two adapters implement it: ``SimBackend`` (topology presets, fault injection) and
``NvmlBackend`` (nvidia-ml-py). Everything above is written against this interface only.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator

from gpuchain.gpu.model import HealthEvent, Inventory, Telemetry


class GpuBackend(abc.ABC):
    """Read-only questions about one node's GPUs, plus a stream of health events."""

    name: str = "abstract"

    @abc.abstractmethod
    def inventory(self) -> Inventory:
        """The GPUs that answer right now (a lost GPU is left out), their MIG devices and links."""

    @abc.abstractmethod
    def telemetry(self, gpu_uuid: str) -> Telemetry:
        """Current readings of one GPU; raises GpuLostError or NotFoundError."""

    @abc.abstractmethod
    def events(self) -> AsyncIterator[HealthEvent]:
        """An endless async stream of health events; each call is an independent subscription."""

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release what the backend holds (NVML shutdown); the default holds nothing."""

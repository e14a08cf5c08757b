"""The real hardware view, through NVML (nvidia-ml-py's ``pynvml``).

``NvmlBackend`` is assembled from one part per job, each a module here:

- ``session``: NVML held, every call and its errors translated, let go of around a GPU reset;
- ``queries``: the inventory (GPUs, MIG devices, NUMA, PCI class, NVLink topology);
- ``telemetry``: readings, processes and health counters per GPU or MIG device;
- ``mig``: MIG mode and GPU/compute instances (the MIG manager's writes);
- ``reset``: the driver's reset of one GPU (the repair loop's);
- ``burnin``: the check of a GPU after its reset;
- ``events``: XID events and lost/recovered GPUs as a stream.

The module is injected (``NvmlBackend(nvml=...)``) so tests drive this exact code through a fake
``pynvml`` built from a simulated topology.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuchain.gpu.burnin import BurnInConfig, ProcessRunner, run_process
from gpuchain.gpu.errors import LibraryNotFoundError
from gpuchain.gpu.nvml.burnin import BurnInChecks
from gpuchain.gpu.nvml.events import EventWatch
from gpuchain.gpu.nvml.mig import MigWrites
from gpuchain.gpu.nvml.queries import SYSFS_PCI
from gpuchain.gpu.nvml.reset import RESET_WAIT_S, Repair

__all__ = ["NvmlBackend"]


def _nvml_module() -> Any:
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a hard dependency
        raise LibraryNotFoundError("the nvidia-ml-py package is not installed: pip install nvidia-ml-py") from exc


class NvmlBackend(EventWatch, Repair, BurnInChecks, MigWrites):
    """GPUs as the NVIDIA driver reports them.

    Reads never change anything; the MIG write methods (used only by the MIG manager) change
    MIG mode and GPU/compute instances through NVML's MIG API. It resets a GPU only when
    ``allow_reset`` is set (the repair loop sets it), with the driver's reset: nvidia-ml-py has no
    reset call, so ``nvidia-smi --gpu-reset -i UUID`` through ``run_command``, which also runs the
    burn-in's child processes (gpu.burnin).

    The driver refuses a reset while any process holds NVML, so the backend can let go of it
    (``release``) and take it back (``reacquire``): every event watcher frees its event set and
    pauses, NVML is shut down as many times as this backend initialised it (NVML counts
    nvmlInit/nvmlShutdown per process), and every NVML call is refused with ReleasedError until
    NVML is initialised again.
    """

    name = "nvml"

    def __init__(
        self,
        nvml: Any = None,
        *,
        probe_interval: float = 5.0,
        sysfs: Path = SYSFS_PCI,
        run_command: ProcessRunner = run_process,
        burn_in_config: BurnInConfig | None = None,
        sleep: Callable[[float], None] = time.sleep,
        reset_wait_s: float = RESET_WAIT_S,
    ) -> None:
        if reset_wait_s < 0:
            raise ValueError(f"reset_wait_s {reset_wait_s}: must be 0 or more seconds")
        module = nvml if nvml is not None else _nvml_module()
        self._probe_interval = probe_interval
        self._sysfs = sysfs
        self._run_command = run_command
        self._sleep = sleep
        self._reset_wait_s = reset_wait_s
        self.burn_in_config = burn_in_config or BurnInConfig()
        self.allow_reset = False
        self._process_reads = {}
        super().__init__(module)

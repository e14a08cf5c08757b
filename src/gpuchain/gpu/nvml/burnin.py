"""The check of a GPU after its reset, before it takes work again (``burn_in``)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from gpuchain.gpu.backend import BurnIn, BurnInCheck
from gpuchain.gpu.burnin import BurnInConfig, ProcessRunner, cuda_checks, dcgm_diag
from gpuchain.gpu.errors import GpuError, NotSupportedError, ReleasedError
from gpuchain.gpu.nvml.session import as_text, nvml_operation
from gpuchain.gpu.nvml.telemetry import TelemetryReads

_LATER = ("cuda", "memory", "dcgm")
"""The burn-in checks that run only once NVML found the GPU sound."""
_FABRIC_STATES = {1: "Not Started", 2: "In Progress", 3: "Completed"}


class BurnInChecks(TelemetryReads):
    """NVML's checks of one GPU, then CUDA's and DCGM's where NVML found it sound."""

    burn_in_config: BurnInConfig
    _run_command: ProcessRunner
    _sleep: Callable[[float], None]

    @nvml_operation
    def burn_in(self, gpu_index: int) -> BurnIn:
        """Check one GPU after its reset before it takes work again.

        NVML first: the GPU answers, its health readings trip no probe a repair is for
        (``gpu.probes.burn_in_verdict``: no row remap failed or pending, no page retirement
        pending; retired pages at DCGM's limit, which no repair lowers, are reported), and on
        Hopper-or-later NVSwitch systems it has rejoined the NVLink fabric (waited for up to
        ``fabric_wait_s``). Then, unless NVML found a fault or the GPU is in MIG mode (CUDA then
        runs only inside MIG devices, which the reset removed), gpuchain's CUDA kernel and memory
        test (gpu.cuda, in a child process) and DCGM's diagnostic where dcgmi is installed
        (gpu.burnin). What cannot run is reported skipped with the reason."""
        from gpuchain.gpu.probes import burn_in_verdict, instant

        n = self._nvml
        config = self.burn_in_config
        checks: list[BurnInCheck] = []
        skipped: dict[str, str] = {}
        try:
            h = self._call(n.nvmlDeviceGetHandleByIndex, gpu_index)
            self._call(n.nvmlDeviceGetMemoryInfo, h)
        except ReleasedError:
            raise  # NVML let go for a reset: no verdict on the GPU
        except GpuError as exc:
            why = "not run: NVML cannot reach the GPU"
            return BurnIn(
                gpu_index=gpu_index,
                checks=(BurnInCheck("nvml", False, str(exc)),),
                skipped=_LATER,
                reasons=dict.fromkeys(_LATER, why),
            )
        checks.append(BurnInCheck("nvml", True))
        readings = self.health_readings(as_text(self._call(n.nvmlDeviceGetUUID, h)))
        tripped = instant(readings)
        for name, supported, probes in (
            ("row-remap", readings.row_remap_failed is not None, ("row-remap-failed", "row-remap-pending")),
            (
                "retired-pages",
                readings.retired_pages_pending is not None or readings.retired_pages is not None,
                ("retired-pages-pending", "retired-pages-limit"),
            ),
        ):
            if not supported:
                skipped[name] = "not supported by this GPU"
                continue
            passed, detail = burn_in_verdict(p for p in probes if p in tripped)
            checks.append(BurnInCheck(name, passed, detail))
        fabric = self._fabric(h, config.fabric_wait_s)
        if isinstance(fabric, str):
            skipped["fabric"] = fabric
        else:
            checks.append(fabric)
        modes = self._optional(n.nvmlDeviceGetMigMode, h)
        if not all(c.passed for c in checks):
            skipped.update(dict.fromkeys(_LATER, "not run: an NVML check failed"))
        elif modes is not None and modes[0] == n.NVML_DEVICE_MIG_ENABLE:
            skipped.update(dict.fromkeys(_LATER, "not run: MIG mode is on, CUDA runs only inside MIG devices"))
        else:
            bus_id = as_text(self._call(n.nvmlDeviceGetPciInfo, h).busId)
            outcome = cuda_checks(bus_id, config=config, run=self._run_command)
            outcome.add(dcgm_diag(gpu_index, config=config, run=self._run_command))
            checks.extend(outcome.checks)
            skipped.update(outcome.skipped)
        return BurnIn(gpu_index=gpu_index, checks=tuple(checks), skipped=tuple(skipped), reasons=skipped)

    def _fabric(self, h: Any, wait_s: float) -> BurnInCheck | str:
        """The GPU's NVLink fabric registration (nvmlDeviceGetGpuFabricInfo, Hopper and later on
        NVSwitch systems): a check, or why there is none. Waits while registration is under way:
        after a reset Fabric Manager has to add the GPU back before peers can reach it."""
        n = self._nvml
        query = getattr(n, "nvmlDeviceGetGpuFabricInfo", None)
        if query is None:
            return "this nvidia-ml-py has no nvmlDeviceGetGpuFabricInfo"
        waited = 0.0
        while True:
            info = n.c_nvmlGpuFabricInfo_t()
            try:
                self._call(query, h, ctypes.byref(info))
            except NotSupportedError:
                return "not an NVSwitch fabric GPU (Hopper or later on NVSwitch)"
            state = int(info.state)
            if state == n.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED:
                return "not an NVSwitch fabric GPU (Hopper or later on NVSwitch)"
            if state == n.NVML_GPU_FABRIC_STATE_COMPLETED:
                if int(info.status) == n.NVML_SUCCESS:
                    return BurnInCheck("fabric", True)
                return BurnInCheck(
                    "fabric", False, f"NVLink fabric registration failed (NVML status {int(info.status)})"
                )
            if waited >= wait_s:
                name = _FABRIC_STATES.get(state, str(state))
                return BurnInCheck("fabric", False, f"NVLink fabric state {name} after {wait_s:g} s")
            step = min(1.0, wait_s - waited)
            self._sleep(step)
            waited += step

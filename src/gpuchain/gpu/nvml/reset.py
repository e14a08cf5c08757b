"""The driver's reset of one GPU (the repair loop's port): planned, retried while in use, NVML let go of."""

from __future__ import annotations

import logging
import re
import subprocess
import time
from collections.abc import Callable
from typing import Any

from gpuchain.gpu.burnin import ProcessRunner
from gpuchain.gpu.errors import GpuError, NotReacquiredError, NotSupportedError
from gpuchain.gpu.nvml.queries import Queries
from gpuchain.gpu.nvml.session import as_pair, as_text, nvml_operation
from gpuchain.gpu.reset import NvLink, ResetPlan, plan_reset

log = logging.getLogger(__name__)

RESET_DEADLINE_S = 120.0
"""How long ``nvidia-smi --gpu-reset`` may take before it is killed and the reset counts as failed."""
RESET_WAIT_S = 30.0
"""How long a reset is retried while nvidia-smi says another client still holds the GPU (the other
agents on the node are letting go of NVML at the same time), before it counts as failed."""
RESET_RETRY_S = 1.0
"""The pause between two ``nvidia-smi --gpu-reset`` attempts while the GPU is in use."""
_IN_USE = re.compile(
    r"In use by another client|is currently in use by another process|"
    r"currently being used by one or more other processes|being used by some other process",
    re.IGNORECASE,
)
"""nvidia-smi's refusals of a reset because a client holds the GPU, exit 255: "GPU 00000000:1A:00.0:
In use by another client" under "The following GPUs could not be reset:" (NVIDIA/mig-parted#181,
NVIDIA/NVSentinel#1690), "GPU 00000000:C1:00.0 is currently in use by another process." from older
drivers (NVIDIA/gpu-operator#118), each followed by "N device(s) ... currently being used by one or
more other processes (e.g., Fabric Manager, ...)"; and older drivers' still "Unable to reset this GPU
because it's being used by some other process (e.g. CUDA application, ...)" (driver 418, quoted in
tests/gpu/test_nvml_release_reset.py)."""
_HOLDERS = re.compile(r"other process(?:es)? \((e\.g\.,?[^)]*)\)")
"""The clients nvidia-smi names in its refusal (the "e.g. ..." list)."""


class Repair(Queries):
    """``reset_gpu`` and ``reset_plan``: only with ``allow_reset``, only where the GPU can be reset alone."""

    allow_reset: bool
    _run_command: ProcessRunner
    _sleep: Callable[[float], None]
    _reset_wait_s: float

    def reset_gpu(self, gpu_index: int) -> None:
        """The driver's reset of one GPU, only with ``allow_reset``, only where it can be reset alone.

        nvidia-ml-py has no reset call, so this runs ``nvidia-smi --gpu-reset -i UUID`` (the UUID,
        which nvidia-smi(1) recommends over the index for consistency). Before that, ``plan_reset``
        (gpu.reset) refuses a GPU whose NVLink peers must be reset with it, with NotSupportedError,
        and the repair loop asks for a reboot instead.

        The driver refuses the reset ("In use by another client") while anything on the node holds
        the GPU, so: persistence mode is turned off (it counts as a client, NVIDIA/NVSentinel#1690),
        this backend lets go of NVML (``release``), and the reset is retried every RESET_RETRY_S
        while nvidia-smi says the GPU is in use (the node's other agents are letting go at the same
        time), for ``reset_wait_s`` at most. Whatever happens, NVML is then taken back
        (``reacquire``, three tries) and persistence mode turned back on. Success is reported to
        every event subscriber as the GPU recovered; a GPU still in use at the deadline raises
        GpuError naming the clients nvidia-smi suspects and what to do.

        If NVML cannot be taken back, NotReacquiredError says so with the reset's outcome, and the
        backend stays released: the caller must retry ``reacquire`` (every reading is refused and
        events are paused until it succeeds). Persistence mode is then owed: the first ``reacquire``
        that succeeds turns it back on.
        """
        if not self.allow_reset:
            super().reset_gpu(gpu_index)
        uuid, persistent = self._prepare_reset(gpu_index)
        if persistent:
            with self._cond:
                self._persistence_owed[uuid] = gpu_index
        self.release()
        failure: BaseException | None = None
        try:
            self._reset_until_free(gpu_index, ["nvidia-smi", "--gpu-reset", "-i", uuid])
        except BaseException as exc:  # NVML is taken back first, whatever stopped the reset
            failure = exc
        else:
            log.info("GPU %d (%s) reset", gpu_index, uuid)
            with self._reset_lock:
                self._reset_log.append(uuid)
        self._take_back(gpu_index, failure)
        if failure is not None:
            raise failure

    @nvml_operation
    def _prepare_reset(self, gpu_index: int) -> tuple[str, bool]:
        """The GPU's UUID once ``plan_reset`` allows the reset, with persistence mode turned off;
        and whether it was on (and so must be turned back on)."""
        n = self._nvml
        h = self._call(n.nvmlDeviceGetHandleByIndex, gpu_index)
        uuid = as_text(self._call(n.nvmlDeviceGetUUID, h))
        plan = self.reset_plan(gpu_index)
        if not plan.allowed:
            raise NotSupportedError(plan.reason)
        log.info("GPU %d (%s): resetting: %s", gpu_index, uuid, plan.reason)
        persistent = self._optional(n.nvmlDeviceGetPersistenceMode, h) == n.NVML_FEATURE_ENABLED
        if persistent:
            try:
                self._call(n.nvmlDeviceSetPersistenceMode, h, n.NVML_FEATURE_DISABLED)
            except GpuError as exc:
                log.warning("GPU %d: could not turn persistence mode off before the reset: %s", gpu_index, exc)
                persistent = False
        return uuid, persistent

    def _reset_until_free(self, gpu_index: int, argv: list[str]) -> None:
        """Run the reset; while nvidia-smi refuses it because the GPU is in use, run it again every
        RESET_RETRY_S until ``reset_wait_s`` has passed. Any other failure ends it at once."""
        command = " ".join(argv)
        started = time.monotonic()
        waited = 0.0
        tries = 0
        while True:
            tries += 1
            try:
                done = self._run_command(argv, RESET_DEADLINE_S)
            except (OSError, subprocess.SubprocessError) as exc:
                raise GpuError(f"GPU {gpu_index}: {command} could not run: {exc}") from None
            if done.returncode == 0:
                return
            said = " ".join((done.stdout + "\n" + done.stderr).split())
            if not _IN_USE.search(said):
                raise GpuError(f"GPU {gpu_index}: {command} failed (exit {done.returncode}): {said[:400]}")
            if max(waited, time.monotonic() - started) >= self._reset_wait_s:
                raise GpuError(_still_in_use(gpu_index, command, done.returncode, said, tries, waited))
            log.info(
                "GPU %d: the driver refuses the reset while the GPU is in use; retrying in %g s",
                gpu_index,
                RESET_RETRY_S,
            )
            self._sleep(RESET_RETRY_S)
            waited += RESET_RETRY_S

    def _take_back(self, gpu_index: int, failure: BaseException | None) -> None:
        """``reacquire`` after a reset, three tries a second apart (the driver may still be bringing
        the GPU back); then NotReacquiredError with the reset's outcome, and the backend stays
        released for its caller to retry."""
        for attempt in range(3):
            try:
                self.reacquire()
                return
            except GpuError as exc:
                if attempt < 2:
                    log.warning("GPU %d: NVML could not be initialised after the reset (%s); retrying", gpu_index, exc)
                    self._sleep(RESET_RETRY_S)
                    continue
                if failure is None:
                    outcome = f"GPU {gpu_index} was reset"
                elif isinstance(failure, GpuError):
                    outcome = str(failure)  # it names the GPU and the command already
                else:
                    outcome = f"GPU {gpu_index}: the reset stopped: {failure!r}"
                raise NotReacquiredError(
                    f"{outcome}; then NVML could not be initialised again after the reset ({exc}): this agent "
                    "stays released and reads nothing (no health readings, no events) until reacquire() "
                    "succeeds; retry reacquire, or restart the agent",
                    failure,
                ) from exc

    @nvml_operation
    def reset_plan(self, gpu_index: int) -> ResetPlan:
        """Whether this GPU can be reset alone, and why (read-only: NVML queries, gpu.reset rules)."""
        n = self._nvml
        h = self._call(n.nvmlDeviceGetHandleByIndex, gpu_index)
        cc = as_pair(self._call(n.nvmlDeviceGetCudaComputeCapability, h))
        return plan_reset(gpu_index, compute_capability=cc, nvlink=self._nvlink(h))

    def _nvlink(self, h: Any) -> NvLink:
        """What the GPU's active NVLinks lead to (an NVSwitch, another GPU, or nothing)."""
        n = self._nvml
        kinds = {self._optional(n.nvmlDeviceGetNvLinkRemoteDeviceType, h, link) for link in self._active_links(h)}
        if n.NVML_NVLINK_DEVICE_TYPE_SWITCH in kinds:
            return NvLink.NVSWITCH
        return NvLink.DIRECT if kinds else NvLink.NONE


def _still_in_use(gpu_index: int, command: str, code: int, said: str, tries: int, waited: float) -> str:
    """The error of a reset the driver still refused at the deadline: nvidia-smi's words, the
    clients it suspects, and what to do about them."""
    refusal = _IN_USE.search(said)
    holders = _HOLDERS.search(said)
    suspects = f" ({holders.group(1)})" if holders else ""
    return (
        f"GPU {gpu_index}: {command} still refused after {tries} tries over {waited:g} s (exit {code}): "
        f"{refusal.group(0) if refusal else said[:200]}; nvidia-smi says one or more other processes use the "
        f"GPU{suspects}. This agent let go of NVML for the reset; find what still holds the GPU "
        "(`fuser -v /dev/nvidia*`: nvidia-persistenced, Fabric Manager, DCGM or dcgm-exporter, a monitoring "
        "agent, a CUDA job, a gpuchain agent that did not let go), stop it and let the repair loop try again, "
        "or reboot the node"
    )

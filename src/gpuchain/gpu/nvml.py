"""The real hardware view, through NVML (nvidia-ml-py's ``pynvml``).

Every NVML error is translated into a typed GpuError whose message says what to check, so no
caller ever sees a ctypes traceback. The module is injected (``NvmlBackend(nvml=...)``) so tests
drive this exact code through a fake ``pynvml`` built from a simulated topology.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import importlib
import logging
import math
import re
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from gpuchain.gpu import catalog
from gpuchain.gpu.backend import BurnIn, BurnInCheck, ComputeInstance, GpuBackend, GpuInstance, MigMode
from gpuchain.gpu.burnin import BurnInConfig, ProcessRunner, cuda_checks, dcgm_diag, run_process
from gpuchain.gpu.errors import (
    DriverNotLoadedError,
    GpuError,
    GpuLostError,
    LibraryNotFoundError,
    NoPermissionError,
    NotFoundError,
    NotReacquiredError,
    NotSupportedError,
    ReleasedError,
)
from gpuchain.gpu.model import (
    DriverInfo,
    EventKind,
    Gpu,
    GpuLink,
    HealthEvent,
    Inventory,
    MigDevice,
    MigMemory,
    Telemetry,
    TopologyLevel,
)
from gpuchain.gpu.probes import Ber, HealthReadings, NvLinkCounters, burn_in_verdict, instant, nvlink5
from gpuchain.gpu.processes import GpuProcess, read_processes
from gpuchain.gpu.reset import NvLink, ResetPlan, plan_reset

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")
MIB = 1024 * 1024
_NO_INSTANCE = 0xFFFFFFFF
_SYSFS_PCI = Path("/sys/bus/pci/devices")
RESET_DEADLINE_S = 120.0
"""How long ``nvidia-smi --gpu-reset`` may take before it is killed and the reset counts as failed."""
_LATER = ("cuda", "memory", "dcgm")
"""The burn-in checks that run only once NVML found the GPU sound."""
_FABRIC_STATES = {1: "Not Started", 2: "In Progress", 3: "Completed"}
_WAIT_MS = 500
"""How long one nvmlEventSetWait blocks: the longest an event watcher takes to see a stop or a release."""
RELEASE_MARGIN_S = 1.0
"""How much longer than one event wait ``release`` waits for the watchers to let go before it shuts
NVML down anyway (a watcher stuck in the driver must not hold up a reset for ever)."""
REARM_WAIT_S = 5.0
"""How long ``reacquire`` waits for the paused watchers to register their GPUs again."""
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


def _nvml_module() -> Any:
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a hard dependency
        raise LibraryNotFoundError("the nvidia-ml-py package is not installed: pip install nvidia-ml-py") from exc


@dataclass(eq=False)
class _Watcher:
    """One ``events()`` subscription's watcher thread, as ``release`` and ``reacquire`` see it."""

    holding: bool = False
    """It may hold NVML resources (an event set, handles): ``release`` waits until it lets go."""
    armed: int | None = None
    """The release epoch in which its GPUs were registered on a live event set (None: not armed).
    ``reacquire`` waits until it is armed in the current epoch: a watcher armed before a release
    that it outlasted (stuck in the driver) still listens on the event set the shutdown freed."""
    done: bool = False
    """The thread has ended (the subscriber closed the stream, or it failed)."""


class _Session(threading.local):
    """The NVML session (release epoch) of the operation running on this thread; None outside one.
    A class attribute, so reading it outside an operation costs no failed attribute lookup."""

    epoch: int | None = None


@dataclass(frozen=True)
class _Armed:
    """What a watcher holds while it listens: the event set and what its answers mean."""

    event_set: Any
    uuid_of: dict[Any, str]
    mig_by_ids: dict[tuple[str, int, int], str]
    uuids: tuple[str, ...]
    epoch: int
    """The release epoch the event set was made in: once the backend's epoch has moved past it, the
    set is stale (freed, or about to be, by the release's nvmlShutdown) and the watcher stops using it."""


def _nvml_operation(fn: Callable[Concatenate[NvmlBackend, P], T]) -> Callable[Concatenate[NvmlBackend, P], T]:
    """Mark a public read or write as one NVML session: if the backend is released part-way through
    (and perhaps reacquired), its next NVML call raises ReleasedError instead of using a handle from
    before the release (a reset GPU has new handles). Nested operations share the outer one's session."""

    @functools.wraps(fn)
    def run(self: NvmlBackend, /, *args: P.args, **kwargs: P.kwargs) -> T:
        local = self._local
        outer = local.epoch
        if outer is None:
            local.epoch = self._epoch
        try:
            return fn(self, *args, **kwargs)
        finally:
            if outer is None:
                local.epoch = None

    return run


class NvmlBackend(GpuBackend):
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
        probe_interval: float = 5.0,
        sysfs: Path = _SYSFS_PCI,
        run_command: ProcessRunner = run_process,
        burn_in_config: BurnInConfig | None = None,
        sleep: Callable[[float], None] = time.sleep,
        reset_wait_s: float = RESET_WAIT_S,
    ) -> None:
        if reset_wait_s < 0:
            raise ValueError(f"reset_wait_s {reset_wait_s}: must be 0 or more seconds")
        self._nvml = nvml if nvml is not None else _nvml_module()
        self._probe_interval = probe_interval
        self._sysfs = sysfs
        self._run_command = run_command
        self._sleep = sleep
        self._reset_wait_s = reset_wait_s
        self.burn_in_config = burn_in_config or BurnInConfig()
        self.allow_reset = False
        self._reset_log: list[str] = []
        self._reset_lock = threading.Lock()
        self._lock = threading.Lock()
        """Guards the release state below (every NVML call takes it twice: a plain lock is cheapest)."""
        self._cond = threading.Condition(self._lock)
        """Watchers, ``release`` and ``reacquire`` wait on it for each other."""
        self._transition = threading.Lock()
        """Serialises release, reacquire and close, so a second caller returns only once the first is done."""
        self._released = False
        self._epoch = 0
        """Counts releases: an operation that began in an earlier epoch must not go on after one."""
        self._torn_down = 0
        """Event sets made in an epoch before this one were freed by an nvmlShutdown (a release's or
        close's): freeing one again would be a double free in libnvidia-ml."""
        self._inits = 0
        """nvmlInit calls of this backend not yet matched by an nvmlShutdown."""
        self._inflight = 0
        self._watchers: list[_Watcher] = []
        self._process_reads: dict[str, int] = {}
        """GPU UUID -> time (microseconds) of its last ``processes`` read, the start of the next SM window."""
        self._persistence_owed: dict[str, int] = {}
        """GPU UUID -> index of each GPU whose persistence mode a reset turned off and that is not yet
        back on (NVML could not be taken back, or the GPU refused): turned on at each ``reacquire``."""
        self._local = _Session()
        self._call(self._nvml.nvmlInit)
        self._inits = 1

    def close(self) -> None:
        """Shut NVML down once for every nvmlInit of this backend (none after ``release``)."""
        with self._transition:
            with self._cond:
                inits, self._inits = self._inits, 0
                if inits:
                    self._torn_down = self._epoch + 1
            self._shutdown(inits, logging.DEBUG)

    def _shutdown(self, times: int, level: int) -> None:
        for _ in range(times):
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                log.log(level, "nvmlShutdown: %s", exc)

    # ---- letting go of the driver around a GPU reset ---------------------------------------------

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Let go of NVML so a GPU on this node can be reset. Idempotent and thread-safe.

        Refuses new NVML calls at once (ReleasedError), then waits, for one event wait plus
        RELEASE_MARGIN_S at most, until every event watcher has freed its event set and paused and
        every NVML call under way has returned; a watcher or call that does not is logged and NVML
        is shut down anyway. Such a watcher (stuck in the driver) counts as not armed: when its call
        returns, even after ``reacquire``, it sees the epoch moved, leaves its event set alone (the
        shutdown freed it) and arms a new one. Returns once this backend's nvmlInit calls are all
        matched by nvmlShutdown. Blocks: call it off an event loop.
        """
        with self._transition:
            with self._cond:
                if self._released:
                    return
                self._released = True
                self._epoch += 1
                self._cond.notify_all()
                deadline = time.monotonic() + _WAIT_MS / 1000 + RELEASE_MARGIN_S
                while True:
                    holding = sum(1 for w in self._watchers if w.holding)
                    if not holding and not self._inflight:
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        log.warning(
                            "releasing NVML: %d event watcher(s) and %d NVML call(s) did not let go within %.1f s; "
                            "shutting NVML down anyway",
                            holding,
                            self._inflight,
                            _WAIT_MS / 1000 + RELEASE_MARGIN_S,
                        )
                        break
                    self._cond.wait(left)
                for w in self._watchers:
                    w.armed = None  # whatever it was armed on is freed by the shutdown below
                inits, self._inits = self._inits, 0
                self._torn_down = self._epoch
            self._shutdown(inits, logging.WARNING)
            log.info("NVML released: no NVML call until it is reacquired")

    def reacquire(self) -> None:
        """Take NVML back after ``release``. Idempotent and thread-safe.

        Initialises NVML; if that fails, raises the translated GpuError and stays released (the
        caller retries). Then every paused event watcher creates a new event set, registers every
        GPU again with fresh handles and re-reads the inventory (a reset GPU has new handles, and
        its MIG devices are gone); this waits up to REARM_WAIT_S for them, so events that happen
        after ``reacquire`` returns reach every subscriber. Last, persistence mode is turned back on
        for every GPU a reset turned it off on and that still lacks it (``reset_gpu``).
        """
        with self._transition:
            with self._cond:
                if not self._released:
                    return
            try:
                self._nvml.nvmlInit()
            except self._nvml.NVMLError as exc:
                raise self._translate(exc, "nvmlInit") from None
            with self._cond:
                self._inits += 1
                self._released = False
                self._cond.notify_all()
                deadline = time.monotonic() + REARM_WAIT_S
                while any(not (w.armed == self._epoch or w.done) for w in self._watchers):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        log.warning("NVML reacquired, but an event watcher has not registered its GPUs yet")
                        break
                    self._cond.wait(left)
                owed = dict(self._persistence_owed)
            log.info("NVML reacquired")
            for uuid, gpu_index in owed.items():
                if self._restore_persistence(gpu_index, uuid):
                    with self._cond:
                        self._persistence_owed.pop(uuid, None)

    def _released_error(self, what: str) -> ReleasedError:
        return ReleasedError(
            f"{what}: NVML is released while a GPU on this node is reset; no reading until it is reacquired"
        )

    # ---- error translation -------------------------------------------------------------------

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Every NVML call: refused while released, errors translated. A call that races a release
        and finds NVML shut down (NVML_ERROR_UNINITIALIZED) is a ReleasedError too."""
        session = self._local.epoch
        with self._lock:
            if self._released or (session is not None and session != self._epoch):
                raise self._released_error(getattr(fn, "__name__", "nvml call"))
            self._inflight += 1
            epoch = self._epoch
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            what = getattr(fn, "__name__", "nvml call")
            if getattr(exc, "value", None) == self._nvml.NVML_ERROR_UNINITIALIZED and (
                self._released or self._epoch != epoch
            ):
                raise self._released_error(what) from None
            raise self._translate(exc, what) from None
        finally:
            with self._lock:
                self._inflight -= 1
                if not self._inflight and self._released:
                    self._cond.notify_all()

    def _translate(self, exc: Exception, what: str) -> GpuError:
        n = self._nvml
        code = getattr(exc, "value", None)
        text = f"{what}: {exc}"
        if code == n.NVML_ERROR_LIBRARY_NOT_FOUND:
            return LibraryNotFoundError(
                "NVML library (libnvidia-ml.so.1) not found: is the NVIDIA driver installed on the node, "
                "and does this container run with the nvidia runtime class?"
            )
        if code == n.NVML_ERROR_DRIVER_NOT_LOADED:
            return DriverNotLoadedError(
                "the NVIDIA kernel driver is not loaded: check `lsmod | grep nvidia` and the driver pod's logs"
            )
        if code == n.NVML_ERROR_GPU_IS_LOST:
            return GpuLostError(f"{text}: the GPU has fallen off the bus; reset the GPU or reboot the node")
        if code in (n.NVML_ERROR_NOT_SUPPORTED, n.NVML_ERROR_FUNCTION_NOT_FOUND):
            return NotSupportedError(f"{text}: not supported by this GPU or driver")
        if code == n.NVML_ERROR_NO_PERMISSION:
            return NoPermissionError(f"{text}: permission denied (run as root or with CAP_SYS_ADMIN)")
        if code in (n.NVML_ERROR_NOT_FOUND, n.NVML_ERROR_INVALID_ARGUMENT):
            return NotFoundError(f"{text}: not found")
        return GpuError(text)

    def _optional(self, fn: Callable[..., T], *args: Any) -> T | None:
        """A reading the device may not support: None instead of NotSupportedError."""
        try:
            return self._call(fn, *args)
        except NotSupportedError:
            return None

    # ---- repair (the repair loop's port) --------------------------------------------------------

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

    @_nvml_operation
    def _prepare_reset(self, gpu_index: int) -> tuple[str, bool]:
        """The GPU's UUID once ``plan_reset`` allows the reset, with persistence mode turned off;
        and whether it was on (and so must be turned back on)."""
        n = self._nvml
        h = self._call(n.nvmlDeviceGetHandleByIndex, gpu_index)
        uuid = _text(self._call(n.nvmlDeviceGetUUID, h))
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

    @_nvml_operation
    def reset_plan(self, gpu_index: int) -> ResetPlan:
        """Whether this GPU can be reset alone, and why (read-only: NVML queries, gpu.reset rules)."""
        n = self._nvml
        h = self._call(n.nvmlDeviceGetHandleByIndex, gpu_index)
        cc = _pair(self._call(n.nvmlDeviceGetCudaComputeCapability, h))
        return plan_reset(gpu_index, cc, self._nvlink(h))

    @_nvml_operation
    def _restore_persistence(self, gpu_index: int, uuid: str) -> bool:
        """Turn persistence mode back on after a reset; whether it is on (if not, it stays owed)."""
        n = self._nvml
        try:
            h = self._call(n.nvmlDeviceGetHandleByUUID, uuid)  # a fresh handle: the device was reset
            self._call(n.nvmlDeviceSetPersistenceMode, h, n.NVML_FEATURE_ENABLED)
        except GpuError as exc:
            log.warning(
                "GPU %d: persistence mode could not be turned back on after the reset (%s); trying again at "
                "the next reacquire",
                gpu_index,
                exc,
            )
            return False
        return True

    def _active_links(self, h: Any) -> Iterator[int]:
        """The GPU's NVLinks that are up, by index, up to the first one NVML does not know."""
        n = self._nvml
        for link in range(n.NVML_NVLINK_MAX_LINKS):
            try:
                if self._call(n.nvmlDeviceGetNvLinkState, h, link) != n.NVML_FEATURE_ENABLED:
                    continue
            except (NotSupportedError, NotFoundError):
                return
            yield link

    def _nvlink(self, h: Any) -> NvLink:
        """What the GPU's active NVLinks lead to (an NVSwitch, another GPU, or nothing)."""
        n = self._nvml
        kinds = {self._optional(n.nvmlDeviceGetNvLinkRemoteDeviceType, h, link) for link in self._active_links(h)}
        if n.NVML_NVLINK_DEVICE_TYPE_SWITCH in kinds:
            return NvLink.NVSWITCH
        return NvLink.DIRECT if kinds else NvLink.NONE

    @_nvml_operation
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
            return BurnIn(gpu_index, (BurnInCheck("nvml", False, str(exc)),), _LATER, dict.fromkeys(_LATER, why))
        checks.append(BurnInCheck("nvml", True))
        readings = self.health_readings(_text(self._call(n.nvmlDeviceGetUUID, h)))
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
            bus_id = _text(self._call(n.nvmlDeviceGetPciInfo, h).busId)
            outcome = cuda_checks(bus_id, config, self._run_command)
            outcome.add(dcgm_diag(gpu_index, config, self._run_command))
            checks.extend(outcome.checks)
            skipped.update(outcome.skipped)
        return BurnIn(gpu_index, tuple(checks), tuple(skipped), skipped)

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

    # ---- inventory ---------------------------------------------------------------------------

    @_nvml_operation
    def inventory(self) -> Inventory:
        n = self._nvml
        driver = DriverInfo(
            self._call(n.nvmlSystemGetDriverVersion), _cuda_version(self._call(n.nvmlSystemGetCudaDriverVersion))
        )
        gpus: list[Gpu] = []
        handles: dict[int, Any] = {}
        for index in range(self._call(n.nvmlDeviceGetCount)):
            try:
                handle = self._call(n.nvmlDeviceGetHandleByIndex, index)
                gpus.append(self._gpu(index, handle))
            except GpuLostError as exc:
                log.warning("GPU %d left out of the inventory: %s", index, exc)
                continue
            handles[index] = handle
        return Inventory(driver, tuple(gpus), self._links(handles, {g.index: g for g in gpus}))

    def _gpu(self, index: int, h: Any) -> Gpu:
        n = self._nvml
        pci = self._call(n.nvmlDeviceGetPciInfo, h)
        bus_id = _text(pci.busId)
        name = self._call(n.nvmlDeviceGetName, h)
        known = catalog.model_for_name(name, int(pci.pciDeviceId))
        attrs = self._optional(n.nvmlDeviceGetAttributes, h)
        sms = attrs.multiprocessorCount if attrs is not None else (known.multiprocessors if known else 0)
        modes = self._optional(n.nvmlDeviceGetMigMode, h)
        mig_enabled = bool(modes and modes[0] == n.NVML_DEVICE_MIG_ENABLE)
        uuid = self._call(n.nvmlDeviceGetUUID, h)
        return Gpu(
            index=index,
            uuid=uuid,
            name=name,
            pci_bus_id=bus_id,
            pci_device_id=int(pci.pciDeviceId),
            memory_mib=int(self._call(n.nvmlDeviceGetMemoryInfo, h).total // MIB),
            compute_capability=_pair(self._call(n.nvmlDeviceGetCudaComputeCapability, h)),
            numa_node=self._numa_node(h, bus_id),
            multiprocessors=int(sms),
            mig_capable=modes is not None,
            mig_enabled=mig_enabled,
            mig_devices=self._mig_devices(index, uuid, h, known) if mig_enabled else (),
            minor_number=int(self._call(n.nvmlDeviceGetMinorNumber, h)),
            pci_class=self._pci_class(h, bus_id),
            vgpu=self._optional(n.nvmlDeviceGetVirtualizationMode, h) == n.NVML_GPU_VIRTUALIZATION_MODE_VGPU,
        )

    def _numa_node(self, h: Any, bus_id: str) -> int | None:
        """NVML's NUMA id where the driver has it, else sysfs as the kubelet plugin reads it."""
        node = self._optional(self._nvml.nvmlDeviceGetNumaNodeId, h)
        if node is None:
            node = self._sysfs_int(bus_id, "numa_node")
        return node if node is not None and node >= 0 else None

    def _pci_class(self, h: Any, bus_id: str) -> int | None:
        """The PCI class code: NVML's extended PCI info (R550 and later), else sysfs as GFD reads it.

        NVML gives base class and subclass only; the programming interface byte is 0 on every
        NVIDIA GPU, so the two sources agree (0x030200 for a 3D controller).
        """
        n = self._nvml
        info = n.nvmlPciInfoExt_v1_t()
        info.version = n.nvmlPciInfoExt_v1
        try:
            self._call(n.nvmlDeviceGetPciInfoExt, h, ctypes.byref(info))
        except (GpuLostError, ReleasedError):
            raise
        except GpuError:  # an older driver (function not found) or library: sysfs has it too
            return self._sysfs_int(bus_id, "class")
        return (int(info.baseClass) << 16) | (int(info.subClass) << 8)

    def _sysfs_int(self, bus_id: str, attribute: str) -> int | None:
        """An integer attribute of the GPU's PCI device in sysfs (``0x030200``, ``1``); None if unreadable.

        NVML's bus id has an 8-digit PCI domain, sysfs a 4-digit one (``0000:17:00.0``).
        """
        path = self._sysfs / bus_id.lower()[4:] / attribute
        try:
            return int(path.read_text().strip(), 0)
        except (OSError, ValueError):
            return None

    def _mig_devices(
        self, index: int, parent_uuid: str, h: Any, known: catalog.GpuModel | None
    ) -> tuple[MigDevice, ...]:
        n = self._nvml
        out: list[MigDevice] = []
        profile_names: dict[int, str] | None = None
        for slot in range(self._call(n.nvmlDeviceGetMaxMigDeviceCount, h)):
            try:
                m = self._call(n.nvmlDeviceGetMigDeviceHandleByIndex, h, slot)
            except NotFoundError:
                continue
            gi_id = int(self._call(n.nvmlDeviceGetGpuInstanceId, m))
            attrs = self._call(n.nvmlDeviceGetAttributes, m)
            gi = self._call(n.nvmlDeviceGetGpuInstanceById, h, gi_id)
            profile_id = int(self._call(n.nvmlGpuInstanceGetInfo, gi).profileId)
            if profile_names is None:
                profile_names = self._profile_names(h, known)
            if profile_id in profile_names:
                profile = profile_names[profile_id]
            else:
                gb = math.ceil(attrs.memorySizeMB / 1024)
                profile = f"{attrs.gpuInstanceSliceCount}g.{gb}gb"
            if int(attrs.computeInstanceSliceCount) != int(attrs.gpuInstanceSliceCount):
                profile = catalog.device_profile(profile, int(attrs.computeInstanceSliceCount))
            out.append(
                MigDevice(
                    uuid=self._call(n.nvmlDeviceGetUUID, m),
                    parent_index=index,
                    parent_uuid=parent_uuid,
                    index=slot,
                    profile=profile,
                    gi_id=gi_id,
                    ci_id=int(self._call(n.nvmlDeviceGetComputeInstanceId, m)),
                    memory_mib=int(attrs.memorySizeMB),
                    multiprocessors=int(attrs.multiprocessorCount),
                )
            )
        return tuple(out)

    def _gi_profiles(self, h: Any, known: catalog.GpuModel | None) -> dict[str, Any]:
        """NVML's profile info for each catalog profile the GPU offers, by catalog name.

        The id to create or list GPU instances with (``info.id``, the ID `nvidia-smi mig -lgip`
        prints) is not the NVML_GPU_INSTANCE_PROFILE_* constant that asks for it, so every use
        goes through this lookup. Empty while MIG mode is off (NVML answers not supported).
        """
        infos: dict[str, Any] = {}
        for prof in known.mig_profiles if known is not None else ():
            try:
                info = self._call(self._nvml.nvmlDeviceGetGpuInstanceProfileInfo, h, prof.nvml_gi_profile_id)
            except (NotSupportedError, NotFoundError):
                continue
            infos[prof.name] = info
        return infos

    def _profile_names(self, h: Any, known: catalog.GpuModel | None) -> dict[int, str]:
        return {int(info.id): name for name, info in self._gi_profiles(h, known).items()}

    def _links(self, handles: dict[int, Any], gpus: dict[int, Gpu]) -> tuple[GpuLink, ...]:
        n = self._nvml
        direct: dict[tuple[int, int], int] = {}
        to_switch: dict[int, int] = {}
        by_bus = {g.pci_bus_id.upper(): i for i, g in gpus.items()}
        for i, h in handles.items():
            switch_links = 0
            for link in self._active_links(h):
                kind = self._optional(n.nvmlDeviceGetNvLinkRemoteDeviceType, h, link)
                if kind == n.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                    switch_links += 1
                elif kind == n.NVML_NVLINK_DEVICE_TYPE_GPU:
                    peer = by_bus.get(_text(self._call(n.nvmlDeviceGetNvLinkRemotePciInfo, h, link).busId).upper())
                    if peer is not None:
                        key = (min(i, peer), max(i, peer))
                        direct[key] = direct.get(key, 0) + 1
            to_switch[i] = switch_links
        links = []
        order = sorted(handles)
        for pos, a in enumerate(order):
            for b in order[pos + 1 :]:
                level = TopologyLevel(int(self._call(n.nvmlDeviceGetTopologyCommonAncestor, handles[a], handles[b])))
                # Direct links are seen from both ends; NVSwitch lanes are shared by every pair.
                lanes = direct.get((a, b), 0) // 2
                if to_switch[a] and to_switch[b]:
                    status = self._optional(
                        n.nvmlDeviceGetP2PStatus, handles[a], handles[b], n.NVML_P2P_CAPS_INDEX_NVLINK
                    )
                    if status == n.NVML_P2P_STATUS_OK:
                        lanes += min(to_switch[a], to_switch[b])
                links.append(GpuLink(a, b, level, lanes))
        return tuple(links)

    # ---- MIG writes --------------------------------------------------------------------------

    def _mig_handle(self, gpu_index: int) -> tuple[Any, catalog.GpuModel]:
        h = self._call(self._nvml.nvmlDeviceGetHandleByIndex, gpu_index)
        name = self._call(self._nvml.nvmlDeviceGetName, h)
        pci = self._call(self._nvml.nvmlDeviceGetPciInfo, h)
        known = catalog.model_for_name(name, int(pci.pciDeviceId))
        if known is None or not known.mig_capable:
            raise NotSupportedError(f"GPU {gpu_index} ({name}) has no MIG profiles in the catalog")
        return h, known

    @_nvml_operation
    def mig_mode(self, gpu_index: int) -> MigMode:
        n = self._nvml
        h = self._call(n.nvmlDeviceGetHandleByIndex, gpu_index)
        current, pending = self._call(n.nvmlDeviceGetMigMode, h)
        return MigMode(current == n.NVML_DEVICE_MIG_ENABLE, pending == n.NVML_DEVICE_MIG_ENABLE)

    @_nvml_operation
    def set_mig_mode(self, gpu_index: int, enabled: bool) -> MigMode:
        """nvmlDeviceSetMigMode; the mode read back afterwards says whether a reset is pending."""
        n = self._nvml
        h = self._call(n.nvmlDeviceGetHandleByIndex, gpu_index)
        self._call(n.nvmlDeviceSetMigMode, h, n.NVML_DEVICE_MIG_ENABLE if enabled else n.NVML_DEVICE_MIG_DISABLE)
        return self.mig_mode(gpu_index)

    @_nvml_operation
    def gpu_instances(self, gpu_index: int) -> tuple[GpuInstance, ...]:
        n = self._nvml
        h, known = self._mig_handle(gpu_index)
        out: list[GpuInstance] = []
        for name, info in self._gi_profiles(h, known).items():
            handles = (n.c_nvmlGpuInstance_t * int(info.instanceCount))()
            count = ctypes.c_uint(0)
            self._call(n.nvmlDeviceGetGpuInstances, h, info.id, handles, ctypes.byref(count))
            for k in range(count.value):
                gi_info = self._call(n.nvmlGpuInstanceGetInfo, handles[k])
                cis = tuple(sorted((ci for _, ci in self._compute_instances(handles[k])), key=lambda c: c.ci_id))
                out.append(GpuInstance(int(gi_info.id), name, int(gi_info.placement.start), cis))
        return tuple(sorted(out, key=lambda gi: gi.start))

    def _compute_instances(self, gi: Any) -> list[tuple[Any, ComputeInstance]]:
        """Every compute instance of a GPU instance, with its handle, over all CI profiles."""
        n = self._nvml
        out: list[tuple[Any, ComputeInstance]] = []
        for prof in range(n.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                info = self._call(
                    n.nvmlGpuInstanceGetComputeInstanceProfileInfo,
                    gi,
                    prof,
                    n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                )
            except (NotSupportedError, NotFoundError):
                continue
            handles = (n.c_nvmlComputeInstance_t * int(info.instanceCount))()
            count = ctypes.c_uint(0)
            self._call(n.nvmlGpuInstanceGetComputeInstances, gi, info.id, handles, ctypes.byref(count))
            for k in range(count.value):
                ci_info = self._call(n.nvmlComputeInstanceGetInfo, handles[k])
                out.append((handles[k], ComputeInstance(int(ci_info.id), int(info.sliceCount))))
        return out

    @_nvml_operation
    def create_gpu_instance(self, gpu_index: int, profile: str, start: int) -> int:
        n = self._nvml
        h, known = self._mig_handle(gpu_index)
        prof = known.profile(profile)
        info = self._call(n.nvmlDeviceGetGpuInstanceProfileInfo, h, prof.nvml_gi_profile_id)
        placement = n.c_nvmlGpuInstancePlacement_t(start, prof.memory_slices)
        gi = self._call(n.nvmlDeviceCreateGpuInstanceWithPlacement, h, info.id, ctypes.byref(placement))
        return int(self._call(n.nvmlGpuInstanceGetInfo, gi).id)

    @_nvml_operation
    def create_compute_instance(self, gpu_index: int, gi_id: int, slices: int | None = None) -> int:
        """nvmlGpuInstanceCreateComputeInstance with the CI profile of ``slices`` (None: the GPU
        instance's full size), placed by the driver, as mig-parted creates them."""
        n = self._nvml
        h, known = self._mig_handle(gpu_index)
        gi = self._call(n.nvmlDeviceGetGpuInstanceById, h, gi_id)
        profile_id = int(self._call(n.nvmlGpuInstanceGetInfo, gi).profileId)
        names = self._profile_names(h, known)
        if profile_id not in names:
            raise NotFoundError(f"GPU {gpu_index} GPU instance {gi_id}: unknown profile id {profile_id}")
        prof = known.profile(names[profile_id])
        ci_profile = prof.nvml_ci_profile_id if slices is None else catalog.nvml_ci_profile_id(slices)
        info = self._call(
            n.nvmlGpuInstanceGetComputeInstanceProfileInfo,
            gi,
            ci_profile,
            n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
        )
        ci = self._call(n.nvmlGpuInstanceCreateComputeInstance, gi, info.id)
        return int(self._call(n.nvmlComputeInstanceGetInfo, ci).id)

    @_nvml_operation
    def destroy_gpu_instance(self, gpu_index: int, gi_id: int) -> None:
        n = self._nvml
        h, _ = self._mig_handle(gpu_index)
        gi = self._call(n.nvmlDeviceGetGpuInstanceById, h, gi_id)
        for handle, _ci in self._compute_instances(gi):
            self._call(n.nvmlComputeInstanceDestroy, handle)
        self._call(n.nvmlGpuInstanceDestroy, gi)

    # ---- telemetry ---------------------------------------------------------------------------

    @_nvml_operation
    def processes(self, gpu_uuid: str) -> tuple[GpuProcess, ...]:
        """Read by ``gpu.processes``; SM shares are averaged since this GPU's previous read."""
        now_us = int(time.time() * 1_000_000)
        since = self._process_reads.get(gpu_uuid, now_us - 1_000_000)
        found = read_processes(self._nvml, self._call, self._optional, gpu_uuid, since)
        self._process_reads[gpu_uuid] = now_us
        return found

    @_nvml_operation
    def telemetry(self, gpu_uuid: str) -> Telemetry:
        n = self._nvml
        h = self._call(n.nvmlDeviceGetHandleByUUID, gpu_uuid)
        if self._is_mig_handle(h):
            raise NotFoundError(f"{gpu_uuid} is a MIG device, not a GPU: read its memory with mig_memory()")
        util = self._optional(n.nvmlDeviceGetUtilizationRates, h)
        mem = self._call(n.nvmlDeviceGetMemoryInfo, h)
        enc = self._optional(n.nvmlDeviceGetEncoderUtilization, h)
        dec = self._optional(n.nvmlDeviceGetDecoderUtilization, h)
        power = self._optional(n.nvmlDeviceGetPowerUsage, h)
        rows = self._optional(n.nvmlDeviceGetRemappedRows, h)
        reserved = getattr(mem, "reserved", None)
        return Telemetry(
            uuid=gpu_uuid,
            gpu_util=util.gpu if util is not None else None,
            mem_copy_util=util.memory if util is not None else None,
            enc_util=enc[0] if enc is not None else None,
            dec_util=dec[0] if dec is not None else None,
            memory_used_mib=int(mem.used // MIB),
            memory_free_mib=int(mem.free // MIB),
            memory_reserved_mib=int(reserved // MIB) if reserved is not None else None,
            temperature_c=self._optional(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
            memory_temperature_c=self._memory_temperature(h),
            power_w=power / 1000.0 if power is not None else None,
            energy_mj=self._optional(n.nvmlDeviceGetTotalEnergyConsumption, h),
            sm_clock_mhz=self._optional(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
            mem_clock_mhz=self._optional(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM),
            pcie_replay=self._optional(n.nvmlDeviceGetPcieReplayCounter, h),
            remapped_rows_correctable=rows[0] if rows is not None else None,
            remapped_rows_uncorrectable=rows[1] if rows is not None else None,
            row_remap_failure=rows[3] if rows is not None else None,
            row_remap_pending=rows[2] if rows is not None else None,
        )

    @_nvml_operation
    def health_readings(self, gpu_uuid: str) -> HealthReadings:
        """Row remapping, page retirement and every active NVLink's error counters (on Blackwell and
        later from NVML's field values); a reading the GPU does not support (retired pages on Ampere
        and newer, replay and CRC counters on Blackwell) is None."""
        n = self._nvml
        h = self._call(n.nvmlDeviceGetHandleByUUID, gpu_uuid)
        if self._is_mig_handle(h):
            raise NotFoundError(f"{gpu_uuid} is a MIG device, not a GPU: its health counters are its GPU's")
        rows = self._optional(n.nvmlDeviceGetRemappedRows, h)
        pending = self._optional(n.nvmlDeviceGetRetiredPagesPendingStatus, h)
        sbe = self._optional(
            n.nvmlDeviceGetRetiredPages, h, n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        )
        dbe = self._optional(n.nvmlDeviceGetRetiredPages, h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        links, symbol_ber, effective_ber = self._nvlink_counters(h)
        return HealthReadings(
            uuid=gpu_uuid,
            row_remap_pending=bool(rows[2]) if rows is not None else None,
            row_remap_failed=bool(rows[3]) if rows is not None else None,
            retired_pages_pending=bool(pending) if pending is not None else None,
            retired_pages_sbe=len(sbe) if sbe is not None else None,
            retired_pages_dbe=len(dbe) if dbe is not None else None,
            nvlink=links,
            nvlink_symbol_ber=symbol_ber,
            nvlink_effective_ber=effective_ber,
        )

    def _nvlink_counters(self, h: Any) -> tuple[tuple[NvLinkCounters, ...], Ber | None, Ber | None]:
        """Every active link's error counters, and the GPU's aggregate symbol and effective BER.

        Which counters a GPU has is decided by its compute capability, as DCGM decides it
        (``probes.nvlink5``): from Blackwell on, every link's NVLink5 field values, in one call;
        before, nvmlDeviceGetNvLinkErrorCounter per link and counter (no aggregate BER). Not by what
        the old counters answer: a driver answering them with zeros on Blackwell would otherwise
        hide the NVLink5 errors (nvml.h says only that they are "unsupported for Blackwell+")."""
        links = list(self._active_links(h))
        if not links:
            return (), None, None
        if nvlink5(_pair(self._call(self._nvml.nvmlDeviceGetCudaComputeCapability, h))):
            return self._nvlink_fields(h, links)
        found = [c for c in (self._error_counters(h, link) for link in links) if c is not None]
        return tuple(found), None, None

    def _error_counters(self, h: Any, link: int) -> NvLinkCounters | None:
        """One link's replay, recovery, CRC flit and CRC data counters; None if it reports none."""
        n = self._nvml
        kinds = (
            n.NVML_NVLINK_ERROR_DL_REPLAY,
            n.NVML_NVLINK_ERROR_DL_RECOVERY,
            n.NVML_NVLINK_ERROR_DL_CRC_FLIT,
            n.NVML_NVLINK_ERROR_DL_CRC_DATA,
        )
        values = [self._optional(n.nvmlDeviceGetNvLinkErrorCounter, h, link, kind) for kind in kinds]
        return NvLinkCounters(link, *values) if any(v is not None for v in values) else None

    def _nvlink_fields(self, h: Any, links: list[int]) -> tuple[tuple[NvLinkCounters, ...], Ber | None, Ber | None]:
        """NVLink5 error counters and BERs, per link (scopeId = link) and the GPU's aggregate BERs
        (scopeId UINT_MAX, as DCGM reads them), all in one nvmlDeviceGetFieldValues call: one call per
        link and field would be hundreds of driver round trips per GPU every pass. A field the GPU
        does not report comes back with its own error status and reads as None."""
        n = self._nvml
        per_link = [(name, getattr(n, field)) for name, field in _NVLINK5_FIELDS]
        aggregate = (n.NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER, n.NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER)
        request = [(fid, link) for link in links for _, fid in per_link]
        request += [(fid, _ALL_LINKS) for fid in aggregate]
        values = self._optional(n.nvmlDeviceGetFieldValues, h, request)
        if values is None:
            return (), None, None
        read = {key: _field_int(n, v) for key, v in zip(request, values, strict=True)}
        found = []
        for link in links:
            got: dict[str, Any] = {name: read[(fid, link)] for name, fid in per_link}
            if all(v is None for v in got.values()):
                continue
            for name in ("symbol_ber", "effective_ber"):
                got[name] = _ber(got[name])
            found.append(NvLinkCounters(link, **got))
        return tuple(found), _ber(read[(aggregate[0], _ALL_LINKS)]), _ber(read[(aggregate[1], _ALL_LINKS)])

    @_nvml_operation
    def mig_memory(self, mig_uuid: str) -> MigMemory:
        """nvmlDeviceGetMemoryInfo on the MIG device handle: that GPU instance's framebuffer."""
        n = self._nvml
        h = self._call(n.nvmlDeviceGetHandleByUUID, mig_uuid)
        if not self._is_mig_handle(h):
            raise NotFoundError(f"{mig_uuid} is a whole GPU, not a MIG device: read its memory with telemetry()")
        mem = self._call(n.nvmlDeviceGetMemoryInfo, h)
        return MigMemory(mig_uuid, int(mem.total // MIB), int(mem.used // MIB), int(mem.free // MIB))

    def _is_mig_handle(self, h: Any) -> bool:
        """Whether NVML handed out a MIG device handle (handle-by-UUID answers both kinds)."""
        return bool(self._optional(self._nvml.nvmlDeviceIsMigDeviceHandle, h))

    def _memory_temperature(self, h: Any) -> int | None:
        """HBM temperature: only a field value in NVML, not a sensor of nvmlDeviceGetTemperature."""
        n = self._nvml
        values = self._optional(n.nvmlDeviceGetFieldValues, h, [n.NVML_FI_DEV_MEMORY_TEMP])
        if not values or values[0].nvmlReturn != n.NVML_SUCCESS:
            return None
        return int(values[0].value.uiVal)

    # ---- health events -----------------------------------------------------------------------

    async def events(self) -> AsyncIterator[HealthEvent]:
        """XID events from an NVML event set, plus lost/recovered from periodic probes.

        NVML waits block, so a thread does them and hands events to the loop; closing the
        generator stops the thread within one wait (0.5 s). If the watcher cannot start or dies
        (no GPU could be registered, the event set cannot be made), the error is raised here, so
        the consumer can mark its devices unhealthy instead of waiting forever.

        While the backend is released the stream stays open and delivers nothing: the watcher has
        freed its event set, so an XID raised then is never delivered (NVML queues events only on
        a live event set), and no GPU is probed, so none is reported lost for the release. After
        ``reacquire`` it registers every GPU again and carries on, its lost/recovered state intact.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[HealthEvent | GpuError] = asyncio.Queue()
        stop = threading.Event()
        watcher = _Watcher()
        with self._cond:
            self._watchers.append(watcher)

        def report(exc: GpuError) -> None:
            if not stop.is_set():
                with contextlib.suppress(RuntimeError):  # the subscriber's loop has closed: nobody listens
                    loop.call_soon_threadsafe(queue.put_nowait, exc)

        def watch() -> None:
            try:
                self._watch(loop, queue, stop, watcher)
            except GpuError as exc:
                report(exc)
            except Exception as exc:  # a defect: say so now and end the stream, never die silently
                log.exception("the NVML event watcher failed")
                report(GpuError(f"the NVML event watcher failed: {exc!r}"))
            finally:
                with self._cond:
                    watcher.done, watcher.holding, watcher.armed = True, False, None
                    self._watchers.remove(watcher)
                    self._cond.notify_all()

        thread = threading.Thread(target=watch, name="nvml-events", daemon=True)
        thread.start()
        try:
            while True:
                item = await queue.get()
                if isinstance(item, GpuError):
                    raise item
                yield item
        finally:
            stop.set()
            with self._cond:
                self._cond.notify_all()

    def _watch(
        self,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[HealthEvent | GpuError],
        stop: threading.Event,
        watcher: _Watcher,
    ) -> None:
        """The watcher thread: arm (an event set with every GPU registered), listen until stopped or
        released, let go; while released, wait for ``reacquire`` and arm again with fresh handles."""
        n = self._nvml

        def emit(event: HealthEvent) -> None:
            if stop.is_set():
                return
            try:
                loop.call_soon_threadsafe(queue.put_nowait, event)
            except RuntimeError:  # the subscriber's loop has closed: nobody is listening any more
                stop.set()

        lost: set[str] = set()
        uuids: tuple[str, ...] = ()
        next_probe = time.monotonic() + self._probe_interval
        with self._reset_lock:
            resets_seen = len(self._reset_log)
        while self._hold(watcher, stop):
            armed: _Armed | None = None
            try:
                armed = self._arm(watcher)
                uuids = tuple(dict.fromkeys(armed.uuids + uuids))  # a GPU lost meanwhile is still probed
                while not stop.is_set() and not self._released and self._epoch == armed.epoch:
                    with self._reset_lock:
                        reset = self._reset_log[resets_seen:]
                        resets_seen = len(self._reset_log)
                    for gpu_uuid in reset:
                        lost.discard(gpu_uuid)
                        emit(HealthEvent(EventKind.GPU_RECOVERED, gpu_uuid, message="GPU reset", timestamp=time.time()))
                    try:
                        data = n.nvmlEventSetWait(armed.event_set, _WAIT_MS)
                    except n.NVMLError as exc:
                        if self._released or self._epoch != armed.epoch:
                            break
                        if getattr(exc, "value", None) != n.NVML_ERROR_TIMEOUT:
                            log.warning("NVML event wait failed (%s); probing every GPU", exc)
                            next_probe = 0.0
                            stop.wait(0.5)
                    else:
                        if self._torn_down > armed.epoch:
                            break  # the answer of a wait stuck across a shutdown: its set is freed
                        emit(self._xid_event(armed, data))
                    if time.monotonic() >= next_probe:
                        if not self._probe(uuids, lost, emit):
                            break
                        next_probe = time.monotonic() + self._probe_interval
            except ReleasedError:
                pass  # released while arming or probing: let go, then wait for reacquire
            finally:
                self._let_go(watcher, armed)

    def _hold(self, watcher: _Watcher, stop: threading.Event) -> bool:
        """Wait while the backend is released; then mark the watcher as holding NVML (so a release
        waits for it) and say True, or False once the subscriber has gone."""
        with self._cond:
            while self._released and not stop.is_set():
                self._cond.wait(_WAIT_MS / 1000)
            if stop.is_set():
                return False
            watcher.holding = True
            return True

    @_nvml_operation
    def _arm(self, watcher: _Watcher) -> _Armed:
        """A new event set with every GPU registered for XID events, GPU by GPU with fresh handles.

        A GPU that answers with an error (one a failed reset left needing another, RESET_REQUIRED)
        is logged and armed as far as it answers; its UUID, when it has one, stays among those the
        watcher probes, so the probe reports it lost, as it would a GPU fallen off the bus. One bad
        GPU must not end the stream: consumers would then fail every GPU on the node."""
        n = self._nvml
        epoch = self._local.epoch
        assert epoch is not None  # an operation always runs in a session
        event_set = self._call(n.nvmlEventSetCreate)
        uuid_of: dict[Any, str] = {}
        mig_by_ids: dict[tuple[str, int, int], str] = {}
        uuids: list[str] = []
        try:
            for index in range(self._call(n.nvmlDeviceGetCount)):
                self._arm_gpu(index, event_set, uuid_of, mig_by_ids, uuids)
        except BaseException:
            self._drop(event_set, epoch)
            raise
        armed = _Armed(event_set, uuid_of, mig_by_ids, tuple(uuids), epoch)
        with self._cond:
            if self._released or self._epoch != epoch:  # released after the last call: not armed
                stale = True
            else:
                stale = False
                watcher.armed = epoch
                self._cond.notify_all()
        if stale:
            self._drop(event_set, epoch)
            raise self._released_error("nvmlDeviceRegisterEvents")
        return armed

    def _arm_gpu(
        self,
        index: int,
        event_set: Any,
        uuid_of: dict[Any, str],
        mig_by_ids: dict[tuple[str, int, int], str],
        uuids: list[str],
    ) -> None:
        """Register one GPU for XID events and note its MIG devices; log what it does not answer."""
        n = self._nvml
        uuid: str | None = None
        try:
            h = self._call(n.nvmlDeviceGetHandleByIndex, index)
            uuid = _text(self._call(n.nvmlDeviceGetUUID, h))
            uuids.append(uuid)
            uuid_of[_handle_key(h)] = uuid
            try:
                self._call(n.nvmlDeviceRegisterEvents, h, n.nvmlEventTypeXidCriticalError, event_set)
            except NotSupportedError:
                log.warning("GPU %s does not support XID events; its health is probed only", uuid)
            gpu = self._gpu(index, h)
        except ReleasedError:
            raise
        except GpuError as exc:
            log.warning(
                "GPU %d (%s) is watched only in part: %s; the probe reports it lost until it answers",
                index,
                uuid or "UUID unknown",
                exc,
            )
            return
        mig_by_ids.update({(m.parent_uuid, m.gi_id, m.ci_id): m.uuid for m in gpu.mig_devices})

    def _let_go(self, watcher: _Watcher, armed: _Armed | None) -> None:
        """Free the watcher's event set (directly: ``release`` is waiting for exactly this, and has
        not shut NVML down yet) and tell ``release`` it holds nothing now."""
        if armed is not None:
            self._drop(armed.event_set, armed.epoch)
        with self._cond:
            watcher.holding = False
            watcher.armed = None
            self._cond.notify_all()

    def _drop(self, event_set: Any, epoch: int) -> None:
        """Free an event set made in ``epoch``, unless an nvmlShutdown has freed it already. Counted
        as a call under way, so a release waits for the free before it shuts NVML down. A set whose
        shutdown did not tear the library down (another backend in this process still holds NVML)
        is left allocated: one leaked event set, never one freed twice."""
        with self._lock:
            if self._torn_down > epoch:
                return
            self._inflight += 1
        try:
            self._free_event_set(event_set)
        finally:
            with self._lock:
                self._inflight -= 1
                if not self._inflight and self._released:
                    self._cond.notify_all()

    def _free_event_set(self, event_set: Any) -> None:
        try:
            self._nvml.nvmlEventSetFree(event_set)
        except self._nvml.NVMLError as exc:
            log.debug("nvmlEventSetFree: %s", exc)

    def _xid_event(self, armed: _Armed, data: Any) -> HealthEvent:
        # Map the handle, not ask it: the GPU may already be gone (XID 79).
        gpu_uuid = armed.uuid_of.get(_handle_key(data.device), "unknown")
        mig_uuid = None
        if data.gpuInstanceId != _NO_INSTANCE:
            mig_uuid = armed.mig_by_ids.get((gpu_uuid, int(data.gpuInstanceId), int(data.computeInstanceId)))
        xid = int(data.eventData)
        return HealthEvent(
            EventKind.XID, gpu_uuid, xid=xid, mig_uuid=mig_uuid, message=f"XID {xid}", timestamp=time.time()
        )

    def _probe(self, uuids: tuple[str, ...], lost: set[str], emit: Callable[[HealthEvent], None]) -> bool:
        """One round of the lost/recovered probe; False, with nothing changed for the GPU being
        probed, when the backend was released during it (a release is not a lost GPU)."""
        for gpu_uuid in uuids:
            alive = self._answers(gpu_uuid)
            if alive is None:
                return False
            if not alive and gpu_uuid not in lost:
                lost.add(gpu_uuid)
                emit(HealthEvent(EventKind.GPU_LOST, gpu_uuid, message="GPU is lost", timestamp=time.time()))
            elif alive and gpu_uuid in lost:
                lost.discard(gpu_uuid)
                emit(HealthEvent(EventKind.GPU_RECOVERED, gpu_uuid, message="GPU answers again", timestamp=time.time()))
        return True

    @_nvml_operation
    def xid_event_support(self) -> dict[str, bool]:
        """Per GPU UUID: can an NVML event set register it for XID events? Read-only (the set is freed)."""
        n = self._nvml
        event_set = self._call(n.nvmlEventSetCreate)
        support: dict[str, bool] = {}
        try:
            for gpu in self.inventory().gpus:
                h = self._call(n.nvmlDeviceGetHandleByUUID, gpu.uuid)
                try:
                    self._call(n.nvmlDeviceRegisterEvents, h, n.nvmlEventTypeXidCriticalError, event_set)
                    support[gpu.uuid] = True
                except NotSupportedError:
                    support[gpu.uuid] = False
        finally:
            self._call(n.nvmlEventSetFree, event_set)
        return support

    def _answers(self, gpu_uuid: str) -> bool | None:
        """Whether the GPU answers NVML; None when the backend is released (no answer either way)."""
        try:
            h = self._call(self._nvml.nvmlDeviceGetHandleByUUID, gpu_uuid)
            self._call(self._nvml.nvmlDeviceGetMemoryInfo, h)
        except ReleasedError:
            return None
        except GpuError:
            return False
        return True


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


def _handle_key(handle: Any) -> Any:
    """A hashable identity for an NVML device handle (a ctypes pointer in pynvml)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


def _cuda_version(value: int) -> str:
    """NVML encodes CUDA 12.8 as 12080."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def _pair(value: Any) -> tuple[int, int]:
    major, minor = value
    return int(major), int(minor)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


# ---- NVLink5 error field values (Blackwell and later) ---------------------------------------------

_NVLINK5_FIELDS = (
    ("recovery", "NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS"),
    ("recovery_failed", "NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS"),
    ("symbol_errors", "NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS"),
    ("effective_errors", "NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS"),
    ("rx_errors", "NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS"),
    ("rx_malformed", "NVML_FI_DEV_NVLINK_COUNT_MALFORMED_PACKET_ERRORS"),
    ("rx_buffer_overrun", "NVML_FI_DEV_NVLINK_COUNT_BUFFER_OVERRUN_ERRORS"),
    ("rx_remote_errors", "NVML_FI_DEV_NVLINK_COUNT_RCV_REMOTE_ERRORS"),
    ("rx_general_errors", "NVML_FI_DEV_NVLINK_COUNT_RCV_GENERAL_ERRORS"),
    ("link_integrity_errors", "NVML_FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS"),
    ("symbol_ber", "NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER"),
    ("effective_ber", "NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER"),
)
"""NvLinkCounters field -> the NVML field id read per link (nvml.h "NVLink counter field id
201-225 / Link ID needs to be specified in the scopeId field"). Link-recovery events stand in for
the old recovery counter, as nvml.h says of NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: "unsupported for
Blackwell+. Please use NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_*"."""

_ALL_LINKS = 0xFFFFFFFF
"""scopeId UINT_MAX: the value over all the GPU's links (DCGM's DcgmCacheManager reads NVLink5
counters so on Blackwell)."""

_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
"""nvmlValueType_t (NVML_VALUE_TYPE_*) -> the member of the nvmlValue_t union that holds the value."""


def _field_int(nvml: Any, value: Any) -> int | None:
    """One nvmlFieldValue_t as an integer; None when NVML answered that field with an error."""
    if value.nvmlReturn != nvml.NVML_SUCCESS:
        return None
    return int(getattr(value.value, _VALUE_MEMBER.get(int(value.valueType), "ullVal")))


def _ber(raw: int | None) -> Ber | None:
    return Ber.from_raw(raw) if raw is not None else None

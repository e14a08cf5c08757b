"""NVML as one backend holds it: the calls, their errors, and letting go of the driver for a reset.

Every NVML error is translated into a typed GpuError whose message says what to check, so no
caller ever sees a ctypes traceback. Every call made while the backend is released (a GPU on the
node is being reset) is refused with ReleasedError, and an operation (``nvml_operation``) that a
release interrupts cannot go on with a handle from before it.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import (
    DriverNotLoadedError,
    GpuError,
    GpuLostError,
    LibraryNotFoundError,
    NoPermissionError,
    NotFoundError,
    NotSupportedError,
    ReleasedError,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")
S = TypeVar("S", bound="Session")
WAIT_MS = 500
"""How long one nvmlEventSetWait blocks: the longest an event watcher takes to see a stop or a release."""
RELEASE_MARGIN_S = 1.0
"""How much longer than one event wait ``release`` waits for the watchers to let go before it shuts
NVML down anyway (a watcher stuck in the driver must not hold up a reset for ever)."""
REARM_WAIT_S = 5.0
"""How long ``reacquire`` waits for the paused watchers to register their GPUs again."""


@dataclass(eq=False)
class Watcher:
    """One ``events()`` subscription's watcher thread, as ``release`` and ``reacquire`` see it."""

    holding: bool = False
    """It may hold NVML resources (an event set, handles): ``release`` waits until it lets go."""
    armed: int | None = None
    """The release epoch in which its GPUs were registered on a live event set (None: not armed).
    ``reacquire`` waits until it is armed in the current epoch: a watcher armed before a release
    that it outlasted (stuck in the driver) still listens on the event set the shutdown freed."""
    done: bool = False
    """The thread has ended (the subscriber closed the stream, or it failed)."""


class _Operation(threading.local):
    """The NVML session (release epoch) of the operation running on this thread; None outside one.
    A class attribute, so reading it outside an operation costs no failed attribute lookup."""

    epoch: int | None = None


def nvml_operation(fn: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], T]:
    """Mark a public read or write as one NVML session: if the backend is released part-way through
    (and perhaps reacquired), its next NVML call raises ReleasedError instead of using a handle from
    before the release (a reset GPU has new handles). Nested operations share the outer one's session."""

    @functools.wraps(fn)
    def run(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
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


class Session(GpuBackend):
    """NVML as one backend holds it: every NVML call, its errors translated, and letting go of the
    driver around a GPU reset (``release``/``reacquire``).

    The backend's parts (``gpu.nvml``'s queries, telemetry, MIG, reset, burn-in and events) call NVML
    only through ``_call`` and ``_optional``, so none of them can use it while it is released, and no
    caller ever sees an NVMLError. ``nvmlInit`` is called here, once every part has set its state.
    """

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._reset_log: list[str] = []
        """UUIDs of the GPUs this backend reset, in order: every event watcher reports each one recovered."""
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
        self._watchers: list[Watcher] = []
        self._persistence_owed: dict[str, int] = {}
        """GPU UUID -> index of each GPU whose persistence mode a reset turned off and that is not yet
        back on (NVML could not be taken back, or the GPU refused): turned on at each ``reacquire``."""
        self._local = _Operation()
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
                deadline = time.monotonic() + WAIT_MS / 1000 + RELEASE_MARGIN_S
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
                            WAIT_MS / 1000 + RELEASE_MARGIN_S,
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

    @nvml_operation
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


def as_pair(value: Any) -> tuple[int, int]:
    major, minor = value
    return int(major), int(minor)


def as_text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value

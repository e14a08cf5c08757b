"""The one port every layer uses to see GPUs: ``GpuBackend``.

Two adapters implement it: ``SimBackend`` (topology presets, fault injection) and
``NvmlBackend`` (nvidia-ml-py). Everything above is written against this interface only.

Besides the read-only questions, the port carries the few MIG write operations the MIG manager
needs (mode, GPU instances, compute instances: one full-size, or several smaller ones as a
``1c.3g.40gb`` layout asks). They are plain methods with a default that
raises NotSupportedError, so a backend that cannot change MIG (or a test double) need not
implement them.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuchain.gpu.errors import NotSupportedError, ReleasedError
from gpuchain.gpu.model import HealthEvent, Inventory, MigMemory, Telemetry
from gpuchain.gpu.processes import GpuProcess

if TYPE_CHECKING:
    from gpuchain.gpu.probes import HealthReadings  # the health probes' module loads with the first reading

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MigMode:
    """MIG mode of one GPU. ``pending`` differs from ``current`` until the GPU is reset."""

    current: bool
    pending: bool

    @property
    def reset_pending(self) -> bool:
        return self.current != self.pending


@dataclass(frozen=True)
class BurnInCheck:
    """One check of a burn-in: its name, whether it passed, and what it saw (for Events and the doctor)."""

    name: str
    passed: bool
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class BurnIn:
    """The result of a burn-in on one GPU: passed only when every check that ran passed.

    A check the backend cannot run (no CUDA driver library, no DCGM) is not listed as passed: it
    is left out, ``skipped`` names it and ``reasons`` says why, so a report never claims a test
    that did not happen.
    """

    gpu_index: int
    checks: tuple[BurnInCheck, ...]
    skipped: tuple[str, ...] = ()
    reasons: Mapping[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def summary(self) -> str:
        """``nvml: ok; cuda: ok; memory: 4 patterns ...; dcgm: skipped (dcgmi is not installed)``:
        one line for Events and annotations. A failed check shows what it saw; a passed one, its
        coverage where it has one."""
        parts = []
        for c in self.checks:
            if c.passed:
                parts.append(f"{c.name}: ok ({c.detail})" if c.detail else f"{c.name}: ok")
            else:
                parts.append(f"{c.name}: {c.detail or 'failed'}")
        for name in self.skipped:
            why = self.reasons.get(name)
            parts.append(f"{name}: skipped ({why})" if why else f"{name}: skipped")
        return "; ".join(parts) or "no checks ran"


@dataclass(frozen=True)
class ComputeInstance:
    """A compute instance inside a GPU instance: its id and how many compute slices it spans."""

    ci_id: int
    slices: int


@dataclass(frozen=True, kw_only=True)
class GpuInstance:
    """A MIG GPU instance: catalog profile name, first memory slice, and its compute instances.

    A GPU instance without a compute instance is not a usable MIG device; the MIG manager sees
    it here (the inventory does not list it) so it can clean it up.
    """

    gi_id: int
    profile: str
    start: int
    compute_instances: tuple[ComputeInstance, ...] = ()


class GpuBackend(abc.ABC):
    """Read-only questions about one node's GPUs, plus a stream of health events."""

    name: str = "abstract"

    @abc.abstractmethod
    def inventory(self) -> Inventory:
        """The GPUs that answer right now (a lost GPU is left out), their MIG devices and links."""

    @abc.abstractmethod
    def telemetry(self, gpu_uuid: str) -> Telemetry:
        """Current readings of one GPU; raises GpuLostError or NotFoundError."""

    def mig_memory(self, mig_uuid: str) -> MigMemory:
        """Framebuffer use of one MIG device; raises GpuLostError, NotFoundError or NotSupportedError.

        Separate from ``telemetry`` because a MIG device has no readings of its own besides
        memory: utilisation, temperature and power are the parent GPU's. The default says the
        backend cannot read it, so a backend or test double without MIG need not implement it.
        """
        raise NotSupportedError(f"the {self.name} backend cannot read MIG device memory")

    def processes(self, gpu_uuid: str) -> tuple[GpuProcess, ...]:
        """The processes on one GPU (on its MIG devices when partitioned), with the memory and SM
        share NVML gives each; raises GpuLostError or NotFoundError. The default: the backend
        cannot list them, so per-process attribution is simply off."""
        raise NotSupportedError(f"the {self.name} backend cannot list GPU processes")

    def health_readings(self, gpu_uuid: str) -> HealthReadings:
        """One GPU's health counters (row remapping, retired pages, NVLink errors) for ``gpu.probes``;
        raises GpuLostError or NotFoundError. The default: the backend reads none."""
        raise NotSupportedError(f"the {self.name} backend cannot read health counters")

    @abc.abstractmethod
    def events(self) -> AsyncIterator[HealthEvent]:
        """An endless async stream of health events; each call is an independent subscription."""

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release what the backend holds (NVML shutdown); the default holds nothing."""

    # ---- letting go of the driver around a GPU reset --------------------------------------------
    #
    # The driver refuses to reset a GPU while any process on the node holds NVML ("In use by
    # another client"), so every gpuchain agent lets go of it while a GPU on its node is reset
    # and takes it back afterwards. While released: ``events()`` subscriptions stay open but
    # deliver nothing (no XID, no GPU lost, no error) and resume after ``reacquire``; every other
    # read raises ``ReleasedError``, which consumers treat as "no reading now", never as a fault.

    @property
    def released(self) -> bool:
        """Whether the backend has let go of the driver (``release``) and not yet taken it back."""
        return False

    def release(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Let go of the driver so a GPU on this node can be reset: stop and free every event
        subscription's driver resources, then shut the library down. Idempotent and thread-safe;
        blocks (about a second and a half at most for NVML: call it off an event loop) and returns
        once nothing of this backend holds the driver. NVML counts initialisations per process, so
        a process is free of the driver once every backend in it has released. The default holds
        nothing."""

    def reacquire(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Take the driver back after ``release``: initialise it again and resume every event
        subscription (re-registering each GPU). Idempotent. Raises GpuError when the driver cannot
        be initialised, and stays released, so the caller retries later. The default holds nothing."""

    # ---- MIG writes (the MIG manager's port); GPUs are named by index -------------------------

    def mig_mode(self, gpu_index: int) -> MigMode:
        """Current and pending MIG mode; NotSupportedError on a GPU without MIG."""
        raise NotSupportedError(f"the {self.name} backend cannot read MIG mode")

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> MigMode:
        """Ask for MIG mode on or off; the answer says whether it took effect or awaits a reset."""
        raise NotSupportedError(f"the {self.name} backend cannot change MIG mode")

    def reset_gpu(self, gpu_index: int) -> None:
        """Reset one GPU (a pending MIG mode takes effect, its MIG instances are gone); not every
        backend can. Raises GpuError when the reset fails. After a successful reset the backend
        reports the GPU recovered on its event stream, so health consumers let it back in.

        A backend that lets go of the driver for the reset and cannot take it back afterwards raises
        NotReacquiredError (whatever the reset's outcome, which the error carries) and stays
        released: the caller must retry ``reacquire`` until it succeeds."""
        raise NotSupportedError(
            f"the {self.name} backend cannot reset GPU {gpu_index}: reset it (nvidia-smi -r -i {gpu_index}) "
            "or reboot the node"
        )

    def burn_in(self, gpu_index: int) -> BurnIn:
        """Check one GPU after a reset before it takes work again (the repair loop's last step)."""
        raise NotSupportedError(f"the {self.name} backend cannot burn in GPU {gpu_index}")

    def gpu_instances(self, gpu_index: int) -> tuple[GpuInstance, ...]:
        """Every GPU instance on the GPU, with its compute instances, in start order."""
        raise NotSupportedError(f"the {self.name} backend cannot list MIG GPU instances")

    def create_gpu_instance(self, gpu_index: int, *, profile: str, start: int) -> int:
        """Create a GPU instance of catalog ``profile`` at memory slice ``start``; returns its id."""
        raise NotSupportedError(f"the {self.name} backend cannot create MIG GPU instances")

    def create_compute_instance(self, gpu_index: int, *, gi_id: int, slices: int | None = None) -> int:
        """Create a compute instance of ``slices`` compute slices in a GPU instance (None: all of
        them, the one full-size instance), where the hardware places it; returns its id."""
        raise NotSupportedError(f"the {self.name} backend cannot create MIG compute instances")

    def destroy_gpu_instance(self, gpu_index: int, gi_id: int) -> None:
        """Destroy a GPU instance and, first, every compute instance in it."""
        raise NotSupportedError(f"the {self.name} backend cannot destroy MIG GPU instances")


class SeenInventory:
    """``backend.inventory()``, or while the backend is released the last inventory it answered.

    What an agent serves from (the device plugin's devices, the DRA plugin's slice and claims,
    feature discovery's labels) does not change because NVML was let go for a reset: the GPUs are
    the same, and the one being reset is withheld by the repair loop's quarantine. Only before
    any answer does a release raise ``ReleasedError``.
    """

    def __init__(self, backend: GpuBackend) -> None:
        self.backend = backend
        self.last: Inventory | None = None

    def __call__(self) -> Inventory:
        try:
            self.last = self.backend.inventory()
        except ReleasedError:
            if self.last is None:
                raise
            log.debug("NVML is let go for a GPU reset: using the inventory seen before")
        return self.last

"""Health read from a GPU's counters rather than from an XID event: what the repair loop acts on too.

NVML reports some conditions only as readings, which ``GpuBackend.health_readings`` returns:

- row remapping (Ampere and newer, ``nvmlDeviceGetRemappedRows``): a remapped row waiting for a
  GPU reset to take effect (``isPending``), or remapping that failed (``failureOccurred``);
- page retirement (GPUs before Ampere, ``nvmlDeviceGetRetiredPagesPendingStatus`` and
  ``nvmlDeviceGetRetiredPages``): a retirement waiting for a reset, and how many pages are retired;
- NVLink error counters (``nvmlDeviceGetNvLinkErrorCounter`` per active link: replay, recovery,
  CRC flit and CRC data errors; cumulative since the driver loaded, so only increases count).

``ProbeState.check`` turns one GPU's readings into tripped probes; each probe has a resolution,
as an XID has. The limits are DCGM's (NVIDIA/DCGM common/DcgmGPUHardwareLimits.h @ 28bfbd4c:
``DCGM_LIMIT_MAX_RETIRED_PAGES`` 60, ``DCGM_LIMIT_MAX_LWLINK_ERROR`` 1,
``DCGM_LIMIT_MAX_LWLINK_CRC_ERROR`` 100 per second). A counter increase keeps its probe tripped
for ``hold_s``, so one burst of link errors is one fault, not a condition that flaps every pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuchain.gpu.xid import Resolution


@dataclass(frozen=True)
class NvLinkCounters:
    """One active NVLink's error counters (None: the driver does not report that counter)."""

    link: int
    replay: int | None = None
    recovery: int | None = None
    crc_flit: int | None = None
    crc_data: int | None = None


@dataclass(frozen=True)
class HealthReadings:
    """One GPU's health counters; a field is None when the GPU or driver does not report it."""

    uuid: str
    row_remap_pending: bool | None = None
    row_remap_failed: bool | None = None
    retired_pages_pending: bool | None = None
    retired_pages_sbe: int | None = None
    """Pages retired for multiple single-bit ECC errors."""
    retired_pages_dbe: int | None = None
    """Pages retired for a double-bit ECC error."""
    nvlink: tuple[NvLinkCounters, ...] = ()

    @property
    def retired_pages(self) -> int | None:
        if self.retired_pages_sbe is None and self.retired_pages_dbe is None:
            return None
        return (self.retired_pages_sbe or 0) + (self.retired_pages_dbe or 0)


@dataclass(frozen=True)
class Probe:
    """A condition a reading can trip: its words for condition messages and Events, and what it needs."""

    text: str
    resolution: Resolution


PROBE_TABLE: Mapping[str, Probe] = {
    "row-remap-failed": Probe("row remapping failed", Resolution.RESET_GPU),
    "row-remap-pending": Probe("row remapping pending (a GPU reset activates it)", Resolution.RESET_GPU),
    "retired-pages-pending": Probe("page retirement pending (a GPU reset activates it)", Resolution.RESET_GPU),
    "retired-pages-limit": Probe("retired pages at DCGM's limit (an RMA candidate)", Resolution.NONE),
    "nvlink-recovery": Probe("NVLink recovery errors (a link went down and retrained)", Resolution.RESET_GPU),
    "nvlink-errors": Probe("NVLink replay or CRC errors above DCGM's limits", Resolution.NONE),
}
"""Every probe. A failed remap is reset first too: the burn-in then fails, and the loop asks for a
reboot and then a person. The ``none`` probes are published (``GPUHealthy=False``) for a person
and change nothing on their own."""

PROBES: Mapping[str, str] = {name: p.text for name, p in PROBE_TABLE.items()}
"""Probe name -> what it means, for condition messages and Events."""


def probe_resolution(name: str) -> Resolution:
    """What a tripped probe needs (a probe this version does not know: a reset, as an unknown XID)."""
    found = PROBE_TABLE.get(name)
    return found.resolution if found is not None else Resolution.RESET_GPU


@dataclass(frozen=True)
class ProbeLimits:
    """When counters trip a probe; the defaults are DCGM's (see the module docstring)."""

    retired_pages: int = 60
    nvlink_errors: int = 1
    """Replay or recovery errors on one link between two readings."""
    nvlink_crc_per_s: float = 100.0
    hold_s: float = 3600.0


def instant(readings: HealthReadings, limits: ProbeLimits | None = None) -> tuple[str, ...]:
    """The probes one reading trips on its own (the state-free ones), in a stable order."""
    limits = limits or ProbeLimits()
    found = []
    if readings.row_remap_failed:
        found.append("row-remap-failed")
    if readings.row_remap_pending:
        found.append("row-remap-pending")
    if readings.retired_pages_pending:
        found.append("retired-pages-pending")
    pages = readings.retired_pages
    if pages is not None and pages >= limits.retired_pages:
        found.append("retired-pages-limit")
    return tuple(found)


def nvlink_trips(
    before: HealthReadings, after: HealthReadings, seconds: float, limits: ProbeLimits | None = None
) -> tuple[str, ...]:
    """The NVLink probes two readings ``seconds`` apart trip. A counter that went down was reset
    (a GPU reset, a driver reload): that link counts from its new value."""
    limits = limits or ProbeLimits()
    old = {c.link: c for c in before.nvlink}
    recovery = errors = False
    for now in after.nvlink:
        was = old.get(now.link)
        if was is None:
            continue
        if _rise(was.recovery, now.recovery) >= limits.nvlink_errors:
            recovery = True
        if _rise(was.replay, now.replay) >= limits.nvlink_errors:
            errors = True
        crc = _rise(was.crc_flit, now.crc_flit) + _rise(was.crc_data, now.crc_data)
        if seconds > 0 and crc / seconds >= limits.nvlink_crc_per_s:
            errors = True
    return (*(("nvlink-recovery",) if recovery else ()), *(("nvlink-errors",) if errors else ()))


def _rise(before: int | None, after: int | None) -> int:
    if before is None or after is None or after < before:
        return 0
    return after - before


@dataclass
class ProbeState:
    """The last readings per GPU and when each counter probe last tripped (the caller passes the clock)."""

    limits: ProbeLimits = field(default_factory=ProbeLimits)
    last: dict[str, tuple[float, HealthReadings]] = field(default_factory=dict)
    tripped_at: dict[tuple[str, str], float] = field(default_factory=dict)
    unverified: dict[str, frozenset[str]] = field(default_factory=dict)
    """GPU UUID -> the counter probes it had when it was reset, kept until two readings after the
    reset were compared (``reset``)."""

    def check(self, readings: HealthReadings, now: float) -> tuple[str, ...]:
        """The probes this GPU trips now: the instant ones, counter probes within ``hold_s`` of
        their last increase, and those a reset has not yet been shown to cure."""
        uuid = readings.uuid
        previous = self.last.get(uuid)
        if previous is not None:
            for name in nvlink_trips(previous[1], readings, now - previous[0], self.limits):
                self.tripped_at[(uuid, name)] = now
            self.unverified.pop(uuid, None)
        self.last[uuid] = (now, readings)
        unverified = self.unverified.get(uuid, frozenset())
        held = tuple(
            name
            for name in ("nvlink-recovery", "nvlink-errors")
            if now - self.tripped_at.get((uuid, name), float("-inf")) < self.limits.hold_s or name in unverified
        )
        return (*instant(readings, self.limits), *held)

    def reset(self, uuid: str, now: float) -> None:
        """The GPU was reset: its counters start afresh, so its history goes. The counter probes it
        had stay until a reading after the reset was compared with the next one: the first reading
        is only a baseline, and a link that keeps failing must not look cured on no evidence."""
        held = frozenset(
            name for (u, name), at in self.tripped_at.items() if u == uuid and now - at < self.limits.hold_s
        )
        self.forget(uuid)
        if held:
            self.unverified[uuid] = held

    def forget(self, uuid: str) -> None:
        """A GPU left: its counter history goes with it."""
        self.last.pop(uuid, None)
        self.tripped_at = {k: v for k, v in self.tripped_at.items() if k[0] != uuid}
        self.unverified.pop(uuid, None)

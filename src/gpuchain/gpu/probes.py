"""Health read from a GPU's counters rather than from an XID event: what the repair loop acts on too.

NVML reports some conditions only as readings, which ``GpuBackend.health_readings`` returns:

- row remapping (Ampere and newer, ``nvmlDeviceGetRemappedRows``): a remapped row waiting for a
  GPU reset to take effect (``isPending``), or remapping that failed (``failureOccurred``);
- page retirement (GPUs before Ampere, ``nvmlDeviceGetRetiredPagesPendingStatus`` and
  ``nvmlDeviceGetRetiredPages``): a retirement waiting for a reset, and how many pages are retired;
- NVLink error counters (``nvmlDeviceGetNvLinkErrorCounter`` per active link: replay, recovery,
  CRC flit and CRC data errors; cumulative since the driver loaded, so only increases count);
- on NVLink5 (Blackwell and later), where NVML no longer reports those counters (nvml.h:
  ``NVML_FI_DEV_NVLINK_ERROR_DL_*`` "unsupported for Blackwell+"), the ``NVML_FI_DEV_NVLINK_COUNT_*``
  field values instead: per link (scopeId = link) link-recovery events (the recovery counter),
  recoveries that failed (the link was declared down), symbol, effective, receive and
  link-integrity errors and the two bit error rates; and the GPU's aggregate BERs (scopeId
  UINT_MAX), which are what DCGM's health check judges.

``ProbeState.check`` turns one GPU's readings into tripped probes; each probe has a resolution,
as an XID has. The limits are DCGM's (NVIDIA/DCGM common/DcgmGPUHardwareLimits.h @ 28bfbd4c and
72fa3fea: ``DCGM_LIMIT_MAX_RETIRED_PAGES`` 63, "updated to match the field diag", judged as
DcgmHealthWatch.cpp ``MonitorMemSbeDbeRetiredPages`` does: single- plus double-bit retirements, 63
or more fail; ``DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT`` 15: more than 15 pages retired for
double-bit errors and more than one more of them than a week earlier fail (DCGM_FR_RETIRED_PAGES_DBE_LIMIT);
``DCGM_LIMIT_MAX_NVLINK_ERROR`` 1, ``DCGM_LIMIT_MAX_NVLINK_CRC_ERROR`` 100 per second). DCGM rates
both retired-page failures ``DCGM_ERROR_ISOLATE`` with the next step "Run a field diagnostic on the
GPU." (dcgmlib/src/dcgm_errors.c, dcgm_errors.h): nothing a reset or reboot lowers, so gpuchain
reports them (resolution none) for a person. NVLink5 is judged as DCGM 4.6 judges it
(NVIDIA/DCGM modules/health/DcgmHealthWatch.cpp @ 72fa3fea, ``MonitorNVLink5Fields`` and
``MonitorNVLinkErrorFields``): any rise of a link-recovery, symbol, effective, receive or
link-integrity error counter fails (``DCGM_LIMIT_MAX_NVLINK_ERROR`` 1); an effective BER worse than
1e-12 or an aggregate symbol BER above its floor fails (``IsEffectiveBerThresholdExceeded`` in
common/DcgmUtilities.cpp, ``DCGM_SYMBOL_BER_FLOOR_EXP_AGGREGATED`` 238 in
common/DcgmGPUHardwareLimits.h). DCGM judges no per-link BER, so per-link BERs are read and reported
but trip nothing. A counter increase keeps its probe tripped for ``hold_s``, so one burst of link
errors is one fault, not a condition that flaps every pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuchain.gpu.xid import Resolution


@dataclass(frozen=True)
class Ber:
    """An NVLink bit error rate as NVML packs it: ``mantissa`` x 10^-``exponent``.

    nvml.h (NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER / _SYMBOL_BER): bits 0-7 the exponent, bits 8-11
    the mantissa (``NVML_NVLINK_ERROR_COUNTER_BER_GET``). Kept as the two integers, not a float,
    because DCGM's limits compare them as integers (10e-13 passes, 11e-13 fails)."""

    mantissa: int
    exponent: int

    @classmethod
    def from_raw(cls, raw: int) -> Ber:
        return cls((raw >> 8) & 0xF, raw & 0xFF)

    @property
    def raw(self) -> int:
        return (self.mantissa << 8) | self.exponent

    def __str__(self) -> str:
        return f"{self.mantissa}e-{self.exponent}"


BER_ZERO = Ber(15, 255)
"""What NVML reports for no errors at all (DCGM's ``berZeroMantissa``/``berZeroExponent``)."""


@dataclass(frozen=True)
class NvLinkCounters:
    """One active NVLink's error counters (None: the driver does not report that counter).

    The first four are ``nvmlDeviceGetNvLinkErrorCounter``'s (before Blackwell); ``recovery`` is
    also NVLink5's link-recovery event count, which NVML names as its replacement. The rest are
    NVLink5 field values (nvml.h ``NVML_FI_DEV_NVLINK_COUNT_*``, per link)."""

    link: int
    replay: int | None = None
    recovery: int | None = None
    crc_flit: int | None = None
    crc_data: int | None = None
    recovery_failed: int | None = None
    """Recoveries that failed: the link was declared down (LINK_RECOVERY_FAILED_EVENTS)."""
    symbol_errors: int | None = None
    """Errors in received symbols (SYMBOL_ERRORS)."""
    effective_errors: int | None = None
    """Sum of the errors in each NVLink packet (EFFECTIVE_ERRORS)."""
    rx_errors: int | None = None
    """Packets received with errors (RCV_ERRORS)."""
    rx_malformed: int | None = None
    """Malformed packets received (MALFORMED_PACKET_ERRORS)."""
    rx_buffer_overrun: int | None = None
    """Packets dropped on receive for a buffer overrun (BUFFER_OVERRUN_ERRORS)."""
    rx_remote_errors: int | None = None
    """Packets received with a stomp/EBP marker (RCV_REMOTE_ERRORS)."""
    rx_general_errors: int | None = None
    """Packets received with a header mismatch (RCV_GENERAL_ERRORS)."""
    link_integrity_errors: int | None = None
    """Times local errors exceeded a threshold (LOCAL_LINK_INTEGRITY_ERRORS)."""
    symbol_ber: Ber | None = None
    """This link's symbol BER: reported; no public per-link limit, so it trips nothing."""
    effective_ber: Ber | None = None
    """This link's effective BER: reported; DCGM judges only the GPU's aggregate."""


def nvlink5(compute_capability: tuple[int, int]) -> bool:
    """Whether a GPU's NVLinks report NVLink5 field values rather than nvmlDeviceGetNvLinkErrorCounter:
    Blackwell (compute capability 10) and later, as DCGM decides it (``IsGpuBlackwellOrNewer``)."""
    return compute_capability[0] >= 10


NVLINK5_ERRORS = (
    "symbol_errors",
    "effective_errors",
    "rx_errors",
    "rx_malformed",
    "rx_buffer_overrun",
    "rx_remote_errors",
    "rx_general_errors",
    "link_integrity_errors",
)
"""The NVLink5 counters DCGM fails on any rise of (``MonitorNVLink5Fields``), besides recovery."""


@dataclass(frozen=True, kw_only=True)
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
    nvlink_symbol_ber: Ber | None = None
    """The GPU's symbol BER over all its links (NVLink5, scopeId UINT_MAX), as DCGM reads it."""
    nvlink_effective_ber: Ber | None = None
    """The GPU's effective BER over all its links (NVLink5, scopeId UINT_MAX), as DCGM reads it."""

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
    "retired-pages-dbe-rate": Probe(
        "pages still being retired for double-bit errors past DCGM's limit (an RMA candidate)", Resolution.NONE
    ),
    "nvlink-recovery": Probe("NVLink recovery errors (a link went down and retrained)", Resolution.RESET_GPU),
    "nvlink-errors": Probe(
        "NVLink replay, CRC, symbol, packet or link-integrity errors above DCGM's limits", Resolution.NONE
    ),
    "nvlink-ber": Probe("NVLink bit error rate above DCGM's limit", Resolution.NONE),
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


def burn_in_verdict(tripped: Iterable[str]) -> tuple[bool, str]:
    """Whether a burn-in check passes on the probes a GPU trips after its repair, and what it reports.

    A burn-in asks whether the repair worked, so only probes a repair is for (resolution reset or
    reboot) fail it. A probe whose resolution is none stays after any repair: retired pages at
    DCGM's limit are a count kept in the InfoROM, which neither a reset nor a reboot lowers. Failing
    on it would turn a GPU that serves like its untouched neighbour into a reboot request and then
    a failed GPU; it is named in the detail instead, and gpu-health keeps publishing it. Both
    backends' burn-ins judge through this one rule."""
    names = tuple(dict.fromkeys(tripped))
    failing = [PROBES.get(n, n) for n in names if probe_resolution(n).repairs]
    reported = [PROBES.get(n, n) for n in names if not probe_resolution(n).repairs]
    detail = "; ".join(failing)
    if reported:
        detail = "; ".join(filter(None, (detail, "needs no repair: " + "; ".join(reported))))
    return not failing, detail


@dataclass(frozen=True, kw_only=True)
class ProbeLimits:
    """When counters trip a probe; the defaults are DCGM's (see the module docstring)."""

    retired_pages: int = 63
    retired_pages_dbe: int = 15
    """Pages retired for double-bit errors above which their weekly rise is judged
    (``DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT``)."""
    dbe_pages_per_window: int = 1
    """More double-bit retirements than this within ``dbe_window_s`` trip ``retired-pages-dbe-rate``."""
    dbe_window_s: float = 604800.0
    """DCGM compares with the count a week earlier."""
    nvlink_errors: int = 1
    """Replay or recovery errors (NVLink5: recovery events or any error counter) on one link between
    two readings."""
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


EFFECTIVE_BER_LIMIT = Ber(1, 12)
"""DCGM fails an effective BER worse than 1e-12 (``IsEffectiveBerThresholdExceeded``)."""
SYMBOL_BER_FLOOR_EXPONENT = 238
"""DCGM's floor for the aggregate symbol BER on Blackwell (``DCGM_SYMBOL_BER_FLOOR_EXP_AGGREGATED``)."""


def effective_ber_exceeded(ber: Ber) -> bool:
    """DCGM's rule: worse than 1e-12, the no-error encoding (15e-255) excepted. At exponent 13 a
    mantissa up to 10 is still 1e-12 or better; a smaller exponent is a larger rate."""
    if ber == BER_ZERO:
        return False
    limit = EFFECTIVE_BER_LIMIT.exponent
    return (
        ber.exponent < limit
        or (ber.exponent == limit and ber.mantissa > EFFECTIVE_BER_LIMIT.mantissa)
        or (ber.exponent == limit + 1 and ber.mantissa > 10 * EFFECTIVE_BER_LIMIT.mantissa)
    )


def symbol_ber_exceeded(ber: Ber, floor_exponent: int = SYMBOL_BER_FLOOR_EXPONENT) -> bool:
    """DCGM's rule (``IsSymbolBerThresholdExceeded``): a zero mantissa is no errors; otherwise any
    rate above 15 x 10^-floor fails."""
    if ber.mantissa == 0:
        return False
    if ber.exponent == floor_exponent:
        return ber.mantissa > 15
    return ber.exponent < floor_exponent


def nvlink_ber(readings: HealthReadings) -> tuple[str, ...]:
    """The BER probe the GPU's aggregate NVLink bit error rates trip on their own.

    Kept out of ``instant``: the burn-ins judge ``instant``'s probes, and neither burn-in has an
    NVLink BER check, so the simulator's must not grow one the NVML backend lacks."""
    effective, symbol = readings.nvlink_effective_ber, readings.nvlink_symbol_ber
    if (effective is not None and effective_ber_exceeded(effective)) or (
        symbol is not None and symbol_ber_exceeded(symbol)
    ):
        return ("nvlink-ber",)
    return ()


def nvlink_trips(
    before: HealthReadings, *, after: HealthReadings, seconds: float, limits: ProbeLimits | None = None
) -> tuple[str, ...]:
    """The NVLink counter probes two readings ``seconds`` apart trip: a recovery (on NVLink5 also a
    failed one) trips ``nvlink-recovery``; replay errors, CRC errors at DCGM's rate, or a rise of any
    NVLink5 error counter trip ``nvlink-errors``. A counter that went down was reset (a GPU reset, a
    driver reload): that link counts from its new value."""
    limits = limits or ProbeLimits()
    old = {c.link: c for c in before.nvlink}
    recovery = errors = False
    for now in after.nvlink:
        was = old.get(now.link)
        if was is None:
            continue
        if max(_rise(was.recovery, now.recovery), _rise(was.recovery_failed, now.recovery_failed)) >= (
            limits.nvlink_errors
        ):
            recovery = True
        if _rise(was.replay, now.replay) >= limits.nvlink_errors:
            errors = True
        if any(_rise(getattr(was, n), getattr(now, n)) >= limits.nvlink_errors for n in NVLINK5_ERRORS):
            errors = True
        crc = _rise(was.crc_flit, now.crc_flit) + _rise(was.crc_data, now.crc_data)
        if seconds > 0 and crc / seconds >= limits.nvlink_crc_per_s:
            errors = True
    return (*(("nvlink-recovery",) if recovery else ()), *(("nvlink-errors",) if errors else ()))


def dbe_rate_trips(dbe: int, *, week_ago: int | None, limits: ProbeLimits | None = None) -> bool:
    """DCGM's rule (``MonitorMemSbeDbeRetiredPages``): more pages retired for double-bit errors than
    the soft limit, and more than one more of them than a week earlier. Without a count from a week
    earlier (DCGM: a blank sample) there is no verdict."""
    limits = limits or ProbeLimits()
    return dbe > limits.retired_pages_dbe and week_ago is not None and dbe - week_ago > limits.dbe_pages_per_window


def _rise(before: int | None, after: int | None) -> int:
    if before is None or after is None or after < before:
        return 0
    return after - before


@dataclass(kw_only=True)
class ProbeState:
    """The last readings per GPU and when each counter probe last tripped (the caller passes the clock)."""

    limits: ProbeLimits = field(default_factory=ProbeLimits)
    last: dict[str, tuple[float, HealthReadings]] = field(default_factory=dict)
    tripped_at: dict[tuple[str, str], float] = field(default_factory=dict)
    unverified: dict[str, frozenset[str]] = field(default_factory=dict)
    """GPU UUID -> the counter probes it had when it was reset, kept until two readings after the
    reset were compared (``reset``)."""
    dbe_history: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    """GPU UUID -> (when, count) of its double-bit page retirements: the first reading and each
    change, back to the last one older than ``dbe_window_s`` (the count a window earlier). Kept
    across a reset (the count lives in the InfoROM); lost when gpu-health restarts, after which
    ``retired-pages-dbe-rate`` has no verdict for a window, as DCGM has none without a week-old
    sample."""

    def check(self, readings: HealthReadings, now: float) -> tuple[str, ...]:
        """The probes this GPU trips now: the instant ones, the double-bit retirements' rise over
        the window, counter probes within ``hold_s`` of their last increase, and those a reset has
        not yet been shown to cure."""
        uuid = readings.uuid
        previous = self.last.get(uuid)
        if previous is not None:
            for name in nvlink_trips(previous[1], after=readings, seconds=now - previous[0], limits=self.limits):
                self.tripped_at[(uuid, name)] = now
            self.unverified.pop(uuid, None)
        self.last[uuid] = (now, readings)
        dbe = readings.retired_pages_dbe
        rate = ("retired-pages-dbe-rate",) if dbe is not None and self._dbe_rate(uuid, dbe, now) else ()
        unverified = self.unverified.get(uuid, frozenset())
        held = tuple(
            name
            for name in ("nvlink-recovery", "nvlink-errors")
            if now - self.tripped_at.get((uuid, name), float("-inf")) < self.limits.hold_s or name in unverified
        )
        return (*instant(readings, self.limits), *rate, *nvlink_ber(readings), *held)

    def _dbe_rate(self, uuid: str, dbe: int, now: float) -> bool:
        """Record this double-bit retirement count and judge it against the one a window earlier."""
        history = self.dbe_history.setdefault(uuid, [])
        if not history or history[-1][1] != dbe:
            history.append((now, dbe))
        cutoff = now - self.limits.dbe_window_s
        older = [i for i, (at, _) in enumerate(history) if at <= cutoff]
        if older:
            del history[: older[-1]]
        week_ago = history[0][1] if history[0][0] <= cutoff else None
        return dbe_rate_trips(dbe, week_ago=week_ago, limits=self.limits)

    def reset(self, uuid: str, now: float) -> None:
        """The GPU was reset: its counters start afresh, so its history goes. The counter probes it
        had stay until a reading after the reset was compared with the next one: the first reading
        is only a baseline, and a link that keeps failing must not look cured on no evidence. A second
        reset before that comparison (NvmlBackend reports a lost GPU's return and then its reset) keeps
        what the first one left unverified: it brings no evidence either."""
        held = self.unverified.get(uuid, frozenset()) | frozenset(
            name for (u, name), at in self.tripped_at.items() if u == uuid and now - at < self.limits.hold_s
        )
        dbe = self.dbe_history.get(uuid)
        self.forget(uuid)
        if held:
            self.unverified[uuid] = held
        if dbe is not None:  # retired pages survive a reset
            self.dbe_history[uuid] = dbe

    def forget(self, uuid: str) -> None:
        """A GPU left: its counter history goes with it."""
        self.last.pop(uuid, None)
        self.tripped_at = {k: v for k, v in self.tripped_at.items() if k[0] != uuid}
        self.unverified.pop(uuid, None)
        self.dbe_history.pop(uuid, None)

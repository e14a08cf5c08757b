"""A simulated node's GPUs: the embedded default behind every command and most tests.

Built from a topology (preset or file). Faults are injected through methods (an XID on a GPU
or a MIG device, a GPU falling off the bus, its return) and reach every subscriber of
``events()`` at once, from any thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from gpuchain.gpu import catalog
from gpuchain.gpu.backend import BurnIn, BurnInCheck, ComputeInstance, GpuBackend, GpuInstance, MigMode
from gpuchain.gpu.errors import (
    GpuError,
    GpuLostError,
    InvalidConfigError,
    NotFoundError,
    NotSupportedError,
    ReleasedError,
)
from gpuchain.gpu.model import (
    EventKind,
    Gpu,
    HealthEvent,
    Inventory,
    MigDevice,
    MigMemory,
    Telemetry,
)
from gpuchain.gpu.probes import BER_ZERO, Ber, HealthReadings, NvLinkCounters, burn_in_verdict, instant, nvlink5
from gpuchain.gpu.processes import GpuProcess
from gpuchain.gpu.topology import SimGpuSpec, Topology, load_preset, stable_uuid

XID_GPU_FALLEN_OFF_BUS = 79
PCI_CLASS_3D_CONTROLLER = 0x030200
"""Every catalogued card is a data-centre GPU, which enumerates as a 3D controller (no display)."""
MIG_READINGS = frozenset({"memory_used_mib"})
"""The readings a MIG device has of its own; everything else is its parent GPU's."""

Listener = Callable[[HealthEvent], None]
BURN_IN_FAILURES = {
    "nvml": "NVML did not answer",
    "cuda": "test kernel returned wrong results",
    "memory": "memory test found errors",
    "fabric": "NVLink fabric state In Progress after 60 s",
    "dcgm": "diagnostic: DCGM's diagnostic test failed on this GPU",
}
"""The burn-in checks SimBackend models, in order, and what each reports when told to fail:
the same checks NvmlBackend runs (fabric only on Hopper-or-later NVSwitch GPUs, dcgm only where
``dcgm`` says the node has DCGM)."""
BURN_IN_CHECKS = tuple(BURN_IN_FAILURES)
_BURN_IN_ORDER = ("nvml", "fabric", "cuda", "memory", "dcgm")
"""The order the checks run in, as on hardware: nothing runs on a GPU NVML found at fault."""


@dataclass(frozen=True)
class _CleanNvLink:
    """What a GPU's NVLinks read before any error: each link's counters, and the GPU's aggregates."""

    link: NvLinkCounters
    aggregate: dict[str, Ber]


_NVLINK_CLEAN = _CleanNvLink(NvLinkCounters(0, replay=0, recovery=0, crc_flit=0, crc_data=0), {})
"""Before Blackwell: nvmlDeviceGetNvLinkErrorCounter's four counters, no NVLink5 field values."""
_NVLINK5_CLEAN = _CleanNvLink(
    NvLinkCounters(
        0,
        recovery=0,
        recovery_failed=0,
        symbol_errors=0,
        effective_errors=0,
        rx_errors=0,
        rx_malformed=0,
        rx_buffer_overrun=0,
        rx_remote_errors=0,
        rx_general_errors=0,
        link_integrity_errors=0,
        symbol_ber=BER_ZERO,
        effective_ber=BER_ZERO,
    ),
    {"symbol_ber": Ber(15, 238), "effective_ber": BER_ZERO},
)
"""Blackwell and later: NVLink5 field values, no replay or CRC counters. A healthy B200's aggregate
symbol BER reads 15e-238 (raw 73710, NVIDIA/DCGM testing/python3/tests/test_field_values.py
``test_nvlink_ber_fields`` @ 72fa3fea: "Blackwell aggregate healthy floor"); a BER with no errors
reads 15e-255 (raw 4095, the same test and DcgmHealthWatch's healthy baselines)."""


@dataclass
class _GiState:
    profile: catalog.MigProfile
    start: int
    compute_instances: dict[int, tuple[int, int]] = field(default_factory=dict)
    """ci_id -> (first compute slice, compute slices)."""

    def add_compute_instance(self, slices: int, where: str) -> int:
        """Put a compute instance of ``slices`` at the first legal start no other one covers, as
        NVML does when asked without a placement; refuse what the GPU instance does not offer."""
        gi_slices = self.profile.gi_slices
        starts = catalog.compute_starts(slices, gi_slices)
        if not starts:
            raise InvalidConfigError(
                f"{where}: a {self.profile.name} GPU instance has no {slices}-slice compute instance"
            )
        used = [(start, n) for start, n in self.compute_instances.values()]
        free = [s for s in starts if not any(s < u + n and u < s + slices for u, n in used)]
        if not free:
            raise InvalidConfigError(f"{where}: no room for another {slices}-slice compute instance")
        ci_id = next(i for i in range(8) if i not in self.compute_instances)
        self.compute_instances[ci_id] = (free[0], slices)
        return ci_id


@dataclass
class _GpuState:
    spec: SimGpuSpec
    lost: bool = False
    mig_enabled: bool = False
    mig_pending: bool = False
    mig_devices: list[MigDevice] = field(default_factory=list)
    instances: dict[int, _GiState] = field(default_factory=dict)
    telemetry: dict[str, Any] = field(default_factory=dict)
    mig_used_mib: dict[str, int] = field(default_factory=dict)
    """MIG device UUID -> framebuffer used (MiB); a device not listed uses none."""
    processes: dict[int, GpuProcess] = field(default_factory=dict)
    """PID -> a process running on this GPU or one of its MIG devices (``run_process``)."""
    reset_failures: int = 0
    """How many coming resets fail (-1: every one), set by ``fail_reset``."""
    reset_failure: str = ""
    """What a failing reset says (nvidia-smi's words); empty: a generic failure."""
    burn_in_failures: dict[str, int] = field(default_factory=dict)
    """Burn-in check name -> how many coming burn-ins it fails (-1: every one), set by ``fail_burn_in``."""


class SimBackend(GpuBackend):
    """GPUs that exist only in memory, answering exactly as the NVML backend would."""

    name = "sim"

    mig_mode_needs_reset = False
    """Set True to model GPUs (A100 on some hosts) whose MIG mode change waits for a GPU reset."""

    dcgm = False
    """Set True to model a node with DCGM installed: the burn-in then runs (and can fail) "dcgm"."""

    def __init__(self, topology: Topology, clock: Callable[[], float] = time.monotonic) -> None:
        self.topology = topology
        self._clock = clock
        self._started = clock()
        self._lock = threading.RLock()
        self._listeners: list[Listener] = []
        self._subscriptions: list[Listener] = []
        """The ``events()`` streams: paused while released, unlike the raw listeners."""
        self._released = False
        self._lost_at_release: set[str] = set()
        self._reset_while_released: list[str] = []
        self._driver = topology.driver_info()
        self._links = topology.gpu_links()
        self._gpus = [_GpuState(spec) for spec in topology.expanded()]
        self._readings: dict[str, dict[str, Any]] = {}
        """GPU UUID -> health counters set by ``set_health_readings`` / ``add_nvlink_errors``."""
        for state in self._gpus:
            if state.spec.mig is not None:
                state.mig_enabled = state.mig_pending = True
                self._carve(state, state.spec.mig)

    @classmethod
    def from_preset(cls, name: str, node: str | None = None) -> SimBackend:
        return cls(load_preset(name, node))

    # ---- GpuBackend ---------------------------------------------------------------------------

    def inventory(self) -> Inventory:
        with self._lock:
            self._refuse_if_released("inventory")
            gpus = tuple(self._gpu(s) for s in self._gpus if not s.lost)
        return Inventory(self._driver, gpus, self._links)

    def telemetry(self, gpu_uuid: str) -> Telemetry:
        with self._lock:
            self._refuse_if_released("telemetry")
            state = self._state(gpu_uuid)
            if state.lost:
                raise GpuLostError(f"GPU {state.spec.uuid} is lost (fell off the bus); reset or reboot the node")
            spec = state.spec
            # Processes set the GPU's readings unless a test set them: what NVML reports for the device
            # is what its processes use, so the per-process figures never sum past it.
            procs = [p for p in state.processes.values() if p.device_uuid == spec.uuid]
            util = int(state.telemetry.get("gpu_util", min(100, sum(p.sm_percent or 0 for p in procs))))
            used = int(state.telemetry.get("memory_used_mib", sum(p.used_memory_mib or 0 for p in procs)))
            reserved = spec.model.memory_mib // 100
            power = 70.0 + util * 6.3
            elapsed = self._clock() - self._started
            base: dict[str, Any] = {
                "gpu_util": util,
                "mem_copy_util": util // 2,
                "enc_util": 0,
                "dec_util": 0,
                "memory_used_mib": used,
                "memory_free_mib": spec.model.memory_mib - reserved - used,
                "memory_reserved_mib": reserved,
                "temperature_c": 32 + util // 3,
                "memory_temperature_c": 38 + util // 4,
                "power_w": power,
                "energy_mj": int(power * elapsed * 1000),
                "sm_clock_mhz": 1980 if util else 345,
                "mem_clock_mhz": 2619,
                "pcie_replay": 0,
                "remapped_rows_correctable": 0,
                "remapped_rows_uncorrectable": 0,
                "row_remap_failure": 0,
                "row_remap_pending": 0,
            }
            base.update(state.telemetry)
        return Telemetry(uuid=spec.uuid, **base)

    def processes(self, gpu_uuid: str) -> tuple[GpuProcess, ...]:
        with self._lock:
            self._refuse_if_released("processes")
            state = self._state(gpu_uuid)
            if state.lost:
                raise GpuLostError(f"GPU {state.spec.uuid} is lost (fell off the bus); reset or reboot the node")
            return tuple(sorted(state.processes.values(), key=lambda p: p.pid))

    def run_process(
        self, device: int | str, pid: int, memory_mib: int | None, sm_percent: int = 0, mps: bool = False
    ) -> GpuProcess:
        """Start a simulated process on a GPU (index or UUID) or MIG device (UUID) holding
        ``memory_mib`` of framebuffer and ``sm_percent`` of the SMs (no SM figure on a MIG device,
        as NVML gives none; ``memory_mib=None``: the driver withholds the figure). The device's own
        memory and utilisation readings then include it.
        Refused (ValueError) when the processes on the device would use more memory than it has
        or more than 100% of its SMs."""
        with self._lock:
            state, mig = self._resolve(device)
            uuid = mig.uuid if mig is not None else state.spec.uuid
            capacity = mig.memory_mib if mig is not None else state.spec.model.memory_mib
            on_device = [p for p in state.processes.values() if p.device_uuid == uuid and p.pid != pid]
            if memory_mib is not None and (
                memory_mib < 0 or sum(p.used_memory_mib or 0 for p in on_device) + memory_mib > capacity
            ):
                raise ValueError(f"process {pid}: {memory_mib} MiB does not fit in {uuid}'s {capacity} MiB")
            if not 0 <= sm_percent <= 100 - sum(p.sm_percent or 0 for p in on_device):
                raise ValueError(f"process {pid}: {sm_percent}% SM would take {uuid} past 100%")
            proc = GpuProcess(pid, uuid, memory_mib, None if mig is not None else sm_percent, mps)
            state.processes[pid] = proc
            if mig is not None:
                state.mig_used_mib[uuid] = sum(p.used_memory_mib or 0 for p in [*on_device, proc])
            return proc

    def health_readings(self, gpu_uuid: str) -> HealthReadings:
        """As NVML reports them on this GPU, by generation: row remapping (from the telemetry) on
        Ampere and newer, page retirement before Ampere (none retired and none pending until set;
        on Ampere and newer only once set), error counters on every NVLink (NVLink5 field values on
        Blackwell and later). NVIDIA's T4 capture (k8s-test-infra qx-t4.xml) shows both:
        retired_pages with counts, remapped_rows N/A."""
        with self._lock:
            self._refuse_if_released("health_readings")
            state = self._state(gpu_uuid)
            if state.lost:
                raise GpuLostError(f"GPU {state.spec.uuid} is lost (fell off the bus); reset or reboot the node")
            uuid = state.spec.uuid
            extra = dict(self._readings.get(uuid, {}))
            t = state.telemetry
            links = self._nvlink_count(state)
            remaps = state.spec.model.compute_capability[0] >= 8
        counters = extra.pop("nvlink", {})
        if not remaps:
            extra = {"retired_pages_pending": False, "retired_pages_sbe": 0, "retired_pages_dbe": 0, **extra}
        clean = _NVLINK5_CLEAN if nvlink5(state.spec.model.compute_capability) else _NVLINK_CLEAN
        aggregate = {**clean.aggregate, **counters.get(None, {})} if links else {}
        return HealthReadings(
            uuid=uuid,
            row_remap_pending=bool(t.get("row_remap_pending", 0)) if remaps else None,
            row_remap_failed=bool(t.get("row_remap_failure", 0)) if remaps else None,
            nvlink=tuple(replace(clean.link, link=link, **counters.get(link, {})) for link in range(links)),
            nvlink_symbol_ber=aggregate.get("symbol_ber"),
            nvlink_effective_ber=aggregate.get("effective_ber"),
            **extra,
        )

    def _nvlink_count(self, state: _GpuState) -> int:
        """Active NVLinks of a GPU: every link of its model to the NVSwitches, else its direct lanes."""
        topo, model = self.topology, state.spec.model
        if (topo.interconnect or ("nvswitch" if model.nvlinks else "pcie")) == "nvswitch" and not topo.links:
            return model.nvlinks
        return sum(link.nvlinks for link in self._links if state.spec.index in (link.a, link.b))

    def set_health_readings(
        self,
        device: int | str,
        retired_pages_pending: bool | None = None,
        retired_pages_sbe: int | None = None,
        retired_pages_dbe: int | None = None,
    ) -> None:
        """Set page-retirement readings of a GPU (index or UUID), as a pre-Ampere GPU reports them."""
        with self._lock:
            uuid = self._resolve(device, include_lost=True)[0].spec.uuid
            values = {
                "retired_pages_pending": retired_pages_pending,
                "retired_pages_sbe": retired_pages_sbe,
                "retired_pages_dbe": retired_pages_dbe,
            }
            self._readings.setdefault(uuid, {}).update({k: v for k, v in values.items() if v is not None})

    def add_nvlink_errors(self, device: int | str, link: int, **counts: int) -> None:
        """Add to one NVLink's error counters (they only grow, until a reset clears them): any count
        of NvLinkCounters the GPU reports, e.g. ``recovery=1``; ``replay``, ``crc_flit`` and
        ``crc_data`` before Blackwell, ``symbol_errors``, ``recovery_failed`` ... from Blackwell on."""
        with self._lock:
            state = self._resolve(device, include_lost=True)[0]
            clean = _NVLINK5_CLEAN if nvlink5(state.spec.model.compute_capability) else _NVLINK_CLEAN
            counters = self._readings.setdefault(state.spec.uuid, {}).setdefault("nvlink", {})
            now = counters.setdefault(link, {})
            for name, n in counts.items():
                start = getattr(clean.link, name, None)
                if not isinstance(start, int):
                    raise NotSupportedError(f"{state.spec.model.key} reports no NVLink counter {name!r}")
                now[name] = now.get(name, start) + n

    def set_nvlink_ber(
        self, device: int | str, link: int | None = None, symbol: Ber | None = None, effective: Ber | None = None
    ) -> None:
        """Set an NVLink5 GPU's symbol or effective bit error rate: one link's, or (``link`` None)
        the GPU's aggregate, the one DCGM judges. A reset clears them, as it clears the counters."""
        with self._lock:
            state = self._resolve(device, include_lost=True)[0]
            if not nvlink5(state.spec.model.compute_capability):
                raise NotSupportedError(f"{state.spec.model.key} reports no NVLink bit error rate")
            now = self._readings.setdefault(state.spec.uuid, {}).setdefault("nvlink", {}).setdefault(link, {})
            now.update({k: v for k, v in (("symbol_ber", symbol), ("effective_ber", effective)) if v is not None})

    def _reset_readings(self, uuid: str) -> None:
        """A reset activates a pending retirement and clears the NVLink counters; retired pages stay.

        NVIDIA's Dynamic Page Retirement guide (docs.nvidia.com/deploy/dynamic-page-retirement):
        the retired-page counts are incremented when a page is retired and kept in the InfoROM
        ("preserved across boots"), while the page itself is excluded "upon the next reattachment
        of the GPU", when the driver initializes it again, so the pending flag goes and the counts
        do not. The probe verdicts do not depend on whether a reset zeroes the NVLink counters
        (no NVIDIA document found says either way): the publisher starts each GPU's counter
        history afresh after a reset, so only a rise after it counts."""
        readings = self._readings.get(uuid, {})
        readings.pop("retired_pages_pending", None)
        readings.pop("nvlink", None)

    def mig_memory(self, mig_uuid: str) -> MigMemory:
        with self._lock:
            self._refuse_if_released("mig_memory")
            state, mig = self._resolve(mig_uuid, include_lost=True)
            if mig is None:
                raise NotFoundError(f"{mig_uuid} is a whole GPU, not a MIG device: read its memory with telemetry()")
            if state.lost:
                raise GpuLostError(f"GPU {state.spec.uuid} is lost (fell off the bus); reset or reboot the node")
            used = state.mig_used_mib.get(mig.uuid, 0)
        return MigMemory(mig.uuid, mig.memory_mib, used, mig.memory_mib - used)

    @property
    def subscribers(self) -> int:
        """``events()`` streams open now. As with NVML, a fault raised before a follower has
        subscribed is never delivered to it, so whoever injects one waits for this first."""
        with self._lock:
            return len(self._subscriptions)

    async def events(self) -> AsyncIterator[HealthEvent]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[HealthEvent] = asyncio.Queue()

        def deliver(event: HealthEvent) -> None:
            try:
                same_loop = asyncio.get_running_loop() is loop
            except RuntimeError:
                same_loop = False
            if same_loop:
                queue.put_nowait(event)
            else:
                loop.call_soon_threadsafe(queue.put_nowait, event)

        with self._lock:
            self._subscriptions.append(deliver)
        try:
            while True:
                yield await queue.get()
        finally:
            with self._lock:
                self._subscriptions.remove(deliver)

    # ---- letting go of the driver around a GPU reset --------------------------------------------

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Let go as NvmlBackend does: every ``events()`` stream stays open and delivers nothing (an
        event raised meanwhile never reaches it: NVML would have no event set to queue it on), and
        every read raises ReleasedError. The GPUs go on: faults can still be injected, the raw
        listeners (``add_listener``) still hear them, and ``reset_gpu`` (the driver's reset, which
        nvidia-smi runs as a process of its own) still resets."""
        with self._lock:
            if self._released:
                return
            self._released = True
            self._lost_at_release = {s.spec.uuid for s in self._gpus if s.lost}
            self._reset_while_released = []

    def reacquire(self) -> None:
        """Take the driver back: the streams resume and hear what NvmlBackend's watcher finds once it
        looks again: a GPU reset meanwhile is recovered ("GPU reset"), one that fell off the bus
        meanwhile is lost, one that came back meanwhile is recovered ("GPU answers again")."""
        with self._lock:
            if not self._released:
                return
            self._released = False
            now = time.time()
            reset = list(dict.fromkeys(self._reset_while_released))
            events = [HealthEvent(EventKind.GPU_RECOVERED, uuid, message="GPU reset", timestamp=now) for uuid in reset]
            for state in self._gpus:
                uuid, was_lost = state.spec.uuid, state.spec.uuid in self._lost_at_release
                if state.lost and not was_lost:
                    events.append(HealthEvent(EventKind.GPU_LOST, uuid, message="GPU is lost", timestamp=now))
                elif was_lost and not state.lost and uuid not in reset:
                    events.append(
                        HealthEvent(EventKind.GPU_RECOVERED, uuid, message="GPU answers again", timestamp=now)
                    )
            subscriptions = list(self._subscriptions)
        for event in events:
            for deliver in subscriptions:
                deliver(event)

    def _refuse_if_released(self, what: str) -> None:
        if self._released:
            raise ReleasedError(
                f"{what}: the simulated node's GPUs are released while a GPU is reset; no reading until reacquired"
            )

    # ---- fault injection ----------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` synchronously, on the injecting thread, for every event."""
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def inject_xid(self, device: int | str, xid: int, message: str = "") -> HealthEvent:
        """Raise XID ``xid`` on a GPU (index or UUID) or on one MIG device (its UUID)."""
        with self._lock:
            state, mig = self._resolve(device, include_lost=True)
            event = HealthEvent(
                EventKind.XID,
                state.spec.uuid,
                xid=xid,
                mig_uuid=mig.uuid if mig else None,
                message=message or f"XID {xid}",
                timestamp=time.time(),
            )
        self._publish(event)
        return event

    def lose_gpu(self, device: int | str) -> list[HealthEvent]:
        """The GPU falls off the bus: XID 79, then it stops answering (left out of inventory)."""
        with self._lock:
            state, _ = self._resolve(device)
            state.lost = True
        xid = self.inject_xid(state.spec.uuid, XID_GPU_FALLEN_OFF_BUS, "GPU has fallen off the bus")
        lost = HealthEvent(EventKind.GPU_LOST, state.spec.uuid, message="GPU is lost", timestamp=time.time())
        self._publish(lost)
        return [xid, lost]

    def recover_gpu(self, device: int | str) -> HealthEvent:
        """The GPU answers again (after a reset)."""
        with self._lock:
            state, _ = self._resolve(device, include_lost=True)
            state.lost = False
        event = HealthEvent(
            EventKind.GPU_RECOVERED, state.spec.uuid, message="GPU answers again", timestamp=time.time()
        )
        self._publish(event)
        return event

    def set_telemetry(self, device: int | str, **readings: Any) -> None:
        """Override readings of one GPU (``gpu_util=90``, ``memory_used_mib=4000`` …).

        A MIG device UUID sets that device's own reading (only ``memory_used_mib``: the rest
        of a MIG device's readings are its parent GPU's).
        """
        unknown = set(readings) - set(Telemetry.__dataclass_fields__) - {"uuid"}
        if unknown:
            raise ValueError(f"unknown telemetry fields: {', '.join(sorted(unknown))}")
        with self._lock:
            state, mig = self._resolve(device, include_lost=True)
            if mig is None:
                state.telemetry.update(readings)
                return
            not_own = set(readings) - MIG_READINGS
            if not_own:
                raise ValueError(
                    f"MIG device {mig.uuid} has no reading {', '.join(sorted(not_own))} of its own; "
                    f"set it on GPU {state.spec.index}, or set only {', '.join(sorted(MIG_READINGS))}"
                )
            if "memory_used_mib" not in readings:
                return
            used = int(readings["memory_used_mib"])
            if not 0 <= used <= mig.memory_mib:
                raise ValueError(f"memory_used_mib={used} is outside MIG device {mig.uuid}'s 0..{mig.memory_mib} MiB")
            state.mig_used_mib[mig.uuid] = used

    # ---- MIG state (the MIG manager drives these) --------------------------------------------

    def set_mig_layout(self, gpu_index: int, layout: dict[str, int] | None) -> None:
        """Enable MIG with ``layout`` on one GPU, or disable MIG with ``None``."""
        with self._lock:
            state, _ = self._resolve(gpu_index)
            state.instances.clear()
            state.mig_enabled = state.mig_pending = layout is not None
            if layout is None:
                self._refresh(state)
            else:
                self._carve(state, layout)

    def mig_mode(self, gpu_index: int) -> MigMode:
        with self._lock:
            self._refuse_if_released("mig_mode")
            state = self._mig_gpu(gpu_index)
            return MigMode(state.mig_enabled, state.mig_pending)

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> MigMode:
        with self._lock:
            self._refuse_if_released("set_mig_mode")
            state = self._mig_gpu(gpu_index)
            if not enabled and state.instances:
                raise GpuError(
                    f"GPU {gpu_index}: cannot disable MIG mode while {len(state.instances)} GPU instances exist; "
                    "destroy them first"
                )
            state.mig_pending = enabled
            if not self.mig_mode_needs_reset:
                state.mig_enabled = enabled
            return MigMode(state.mig_enabled, state.mig_pending)

    def reset_gpu(self, gpu_index: int) -> None:
        """Reset as the driver would: a lost GPU cannot be reset (GpuLostError), a failure set by
        ``fail_reset`` raises GpuError; success applies the pending MIG mode, drops the MIG
        instances and reports the GPU recovered (to the ``events()`` streams at ``reacquire``, when
        they are paused). It works while released: it is the driver's reset, not a read."""
        with self._lock:
            state, _ = self._resolve(gpu_index)
            if state.reset_failures:
                state.reset_failures -= 1 if state.reset_failures > 0 else 0
                why = state.reset_failure or "reset failed (the GPU is in use or did not come back)"
                raise GpuError(f"GPU {gpu_index}: {why}")
            state.mig_enabled = state.mig_pending
            state.instances.clear()
            state.telemetry.pop("row_remap_pending", None)  # a reset activates the pending remap
            self._reset_readings(state.spec.uuid)
            self._refresh(state)
            uuid = state.spec.uuid
            if self._released:  # the streams are paused: they hear it at reacquire, as NvmlBackend's do
                self._reset_while_released.append(uuid)
        self._publish(HealthEvent(EventKind.GPU_RECOVERED, uuid, message="GPU reset", timestamp=time.time()))

    def fail_reset(self, gpu_index: int, times: int = -1, reason: str = "") -> None:
        """Make the next ``times`` resets of this GPU fail (-1: all of them; 0: none again), saying
        ``reason`` (for instance nvidia-smi's "In use by another client") or a generic failure."""
        with self._lock:
            state = self._resolve(gpu_index, include_lost=True)[0]
            state.reset_failures, state.reset_failure = times, reason

    def fail_burn_in(self, gpu_index: int, check: str = "memory", times: int = -1) -> None:
        """Make ``check`` (one of BURN_IN_CHECKS) fail in the next ``times`` burn-ins of this GPU."""
        if check not in BURN_IN_CHECKS:
            raise ValueError(f"unknown burn-in check {check!r}; known: {', '.join(BURN_IN_CHECKS)}")
        with self._lock:
            self._resolve(gpu_index, include_lost=True)[0].burn_in_failures[check] = times

    def burn_in(self, gpu_index: int) -> BurnIn:
        """The checks a real burn-in runs, modelled: NVML answers and its health readings trip no probe
        a repair is for (``gpu.probes.burn_in_verdict``, as NvmlBackend judges them),
        a CUDA kernel runs, the memory test passes, a Hopper-or-later NVSwitch GPU is back in the
        NVLink fabric, DCGM's diagnostic passes where the node has DCGM, unless ``fail_burn_in``
        said otherwise. As on hardware, nothing runs on a GPU NVML found at fault."""
        with self._lock:
            self._refuse_if_released("burn_in")
            state, _ = self._resolve(gpu_index, include_lost=True)
            checks: list[BurnInCheck] = []
            skipped: dict[str, str] = {}
            for name in _BURN_IN_ORDER:
                why_not = self._burn_in_skip(state, name, checks)
                if why_not:
                    skipped[name] = why_not
                    continue
                left = state.burn_in_failures.get(name, 0)
                passed, detail = True, ""
                if name == "nvml" and state.lost:
                    passed, detail = False, "GPU does not answer"
                elif name == "nvml":
                    passed, detail = burn_in_verdict(instant(self.health_readings(state.spec.uuid)))
                elif left:
                    state.burn_in_failures[name] = left - 1 if left > 0 else left
                    passed, detail = False, BURN_IN_FAILURES[name]
                checks.append(BurnInCheck(name, passed, detail))
        checks.sort(key=lambda c: BURN_IN_CHECKS.index(c.name))
        return BurnIn(gpu_index, tuple(checks), tuple(skipped), skipped)

    def _burn_in_skip(self, state: _GpuState, name: str, done: list[BurnInCheck]) -> str:
        """Why ``name`` does not run on this GPU now (empty: it runs), as NvmlBackend decides."""
        if name == "nvml":
            return ""
        if not all(c.passed for c in done if c.name in ("nvml", "fabric")):
            return "not run: an NVML check failed"
        if name == "fabric":
            nvswitch = (
                self.topology.interconnect or ("nvswitch" if state.spec.model.nvlinks else "pcie")
            ) == "nvswitch"
            if state.spec.model.compute_capability[0] < 9 or not nvswitch:
                return "not an NVSwitch fabric GPU (Hopper or later on NVSwitch)"
            return ""
        if name in ("cuda", "memory") and state.mig_enabled:
            return "not run: MIG mode is on, CUDA runs only inside MIG devices"
        if name == "dcgm" and not self.dcgm:
            return "no DCGM on this simulated node"
        if name == "memory" and not done[-1].passed:
            return "not run: the CUDA check failed"
        return ""

    def gpu_instances(self, gpu_index: int) -> tuple[GpuInstance, ...]:
        with self._lock:
            self._refuse_if_released("gpu_instances")
            state = self._mig_gpu(gpu_index)
            return tuple(
                GpuInstance(
                    gi_id,
                    gi.profile.name,
                    gi.start,
                    tuple(ComputeInstance(ci, n) for ci, (_, n) in sorted(gi.compute_instances.items())),
                )
                for gi_id, gi in sorted(state.instances.items(), key=lambda kv: kv[1].start)
            )

    def create_gpu_instance(self, gpu_index: int, profile: str, start: int) -> int:
        """Create a GPU instance, refusing exactly what the hardware refuses (overlap, limits)."""
        with self._lock:
            self._refuse_if_released("create_gpu_instance")
            state = self._mig_gpu(gpu_index, enabled=True)
            return self._add_instance(state, state.spec.model.profile(profile), start)

    def create_compute_instance(self, gpu_index: int, gi_id: int, slices: int | None = None) -> int:
        with self._lock:
            self._refuse_if_released("create_compute_instance")
            state = self._mig_gpu(gpu_index, enabled=True)
            gi = self._instance(state, gi_id)
            size = gi.profile.gi_slices if slices is None else slices
            ci_id = gi.add_compute_instance(size, f"GPU {gpu_index} GPU instance {gi_id}")
            self._refresh(state)
            return ci_id

    def destroy_compute_instance(self, gpu_index: int, gi_id: int, ci_id: int) -> None:
        """Destroy one compute instance (NVML's finer step; the port destroys whole GPU instances)."""
        with self._lock:
            self._refuse_if_released("destroy_compute_instance")
            state = self._mig_gpu(gpu_index, enabled=True)
            gi = self._instance(state, gi_id)
            if ci_id not in gi.compute_instances:
                raise NotFoundError(f"GPU {gpu_index} GPU instance {gi_id} has no compute instance {ci_id}")
            del gi.compute_instances[ci_id]
            self._refresh(state)

    def destroy_gpu_instance(self, gpu_index: int, gi_id: int) -> None:
        with self._lock:
            self._refuse_if_released("destroy_gpu_instance")
            state = self._mig_gpu(gpu_index, enabled=True)
            self._instance(state, gi_id)
            del state.instances[gi_id]
            self._refresh(state)

    # ---- internals ---------------------------------------------------------------------------

    def _publish(self, event: HealthEvent) -> None:
        with self._lock:
            listeners = list(self._listeners)
            if not self._released:
                listeners += self._subscriptions
        for listener in listeners:
            listener(event)

    def _carve(self, state: _GpuState, layout: dict[str, int]) -> None:
        """Lay out a whole GPU at once: GPU instances in start order, each with its compute
        instances (one full-size one unless the layout splits it)."""
        for placement in catalog.place_layout(state.spec.model, layout):
            gi_id = self._add_instance(state, placement.profile, placement.start)
            gi = state.instances[gi_id]
            for slices in placement.compute or (placement.profile.gi_slices,):
                gi.add_compute_instance(slices, f"GPU {state.spec.index} GPU instance {gi_id}")
        self._refresh(state)

    def _add_instance(self, state: _GpuState, prof: catalog.MigProfile, start: int) -> int:
        where = f"GPU {state.spec.index} ({state.spec.model.key})"
        if start not in prof.starts:
            starts = ", ".join(map(str, prof.starts))
            raise InvalidConfigError(f"{where}: {prof.name} cannot start at slice {start}; legal starts: {starts}")
        used = {s for gi in state.instances.values() for s in range(gi.start, gi.start + gi.profile.memory_slices)}
        span = set(range(start, start + prof.memory_slices))
        if span & used or max(span) >= state.spec.model.memory_slices:
            raise InvalidConfigError(f"{where}: {prof.name} at slice {start} overlaps an existing GPU instance")
        same = sum(1 for gi in state.instances.values() if gi.profile.name == prof.name)
        if same >= prof.max_instances:
            raise InvalidConfigError(f"{where}: at most {prof.max_instances} x {prof.name} per GPU")
        taken = sum(gi.profile.gi_slices for gi in state.instances.values())
        if taken + prof.gi_slices > state.spec.model.compute_slices:
            raise InvalidConfigError(f"{where}: not enough compute slices left for {prof.name}")
        if prof.media_extensions and any(gi.profile.media_extensions for gi in state.instances.values()):
            raise InvalidConfigError(f"{where}: at most one +me GPU instance per GPU")
        gi_id = next(i for i in range(1, 16) if i not in state.instances)
        state.instances[gi_id] = _GiState(prof, start)
        self._refresh(state)
        return gi_id

    def _refresh(self, state: _GpuState) -> None:
        """Derive the MIG devices (one per compute instance) from the GPU instances.

        A compute instance smaller than its GPU instance is named ``<c>c.<profile>`` and has the
        GPU instance's memory and its share of the multiprocessors (``c/g`` of them, rounded
        down: the rule of NVIDIA's go-nvml A100 mock, 14 per slice; derived for other cards).
        """
        spec = state.spec
        devices: list[MigDevice] = []
        for gi_id, gi in sorted(state.instances.items()):
            full = gi.profile.gi_slices
            for ci_id, (_, slices) in sorted(gi.compute_instances.items()):
                name = gi.profile.name if slices == full else catalog.device_profile(gi.profile.name, slices)
                devices.append(
                    MigDevice(
                        uuid=stable_uuid("MIG", f"{spec.uuid}/{gi_id}/{ci_id}/{name}/{gi.start}"),
                        parent_index=spec.index,
                        parent_uuid=spec.uuid,
                        index=len(devices),
                        profile=name,
                        gi_id=gi_id,
                        ci_id=ci_id,
                        memory_mib=gi.profile.memory_mib,
                        multiprocessors=gi.profile.multiprocessors * slices // full,
                    )
                )
        state.mig_devices = devices
        live = {d.uuid for d in devices}
        state.mig_used_mib = {u: n for u, n in state.mig_used_mib.items() if u in live}

    def _mig_gpu(self, gpu_index: int, enabled: bool = False) -> _GpuState:
        state, _ = self._resolve(gpu_index)
        if not state.spec.model.mig_capable:
            raise NotSupportedError(f"GPU {gpu_index} ({state.spec.model.key}) does not support MIG")
        if enabled and not state.mig_enabled:
            raise NotSupportedError(f"GPU {gpu_index}: MIG mode is not enabled")
        return state

    def _instance(self, state: _GpuState, gi_id: int) -> _GiState:
        try:
            return state.instances[gi_id]
        except KeyError:
            raise NotFoundError(f"GPU {state.spec.index} has no GPU instance {gi_id}") from None

    def _gpu(self, state: _GpuState) -> Gpu:
        spec = state.spec
        return Gpu(
            index=spec.index,
            uuid=spec.uuid,
            name=spec.model.name,
            pci_bus_id=spec.pci_bus_id,
            pci_device_id=spec.model.pci_device_id,
            memory_mib=spec.model.memory_mib,
            compute_capability=spec.model.compute_capability,
            numa_node=spec.numa_node,
            multiprocessors=spec.model.multiprocessors,
            mig_capable=spec.model.mig_capable,
            mig_enabled=state.mig_enabled,
            mig_devices=tuple(state.mig_devices),
            minor_number=spec.index,
            pci_class=PCI_CLASS_3D_CONTROLLER,
        )

    def _state(self, gpu_uuid: str) -> _GpuState:
        for state in self._gpus:
            if state.spec.uuid == gpu_uuid:
                return state
        raise NotFoundError(f"no GPU with UUID {gpu_uuid} on node {self.topology.node}")

    def _resolve(self, device: int | str, include_lost: bool = False) -> tuple[_GpuState, MigDevice | None]:
        for state in self._gpus:
            if device in (state.spec.index, state.spec.uuid):
                if state.lost and not include_lost:
                    raise GpuLostError(f"GPU {state.spec.uuid} is lost")
                return state, None
            for mig in state.mig_devices:
                if device == mig.uuid:
                    return state, mig
        raise NotFoundError(f"no GPU or MIG device {device!r} on node {self.topology.node}")

    def snapshot_gpu(self, device: int | str) -> Gpu:
        """The current model of one GPU, even while it is lost (for tests and the simulator)."""
        with self._lock:
            state, _ = self._resolve(device, include_lost=True)
            return self._gpu(state)

    def is_lost(self, device: int | str) -> bool:
        """Whether a GPU (index or UUID) has fallen off the bus and not come back."""
        with self._lock:
            state, _ = self._resolve(device, include_lost=True)
            return state.lost

"""A simulated node's GPUs: the embedded default behind every command and most tests.

Built from a topology (preset or file). Faults are injected through methods (an XID on a GPU
or a MIG device, a GPU falling off the bus, its return) and reach every subscriber of
``events()`` at once, from any thread.

The backend holds the lock, the events and the faults; each GPU's state and MIG rules are
`gpu.simstate`, the burn-in's checks `gpu.simburnin`, and a clean NVLink's readings `gpu.simnvlink`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpuchain.gpu.backend import BurnIn, ComputeInstance, GpuBackend, GpuInstance, MigMode
from gpuchain.gpu.errors import (
    GpuError,
    GpuLostError,
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
from gpuchain.gpu.processes import GpuProcess
from gpuchain.gpu.simburnin import BURN_IN_CHECKS, run_checks
from gpuchain.gpu.simstate import (
    GpuState,
    add_gpu_instance,
    carve,
    gpu_instance,
    gpu_of,
    refresh_mig_devices,
)
from gpuchain.gpu.topology import Topology, load_preset

if TYPE_CHECKING:
    # The health probes' readings (and the clean NVLink counters, made of them) load with the first
    # reading: a node agent's device plugin registers before it asks for any.
    from gpuchain.gpu.probes import Ber, HealthReadings

XID_GPU_FALLEN_OFF_BUS = 79
MIG_READINGS = frozenset({"memory_used_mib"})
"""The readings a MIG device has of its own; everything else is its parent GPU's."""

Listener = Callable[[HealthEvent], None]


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
        self._gpus = [GpuState(spec=spec) for spec in topology.expanded()]
        self._readings: dict[str, dict[str, Any]] = {}
        """GPU UUID -> health counters set by ``set_health_readings`` / ``add_nvlink_errors``."""
        for state in self._gpus:
            if state.spec.mig is not None:
                state.mig_enabled = state.mig_pending = True
                carve(state, state.spec.mig)

    @classmethod
    def from_preset(cls, name: str, node: str | None = None) -> SimBackend:
        return cls(load_preset(name, node))

    # ---- GpuBackend ---------------------------------------------------------------------------

    def inventory(self) -> Inventory:
        with self._lock:
            self._refuse_if_released("inventory")
            gpus = tuple(gpu_of(s) for s in self._gpus if not s.lost)
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
        self, device: int | str, *, pid: int, memory_mib: int | None, sm_percent: int = 0, mps: bool = False
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
            proc = GpuProcess(
                pid=pid,
                device_uuid=uuid,
                used_memory_mib=memory_mib,
                sm_percent=None if mig is not None else sm_percent,
                mps=mps,
            )
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
        from gpuchain.gpu.probes import HealthReadings
        from gpuchain.gpu.simnvlink import clean_nvlink

        counters = extra.pop("nvlink", {})
        if not remaps:
            extra = {"retired_pages_pending": False, "retired_pages_sbe": 0, "retired_pages_dbe": 0, **extra}
        clean = clean_nvlink(state.spec.model.compute_capability)
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

    def _nvlink_count(self, state: GpuState) -> int:
        """Active NVLinks of a GPU: every link of its model to the NVSwitches, else its direct lanes."""
        topo, model = self.topology, state.spec.model
        if (topo.interconnect or ("nvswitch" if model.nvlinks else "pcie")) == "nvswitch" and not topo.links:
            return model.nvlinks
        return sum(link.nvlinks for link in self._links if state.spec.index in (link.a, link.b))

    def set_health_readings(
        self,
        device: int | str,
        *,
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
        from gpuchain.gpu.simnvlink import clean_nvlink

        with self._lock:
            state = self._resolve(device, include_lost=True)[0]
            clean = clean_nvlink(state.spec.model.compute_capability)
            counters = self._readings.setdefault(state.spec.uuid, {}).setdefault("nvlink", {})
            now = counters.setdefault(link, {})
            for name, n in counts.items():
                start = getattr(clean.link, name, None)
                if not isinstance(start, int):
                    raise NotSupportedError(f"{state.spec.model.key} reports no NVLink counter {name!r}")
                now[name] = now.get(name, start) + n

    def set_nvlink_ber(
        self, device: int | str, *, link: int | None = None, symbol: Ber | None = None, effective: Ber | None = None
    ) -> None:
        """Set an NVLink5 GPU's symbol or effective bit error rate: one link's, or (``link`` None)
        the GPU's aggregate, the one DCGM judges. A reset clears them, as it clears the counters."""
        from gpuchain.gpu.probes import nvlink5

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
        return MigMemory(uuid=mig.uuid, total_mib=mig.memory_mib, used_mib=used, free_mib=mig.memory_mib - used)

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
            events = [
                HealthEvent(kind=EventKind.GPU_RECOVERED, gpu_uuid=uuid, message="GPU reset", timestamp=now)
                for uuid in reset
            ]
            for state in self._gpus:
                uuid, was_lost = state.spec.uuid, state.spec.uuid in self._lost_at_release
                if state.lost and not was_lost:
                    events.append(
                        HealthEvent(kind=EventKind.GPU_LOST, gpu_uuid=uuid, message="GPU is lost", timestamp=now)
                    )
                elif was_lost and not state.lost and uuid not in reset:
                    events.append(
                        HealthEvent(
                            kind=EventKind.GPU_RECOVERED, gpu_uuid=uuid, message="GPU answers again", timestamp=now
                        )
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

    def inject_xid(self, device: int | str, *, xid: int, message: str = "") -> HealthEvent:
        """Raise XID ``xid`` on a GPU (index or UUID) or on one MIG device (its UUID)."""
        with self._lock:
            state, mig = self._resolve(device, include_lost=True)
            event = HealthEvent(
                kind=EventKind.XID,
                gpu_uuid=state.spec.uuid,
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
        xid = self.inject_xid(state.spec.uuid, xid=XID_GPU_FALLEN_OFF_BUS, message="GPU has fallen off the bus")
        lost = HealthEvent(
            kind=EventKind.GPU_LOST, gpu_uuid=state.spec.uuid, message="GPU is lost", timestamp=time.time()
        )
        self._publish(lost)
        return [xid, lost]

    def recover_gpu(self, device: int | str) -> HealthEvent:
        """The GPU answers again (after a reset)."""
        with self._lock:
            state, _ = self._resolve(device, include_lost=True)
            state.lost = False
        event = HealthEvent(
            kind=EventKind.GPU_RECOVERED, gpu_uuid=state.spec.uuid, message="GPU answers again", timestamp=time.time()
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
                refresh_mig_devices(state)
            else:
                carve(state, layout)

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
            refresh_mig_devices(state)
            uuid = state.spec.uuid
            if self._released:  # the streams are paused: they hear it at reacquire, as NvmlBackend's do
                self._reset_while_released.append(uuid)
        self._publish(
            HealthEvent(kind=EventKind.GPU_RECOVERED, gpu_uuid=uuid, message="GPU reset", timestamp=time.time())
        )

    def fail_reset(self, gpu_index: int, *, times: int = -1, reason: str = "") -> None:
        """Make the next ``times`` resets of this GPU fail (-1: all of them; 0: none again), saying
        ``reason`` (for instance nvidia-smi's "In use by another client") or a generic failure."""
        with self._lock:
            state = self._resolve(gpu_index, include_lost=True)[0]
            state.reset_failures, state.reset_failure = times, reason

    def fail_burn_in(self, gpu_index: int, *, check: str = "memory", times: int = -1) -> None:
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
        from gpuchain.gpu.probes import burn_in_verdict, instant

        with self._lock:
            self._refuse_if_released("burn_in")
            state, _ = self._resolve(gpu_index, include_lost=True)
            checks, skipped = run_checks(
                state,
                interconnect=self.topology.interconnect,
                dcgm=self.dcgm,
                nvml_verdict=lambda: burn_in_verdict(instant(self.health_readings(state.spec.uuid))),
            )
        return BurnIn(gpu_index=gpu_index, checks=tuple(checks), skipped=tuple(skipped), reasons=skipped)

    def gpu_instances(self, gpu_index: int) -> tuple[GpuInstance, ...]:
        with self._lock:
            self._refuse_if_released("gpu_instances")
            state = self._mig_gpu(gpu_index)
            return tuple(
                GpuInstance(
                    gi_id=gi_id,
                    profile=gi.profile.name,
                    start=gi.start,
                    compute_instances=tuple(
                        ComputeInstance(ci, n) for ci, (_, n) in sorted(gi.compute_instances.items())
                    ),
                )
                for gi_id, gi in sorted(state.instances.items(), key=lambda kv: kv[1].start)
            )

    def create_gpu_instance(self, gpu_index: int, *, profile: str, start: int) -> int:
        """Create a GPU instance, refusing exactly what the hardware refuses (overlap, limits)."""
        with self._lock:
            self._refuse_if_released("create_gpu_instance")
            state = self._mig_gpu(gpu_index, enabled=True)
            return add_gpu_instance(state, prof=state.spec.model.profile(profile), start=start)

    def create_compute_instance(self, gpu_index: int, *, gi_id: int, slices: int | None = None) -> int:
        with self._lock:
            self._refuse_if_released("create_compute_instance")
            state = self._mig_gpu(gpu_index, enabled=True)
            gi = gpu_instance(state, gi_id)
            size = gi.profile.gi_slices if slices is None else slices
            ci_id = gi.add_compute_instance(size, f"GPU {gpu_index} GPU instance {gi_id}")
            refresh_mig_devices(state)
            return ci_id

    def destroy_compute_instance(self, gpu_index: int, *, gi_id: int, ci_id: int) -> None:
        """Destroy one compute instance (NVML's finer step; the port destroys whole GPU instances)."""
        with self._lock:
            self._refuse_if_released("destroy_compute_instance")
            state = self._mig_gpu(gpu_index, enabled=True)
            gi = gpu_instance(state, gi_id)
            if ci_id not in gi.compute_instances:
                raise NotFoundError(f"GPU {gpu_index} GPU instance {gi_id} has no compute instance {ci_id}")
            del gi.compute_instances[ci_id]
            refresh_mig_devices(state)

    def destroy_gpu_instance(self, gpu_index: int, gi_id: int) -> None:
        with self._lock:
            self._refuse_if_released("destroy_gpu_instance")
            state = self._mig_gpu(gpu_index, enabled=True)
            gpu_instance(state, gi_id)
            del state.instances[gi_id]
            refresh_mig_devices(state)

    # ---- internals ---------------------------------------------------------------------------

    def _publish(self, event: HealthEvent) -> None:
        with self._lock:
            listeners = list(self._listeners)
            if not self._released:
                listeners += self._subscriptions
        for listener in listeners:
            listener(event)

    def _mig_gpu(self, gpu_index: int, enabled: bool = False) -> GpuState:
        state, _ = self._resolve(gpu_index)
        if not state.spec.model.mig_capable:
            raise NotSupportedError(f"GPU {gpu_index} ({state.spec.model.key}) does not support MIG")
        if enabled and not state.mig_enabled:
            raise NotSupportedError(f"GPU {gpu_index}: MIG mode is not enabled")
        return state

    def _state(self, gpu_uuid: str) -> GpuState:
        for state in self._gpus:
            if state.spec.uuid == gpu_uuid:
                return state
        raise NotFoundError(f"no GPU with UUID {gpu_uuid} on node {self.topology.node}")

    def _resolve(self, device: int | str, include_lost: bool = False) -> tuple[GpuState, MigDevice | None]:
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
            return gpu_of(state)

    def is_lost(self, device: int | str) -> bool:
        """Whether a GPU (index or UUID) has fallen off the bus and not come back."""
        with self._lock:
            state, _ = self._resolve(device, include_lost=True)
            return state.lost

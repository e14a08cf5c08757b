"""From one sample of the node to DCGM-compatible metric families: pure functions, no I/O.

An *entity* is what dcgm-exporter publishes a series for: a whole GPU, or one MIG device of a
MIG-enabled GPU (labelled ``GPU_I_PROFILE``/``GPU_I_ID``). A MIG device gets:

- its own framebuffer (``FB_FREE``/``FB_USED``, read on the MIG device handle), so a pod on it
  sees its GPU instance's memory, not the whole GPU's;
- the GPU-wide readings (temperature, power, clocks, energy, PCIe replays, remapped rows),
  repeated on each MIG device as dcgm-exporter does, so every pod sees the card it runs on;
- no device-level utilisation (``GPU_UTIL``, ``MEM_COPY_UTIL``, ``ENC_UTIL``, ``DEC_UTIL``): those
  measure the whole GPU, and copying them would make every pod on it look as busy as all of
  them together. DCGM reports per-instance activity only through profiling fields, which NVML
  does not have.

A device held by several containers (time-slicing) gets one series per container, each with its
``pod``/``namespace``/``container`` labels.

With per-process attribution on (``NodeSample.usage`` set, from ``exporter.usage``), each
container's ``DCGM_FI_DEV_FB_USED`` and ``DCGM_FI_DEV_GPU_UTIL`` are its own processes' framebuffer
and SM share instead of the device's (0 for a holder running nothing), as dcgm-exporter's
``--kubernetes-virtual-gpus`` does for the same two fields; a container found running on a device
it was not assigned gets series too. Per-process figures dcgm-exporter has no name for are
gpuchain's own, per device (the DCGM base labels) and per container:

- ``gpuchain_gpu_processes``: processes of the container on the device;
- ``gpuchain_gpu_unattributed_processes`` / ``gpuchain_gpu_unattributed_fb_used_mib``: processes
  that map to no pod (host daemons, the MPS server, pods the exporter cannot name) and their
  framebuffer, always present (0) so that a missing series is never read as none.

Trust signals (``status_families``), per GPU by ``gpu``/``UUID``/``Hostname``:
``gpuchain_gpu_up`` (0 for a GPU seen since start whose last read failed or that left the
inventory), ``gpuchain_gpu_last_sample_timestamp_seconds`` (age = ``time() - value``), and per
node ``gpuchain_gpus_expected{source}`` beside ``gpuchain_gpus_exported``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from gpuchain.exporter.counters import Counter, CounterSet, Field
from gpuchain.exporter.exposition import Family
from gpuchain.exporter.podresources import PodRef
from gpuchain.exporter.usage import DeviceUsage, PodUsage
from gpuchain.gpu.model import Gpu, Inventory, MigMemory, Telemetry

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Entity:
    """One series source. ``uuid`` is the GPU's or the MIG device's; ``gpu_uuid`` its physical GPU."""

    uuid: str
    gpu_uuid: str
    labels: Labels


@dataclass(frozen=True, kw_only=True)
class NodeSample:
    """What the background collector last saw; every scrape renders from one of these."""

    inventory: Inventory
    telemetry: Mapping[str, Telemetry]
    pods: Mapping[str, tuple[PodRef, ...]] = field(default_factory=dict)
    mig_memory: Mapping[str, MigMemory] = field(default_factory=dict)
    """MIG device UUID -> its framebuffer reading."""
    usage: Mapping[str, DeviceUsage] | None = None
    """Device UUID -> per-container usage from its processes; None: per-process attribution is off."""

    def holders(self, uuid: str) -> tuple[PodRef, ...]:
        """The containers a device's series are labelled with: those holding it and, with
        per-process attribution, those found running on it."""
        refs = self.pods.get(uuid, ())
        found = self.usage.get(uuid) if self.usage is not None else None
        if found is None or not set(found.pods) - set(refs):
            return refs
        return tuple(sorted({*refs, *found.pods}))


def entities(inventory: Inventory, *, hostname: str, counters: CounterSet) -> list[Entity]:
    """The entities of a node, each with its DCGM base labels in dcgm-exporter's order."""
    extra: Labels = ()
    if any(c.field is Field.DRIVER_VERSION for c in counters.labels()):
        extra = ((Field.DRIVER_VERSION.value, inventory.driver.version),)
    out: list[Entity] = []
    for gpu in inventory.gpus:
        base: Labels = (*gpu_labels(gpu, hostname), *extra)
        if gpu.mig_enabled:
            for mig in gpu.mig_devices:
                mig_labels = (*base, ("GPU_I_PROFILE", mig.profile), ("GPU_I_ID", str(mig.gi_id)))
                out.append(Entity(mig.uuid, gpu.uuid, mig_labels))
        else:
            out.append(Entity(gpu.uuid, gpu.uuid, base))
    return out


def gpu_labels(gpu: Gpu, hostname: str) -> Labels:
    """A physical GPU's DCGM labels, in dcgm-exporter's order."""
    return (
        ("gpu", str(gpu.index)),
        ("UUID", gpu.uuid),
        ("pci_bus_id", gpu.pci_bus_id),
        ("device", f"nvidia{gpu.minor_number}"),
        ("modelName", gpu.name),
        ("Hostname", hostname),
    )


@dataclass(frozen=True)
class GpuStatus:
    """Whether a GPU seen since start answered the last collection, and when it last did."""

    labels: Labels
    up: bool
    sampled_at: float | None


def status_families(statuses: Iterable[GpuStatus], expected: tuple[int, str] | None) -> list[Family]:
    """The trust signals: per GPU up and last-sample time, per node GPUs expected and exported.

    ``expected`` is the count the node should have and where it comes from (``gfd``: GPU
    feature discovery's ``nvidia.com/gpu.count``; ``seen``: the most GPUs the backend listed
    since start); None leaves the family out.
    """
    up = Family(
        "gpuchain_gpu_up",
        "1 when the GPU answered the last collection; 0 when its read failed or hung, "
        "or it left the inventory (fell off the bus) since the exporter saw it.",
        "gauge",
        [],
    )
    at = Family(
        "gpuchain_gpu_last_sample_timestamp_seconds",
        "Unix time of the GPU's last good reading: its age is time() minus this.",
        "gauge",
        [],
    )
    exported = 0
    for st in statuses:
        labels = dict(st.labels)
        up.add_sample(up.name, labels=labels, value=1.0 if st.up else 0.0)
        exported += st.up
        if st.sampled_at is not None:
            at.add_sample(at.name, labels=labels, value=st.sampled_at)
    count = Family(
        "gpuchain_gpus_exported", "GPUs whose readings this scrape carries (gpuchain_gpu_up == 1).", "gauge", []
    )
    count.add_sample(count.name, labels={}, value=float(exported))
    families = [up, at, count]
    if expected is not None:
        want = Family(
            "gpuchain_gpus_expected", "GPUs this node should have, and where that number comes from.", "gauge", []
        )
        want.add_sample(want.name, labels={"source": expected[1]}, value=float(expected[0]))
        families.append(want)
    return families


_READINGS: dict[Field, Callable[[Telemetry], float | int | None]] = {
    Field.SM_CLOCK: lambda t: t.sm_clock_mhz,
    Field.MEM_CLOCK: lambda t: t.mem_clock_mhz,
    Field.MEMORY_TEMP: lambda t: t.memory_temperature_c,
    Field.GPU_TEMP: lambda t: t.temperature_c,
    Field.POWER_USAGE: lambda t: t.power_w,
    Field.TOTAL_ENERGY_CONSUMPTION: lambda t: t.energy_mj,
    Field.PCIE_REPLAY_COUNTER: lambda t: t.pcie_replay,
    Field.GPU_UTIL: lambda t: t.gpu_util,
    Field.MEM_COPY_UTIL: lambda t: t.mem_copy_util,
    Field.ENC_UTIL: lambda t: t.enc_util,
    Field.DEC_UTIL: lambda t: t.dec_util,
    Field.FB_FREE: lambda t: t.memory_free_mib,
    Field.FB_USED: lambda t: t.memory_used_mib,
    Field.FB_RESERVED: lambda t: t.memory_reserved_mib,
    Field.UNCORRECTABLE_REMAPPED_ROWS: lambda t: t.remapped_rows_uncorrectable,
    Field.CORRECTABLE_REMAPPED_ROWS: lambda t: t.remapped_rows_correctable,
    Field.ROW_REMAP_FAILURE: lambda t: t.row_remap_failure,
}
"""Telemetry readings per field, for whole GPUs and the GPU-wide readings of MIG devices."""

_MIG_READINGS: dict[Field, Callable[[MigMemory], int]] = {
    Field.FB_FREE: lambda m: m.free_mib,
    Field.FB_USED: lambda m: m.used_mib,
}
"""A MIG device's own readings, from ``NodeSample.mig_memory``."""

_NOT_ON_MIG = frozenset(
    {Field.GPU_UTIL, Field.MEM_COPY_UTIL, Field.ENC_UTIL, Field.DEC_UTIL, Field.FB_RESERVED, *_MIG_READINGS}
)
"""Whole-GPU figures that would misstate a MIG device (its own readings replace the FB ones)."""
LIVE_FIELDS = frozenset({Field.XID_ERRORS, Field.XID_ERRORS_TOTAL})
"""Fields read from the XID book at scrape time rather than from the sample."""


def _with_pods(labels: Labels, refs: tuple[PodRef, ...]) -> list[dict[str, str]]:
    if not refs:
        return [dict(labels)]
    return [{**dict(labels), "container": r.container, "namespace": r.namespace, "pod": r.pod} for r in refs]


def _family(counter: Counter) -> Family:
    return Family(counter.field.value, counter.help, counter.prom_type.value, [])


def sample_families(counters: CounterSet, *, sample: NodeSample, ents: Iterable[Entity]) -> list[Family]:
    """Families for every telemetry field in ``counters``; built once per collection, rendered per scrape."""
    rows = [(e, sample.holders(e.uuid)) for e in ents]
    families: list[Family] = []
    for counter in counters.metrics():
        reading = _READINGS.get(counter.field)
        if reading is None:
            continue
        family = _family(counter)
        name = counter.field.value
        per_pod = _PER_PROCESS.get(counter.field) if sample.usage is not None else None
        for entity, refs in rows:
            value = _value(counter.field, reading, entity, sample)
            if value is None:
                continue
            if per_pod is not None and refs:
                used = sample.usage.get(entity.uuid) if sample.usage is not None else None
                for ref, labels in zip(refs, _with_pods(entity.labels, refs), strict=True):
                    mine = used.pods.get(ref) if used is not None else None
                    family.add_sample(name, labels=labels, value=float(per_pod(mine) if mine is not None else 0))
                continue
            for labels in _with_pods(entity.labels, refs):
                family.add_sample(name, labels=labels, value=float(value))
        families.append(family)
    if sample.usage is not None:
        families += _usage_families(sample.usage, rows)
    return families


_PER_PROCESS: dict[Field, Callable[[PodUsage], int]] = {
    Field.FB_USED: lambda u: u.memory_mib,
    Field.GPU_UTIL: lambda u: u.sm_percent or 0,
}
"""The two fields a container gets its own figure for under per-process attribution (as dcgm-exporter)."""


def _usage_families(usage: Mapping[str, DeviceUsage], rows: list[tuple[Entity, tuple[PodRef, ...]]]) -> list[Family]:
    procs = Family(
        "gpuchain_gpu_processes", "Processes of the container running on the GPU or MIG device.", "gauge", []
    )
    loose = Family(
        "gpuchain_gpu_unattributed_processes",
        "Processes on the GPU or MIG device that map to no pod (host daemons, the MPS server, unknown pods).",
        "gauge",
        [],
    )
    loose_mib = Family(
        "gpuchain_gpu_unattributed_fb_used_mib",
        "Framebuffer (MiB) held by the processes on the device that map to no pod.",
        "gauge",
        [],
    )
    for entity, _refs in rows:
        found = usage.get(entity.uuid, DeviceUsage({}))
        refs = tuple(found.pods)
        for ref, labels in zip(refs, _with_pods(entity.labels, refs) if refs else [], strict=True):
            procs.add_sample(procs.name, labels=labels, value=float(found.pods[ref].processes))
        base = dict(entity.labels)
        loose.add_sample(loose.name, labels=base, value=float(found.unattributed_processes))
        loose_mib.add_sample(loose_mib.name, labels=base, value=float(found.unattributed_memory_mib))
    return [procs, loose, loose_mib]


def _value(
    fld: Field, reading: Callable[[Telemetry], float | int | None], entity: Entity, sample: NodeSample
) -> float | int | None:
    """The reading of ``fld`` for one entity; None when it has none (not read, or not meaningful)."""
    if entity.uuid != entity.gpu_uuid:
        own = _MIG_READINGS.get(fld)
        if own is not None:
            memory = sample.mig_memory.get(entity.uuid)
            return None if memory is None else own(memory)
        if fld in _NOT_ON_MIG:
            return None
    telemetry = sample.telemetry.get(entity.gpu_uuid)
    return None if telemetry is None else reading(telemetry)


class XidBook:
    """XIDs seen since start: the last one per device (DCGM's gauge) and a count per XID (never sticky).

    Written by the event watcher thread, read by scrapes; a lock keeps both views consistent.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._last: dict[str, tuple[int, int]] = {}
        self._totals: dict[str, dict[int, int]] = {}

    def record(self, device_uuid: str, xid: int) -> None:
        """Count one XID on a GPU or MIG device UUID; the same XID again moves the count again."""
        with self._lock:
            self._seq += 1
            self._last[device_uuid] = (self._seq, xid)
            per = self._totals.setdefault(device_uuid, {})
            per[xid] = per.get(xid, 0) + 1

    @property
    def version(self) -> int:
        """Moves with every recorded XID (scrape caches compare it)."""
        return self._seq

    def last(self, entity: Entity) -> int:
        """The latest XID on the entity or, for a MIG device, on its GPU; 0 when none."""
        with self._lock:
            own = self._last.get(entity.uuid, (0, 0))
            parent = self._last.get(entity.gpu_uuid, (0, 0)) if entity.uuid != entity.gpu_uuid else (0, 0)
        return max(own, parent)[1]

    def totals(self, entity: Entity) -> dict[int, int]:
        """XID -> count on the entity, including GPU-wide XIDs for a MIG device."""
        with self._lock:
            merged = dict(self._totals.get(entity.uuid, {}))
            if entity.uuid != entity.gpu_uuid:
                for xid, n in self._totals.get(entity.gpu_uuid, {}).items():
                    merged[xid] = merged.get(xid, 0) + n
        return merged


def xid_families(
    counters: CounterSet, *, book: XidBook, ents: Iterable[Entity], pods: Mapping[str, tuple[PodRef, ...]]
) -> list[Family]:
    """The XID families, read from the live book so an XID shows on the next scrape."""
    wanted = {c.field: c for c in counters.metrics() if c.field in LIVE_FIELDS}
    if not wanted:
        return []
    families = {f: _family(c) for f, c in wanted.items()}
    for entity in ents:
        label_sets = _with_pods(entity.labels, pods.get(entity.uuid, ()))
        if Field.XID_ERRORS in families:
            last = book.last(entity)
            for labels in label_sets:
                families[Field.XID_ERRORS].add_sample(
                    Field.XID_ERRORS.value, labels={**labels, "err_code": str(last)}, value=float(last)
                )
        if Field.XID_ERRORS_TOTAL in families:
            for xid, n in sorted(book.totals(entity).items()):
                for labels in label_sets:
                    families[Field.XID_ERRORS_TOTAL].add_sample(
                        Field.XID_ERRORS_TOTAL.value, labels={**labels, "xid": str(xid)}, value=float(n)
                    )
    return [families[c.field] for c in counters.metrics() if c.field in families]

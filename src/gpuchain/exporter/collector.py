"""The exporter's imperative shell: sample the GPUs in the background, serve the last good sample.

A scrape never calls NVML or the kubelet. A background thread samples the inventory, each GPU's
telemetry, each MIG device's memory and the pod assignments every ``interval`` seconds; each of those calls runs on its
own daemon thread with a deadline, so a call that hangs (a GPU falling off the bus can stall
NVML for a long time) or fails only costs its own reading: the previous good value is kept,
``gpuchain_exporter_scrape_errors_total{operation}`` moves, and the next cycle does not stack a
second call behind the hung one. XIDs arrive through the backend's event stream on another
thread and are visible on the next scrape. ``/health`` turns unhealthy when the last good
collection is older than ``STALE_AFTER`` intervals, so a hung backend is noticed even though
scrapes keep answering with old values.

While the backend has let go of NVML for a GPU reset on the node (``gpu.nvmlrelease``) a cycle
reads nothing: the GPU samples are left out (old values served as current would lie about a GPU
being reset), ``gpuchain_exporter_nvml_released`` is 1, no error is counted and ``/health`` stays
healthy, since the exporter does what it was asked to.

With ``processes=True`` each cycle also lists every GPU's processes (``gpu.processes``), finds
each one's pod through its cgroup (``exporter.cgroups``; cached per PID while it keeps running)
and charges it to a container (``exporter.usage``). Every cycle also says which GPUs answered
and when each last did, beside how many the node should have (``metrics.status_families``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from gpuchain.common.numbers import positive_seconds
from gpuchain.exporter import COLLECT_INTERVAL
from gpuchain.exporter.cgroups import ContainerCgroup, read_cgroup
from gpuchain.exporter.counters import CounterSet
from gpuchain.exporter.exposition import Family, Sample
from gpuchain.exporter.metrics import (
    Entity,
    GpuStatus,
    Labels,
    NodeSample,
    XidBook,
    entities,
    gpu_labels,
    sample_families,
    status_families,
    xid_families,
)
from gpuchain.exporter.podresources import Assignment, PodRef, attribute
from gpuchain.exporter.usage import DeviceUsage, PodIdentity, attribute_processes
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import ReleasedError
from gpuchain.gpu.model import EventKind, Gpu, Inventory, MigMemory, Telemetry
from gpuchain.gpu.processes import GpuProcess

log = logging.getLogger(__name__)

T = TypeVar("T")

OPERATIONS = ("inventory", "telemetry", "processes", "pod_resources", "events")
"""Values of the ``operation`` label on the scrape-error counter (MIG memory reads count as telemetry)."""
STALE_AFTER = 3.0
"""Collection intervals without a good collection after which ``/health`` reports unhealthy."""


class _Pending(Generic[T]):
    """One backend call running on its own daemon thread, so the caller can stop waiting for it."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self.done = threading.Event()
        self.value: T | None = None
        self.error: BaseException | None = None
        self._fn = fn
        threading.Thread(target=self._run, daemon=True, name="gpuchain-exporter-call").start()

    def _run(self) -> None:
        try:
            self.value = self._fn()
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()


@dataclass(kw_only=True)
class _View:
    """What a scrape renders: built once per collection, swapped in whole."""

    entities: list[Entity] = field(default_factory=list)
    families: list[Family] = field(default_factory=list)
    pods: dict[str, tuple[PodRef, ...]] = field(default_factory=dict)
    collected_at: float | None = None
    usage: dict[str, DeviceUsage] | None = None


class GpuMetricsCollector:
    """A metrics source over a GPU backend, with background sampling: its own metrics (errors,
    collection and pod-attribution times, NVML released) then the GPUs' (``collect``), written as
    gpuchain's families (``exporter.exposition``), as prometheus-client's Counter and Gauges wrote
    the former: the exporter role loads no prometheus-client.

    ``collect_once()`` runs one sampling cycle (tests call it directly); ``start()`` runs it
    every ``interval`` seconds and watches XID events until ``stop()``.
    """

    def __init__(
        self,
        backend: GpuBackend,
        *,
        counters: CounterSet,
        hostname: str,
        pod_lister: Callable[[], list[Assignment]] | None = None,
        interval: float = COLLECT_INTERVAL,
        call_timeout: float = 5.0,
        processes: bool = False,
        cgroup_of: Callable[[int], ContainerCgroup | None] = read_cgroup,
        pod_directory: Callable[[], Mapping[str, PodIdentity]] | None = None,
        expected_gpus: Callable[[], tuple[int, str] | None] | None = None,
    ) -> None:
        """``processes`` turns per-process attribution on; ``cgroup_of`` finds a PID's pod (the
        host's /proc by default); ``pod_directory`` names pods by UID where the exporter has a
        source for it (else only a device's single holder can be named); ``expected_gpus`` says how
        many GPUs the node should have and from where (default: the most the backend listed)."""
        self.backend = backend
        self.counters = counters
        self.hostname = hostname
        self.pod_lister = pod_lister
        self.interval = positive_seconds("collection interval", interval)
        self.call_timeout = positive_seconds("call timeout", call_timeout)
        self.xids = XidBook()
        self._errors = dict.fromkeys(OPERATIONS, 0.0)
        """Calls that failed or ran past their deadline, by operation (``gpuchain_exporter_scrape_errors``)."""
        self._errors_lock = threading.Lock()
        self._last_success = 0.0
        self._pods_up = 0.0
        self._pods_at = 0.0
        self._released = 0.0
        self._view = _View()
        self._saw_release = False
        self._let_go = False
        self._inventory: Inventory | None = None
        self._telemetry: dict[str, Telemetry] = {}
        self._mig_memory: dict[str, MigMemory] = {}
        self._assignments: list[Assignment] = []
        self.processes = processes
        self.cgroup_of = cgroup_of
        self.pod_directory = pod_directory
        self.expected_gpus = expected_gpus
        self._processes: dict[str, tuple[GpuProcess, ...]] = {}
        self._cgroups: dict[int, ContainerCgroup | None] = {}
        """PID -> its pod, read once while the PID stays on a GPU (a reused PID first leaves the list)."""
        self._directory: Mapping[str, PodIdentity] = {}
        self._known: dict[str, Labels] = {}
        """Every GPU seen since start -> its labels, so one that leaves the inventory still shows (up 0)."""
        self._sampled_at: dict[str, float] = {}
        self._most_seen = 0
        self._inflight: dict[str, _Pending[Any]] = {}
        self._failing: dict[str, str] = {}
        """Per call key, the failure last logged: a call that keeps failing the same way is logged once."""
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._events_loop: asyncio.AbstractEventLoop | None = None
        self._events_task: asyncio.Task[None] | None = None
        self._changes = 0

    @property
    def generation(self) -> tuple[int, int]:
        """Changes whenever a scrape's output would: a new sample, a counted error, a new XID.

        The HTTP server reuses one rendered body while this stays the same, so fifty scrapers
        between two collections cost one render. Covers this collector and its own self-metrics
        (``collect`` writes both).
        """
        return self._changes, self.xids.version

    def _error(self, operation: str) -> None:
        with self._errors_lock:
            self._errors[operation] = self._errors.get(operation, 0.0) + 1
        self._changes += 1

    # ---- the metrics source -----------------------------------------------------------------

    @property
    def registry(self) -> GpuMetricsCollector:
        """What ``MetricsServer`` renders: this collector itself."""
        return self

    def collect(self) -> Iterator[Family]:
        """The exporter's own families, then the last sample's, then the XID families read live."""
        with self._errors_lock:
            errors = dict(self._errors)
        name = "gpuchain_exporter_scrape_errors"
        yield Family(
            name,
            "Backend or kubelet calls that failed or ran past their deadline; the last good values are served.",
            "counter",
            [Sample(f"{name}_total", {"operation": op}, n) for op, n in errors.items()],
        )
        yield _gauge(
            "gpuchain_exporter_last_collection_timestamp_seconds",
            "Unix time of the last collection cycle whose inventory call succeeded.",
            self._last_success,
        )
        yield _gauge(
            "gpuchain_exporter_pod_attribution_up",
            "1 when the last pod-resources List answered, 0 when the pod labels served come from an older "
            'answer (see gpuchain_exporter_scrape_errors_total{operation="pod_resources"}).',
            self._pods_up,
        )
        yield _gauge(
            "gpuchain_exporter_pod_attribution_timestamp_seconds",
            "Unix time of the last pod-resources List that answered: the age of the pod labels served.",
            self._pods_at,
        )
        yield _gauge(
            "gpuchain_exporter_nvml_released",
            "1 while the exporter has let go of NVML for a GPU reset on this node: GPU samples are left out "
            "until it takes NVML back.",
            self._released,
        )
        view = self._view
        yield from view.families
        yield from xid_families(self.counters, book=self.xids, ents=view.entities, pods=view.pods)

    # ---- health ---------------------------------------------------------------------------

    def health(self) -> tuple[bool, str]:
        """Healthy while the last good collection is recent; the reason says what is missing or how old.

        Stale means older than ``STALE_AFTER`` collection intervals: the backend has stopped
        answering (a hung NVML call, a lost driver), and the values served are that old.
        """
        at = self._view.collected_at
        if at is None:
            return False, "no successful collection yet (is the GPU backend answering?)"
        age = time.time() - at
        limit = STALE_AFTER * self.interval
        if age > limit:
            return False, (
                f"last successful collection {age:.1f}s ago, more than {STALE_AFTER:g} x the {self.interval:g}s "
                "collection interval: the GPU backend is not answering (see gpuchain_exporter_scrape_errors_total)"
            )
        return True, f"last collection {age:.1f}s ago"

    # ---- sampling -------------------------------------------------------------------------

    def _call(self, key: str, operation: str, fn: Callable[[], T], deadline: float) -> T | None:
        """Run ``fn`` with a deadline; on failure or timeout count an error and return None."""
        fresh = self._start(key, operation, fn)
        return None if fresh is None else self._await(key, operation, fresh, deadline)

    def _await(self, key: str, operation: str, pending: _Pending[T], deadline: float) -> T | None:
        if not pending.done.wait(max(0.0, deadline - time.monotonic())):
            self._failed(key, operation, f"no answer within {self.call_timeout:.1f}s")
            return None
        del self._inflight[key]
        if isinstance(pending.error, ReleasedError):  # let go for a reset: no reading, and no error
            self._saw_release = True
            return None
        if pending.error is not None:
            self._failed(key, operation, f"failed: {pending.error}")
            return None
        if self._failing.pop(key, None) is not None:
            log.info("%s answers again", key)
        return pending.value

    def _failed(self, key: str, operation: str, why: str) -> None:
        """Count a failed call (every time: the scrape shows it) and log it when its cause is new, so
        a kubelet away for an hour is one warning line, not one per collection cycle."""
        self._error(operation)
        if self._failing.get(key) != why:
            self._failing[key] = why
            log.warning("%s: %s; serving the last good value until it answers", key, why)

    def _start(self, key: str, operation: str, fn: Callable[[], T]) -> _Pending[T] | None:
        """Start a call on its own thread, unless the previous one is still hung (then count an error)."""
        pending = self._inflight.get(key)
        if pending is not None and not pending.done.is_set():
            self._failed(key, operation, "previous call still running")
            return None
        fresh: _Pending[T] = _Pending(fn)
        self._inflight[key] = fresh
        return fresh

    def _read_mig_memory(self, gpu: Gpu) -> dict[str, MigMemory]:
        """Every MIG device's memory on one GPU, in one call so a hung GPU costs one thread, not seven."""
        return {m.uuid: self.backend.mig_memory(m.uuid) for m in gpu.mig_devices}

    def collect_once(self) -> bool:
        """One sampling cycle; True when the inventory call succeeded (or NVML is let go for a reset)."""
        self._saw_release = False
        if self.backend.released:
            return self._released_cycle()
        inventory = self._call("inventory", "inventory", self.backend.inventory, time.monotonic() + self.call_timeout)
        if self._saw_release:
            return self._released_cycle()
        ok = inventory is not None
        if inventory is not None:
            self._inventory = inventory
        if self._inventory is None:
            return False
        inv = self._inventory
        deadline = time.monotonic() + self.call_timeout
        telemetry: list[tuple[str, _Pending[Telemetry]]] = []
        memory: list[tuple[str, _Pending[dict[str, MigMemory]]]] = []
        listing: list[tuple[str, _Pending[tuple[GpuProcess, ...]]]] = []
        for gpu in inv.gpus:
            read = functools.partial(self.backend.telemetry, gpu.uuid)
            reading = self._start(f"telemetry/{gpu.uuid}", "telemetry", read)
            if reading is not None:
                telemetry.append((gpu.uuid, reading))
            if self.processes:
                procs = self._start(
                    f"processes/{gpu.uuid}", "processes", functools.partial(self.backend.processes, gpu.uuid)
                )
                if procs is not None:
                    listing.append((gpu.uuid, procs))
            if gpu.mig_enabled and gpu.mig_devices:
                migs = self._start(f"mig_memory/{gpu.uuid}", "telemetry", functools.partial(self._read_mig_memory, gpu))
                if migs is not None:
                    memory.append((gpu.uuid, migs))
        answered: set[str] = set()
        for uuid, call in telemetry:
            got = self._await(f"telemetry/{uuid}", "telemetry", call, deadline)
            if got is not None:
                self._telemetry[uuid] = got
                self._sampled_at[uuid] = time.time()
                answered.add(uuid)
        for uuid, listed in listing:
            found = self._await(f"processes/{uuid}", "processes", listed, deadline)
            if found is not None:
                self._processes[uuid] = found
        for uuid, batch in memory:
            per_mig = self._await(f"mig_memory/{uuid}", "telemetry", batch, deadline)
            if per_mig is not None:
                self._mig_memory.update(per_mig)
        if self._saw_release:  # let go in the middle of the cycle: what was read is already old
            return self._released_cycle()
        present = {g.uuid for g in inv.gpus}
        self._telemetry = {u: t for u, t in self._telemetry.items() if u in present}
        migs_present = {m.uuid for m in inv.mig_devices}
        self._mig_memory = {u: m for u, m in self._mig_memory.items() if u in migs_present}
        self._processes = {u: p for u, p in self._processes.items() if u in present}
        if self.pod_lister is not None:
            rows = self._call("pod_resources", "pod_resources", self.pod_lister, time.monotonic() + self.call_timeout)
            if rows is not None:
                self._assignments = rows
                self._pods_at = time.time()
            self._pods_up = 0.0 if rows is None else 1.0
        pods = attribute(self._assignments, inv)
        usage = self._usage(pods) if self.processes else None
        sample = NodeSample(
            inventory=inv, telemetry=dict(self._telemetry), pods=pods, mig_memory=dict(self._mig_memory), usage=usage
        )
        ents = entities(inv, hostname=self.hostname, counters=self.counters)
        families = sample_families(self.counters, sample=sample, ents=ents)
        families += status_families(self._statuses(inv, answered), self._expected(inv))
        holders = {e.uuid: sample.holders(e.uuid) for e in ents}
        self._view = _View(
            entities=ents,
            families=families,
            pods=holders,
            collected_at=time.time() if ok else self._view.collected_at,
            usage=usage,
        )
        if ok:
            self._last_success = time.time()
            self._released = 0.0
            self._let_go = False
        self._changes += 1
        return ok

    def _usage(self, pods: dict[str, tuple[PodRef, ...]]) -> dict[str, DeviceUsage]:
        """Charge the processes last listed to containers (cgroups read once per new PID)."""
        if self.pod_directory is not None:
            directory = self._call(
                "pod_directory", "pod_resources", self.pod_directory, time.monotonic() + self.call_timeout
            )
            if directory is not None:
                self._directory = directory
        running = [p for procs in self._processes.values() for p in procs]
        pids = {p.pid for p in running}
        self._cgroups = {pid: c for pid, c in self._cgroups.items() if pid in pids}
        for pid in pids - set(self._cgroups):
            self._cgroups[pid] = self.cgroup_of(pid)
        return attribute_processes(running, holders=pods, cgroups=self._cgroups, directory=self._directory)

    def _statuses(self, inv: Inventory, answered: set[str]) -> list[GpuStatus]:
        for gpu in inv.gpus:
            self._known[gpu.uuid] = gpu_labels(gpu, self.hostname)
        return [GpuStatus(labels, uuid in answered, self._sampled_at.get(uuid)) for uuid, labels in self._known.items()]

    def _expected(self, inv: Inventory) -> tuple[int, str] | None:
        self._most_seen = max(self._most_seen, len(inv.gpus), len(self._known))
        told = self.expected_gpus() if self.expected_gpus is not None else None
        return told if told is not None else (self._most_seen, "seen")

    @property
    def usage(self) -> dict[str, DeviceUsage] | None:
        """The last collection's per-container usage by device UUID (None: attribution is off)."""
        return self._view.usage

    def _released_cycle(self) -> bool:
        """NVML is let go for a GPU reset: serve no GPU sample (nothing old passed off as current)."""
        if not self._let_go:
            log.info("NVML is let go for a GPU reset on this node: GPU samples left out until it is back")
        self._let_go = True
        self._telemetry, self._mig_memory, self._processes = {}, {}, {}
        self._view = _View(collected_at=time.time())
        self._released = 1.0
        self._changes += 1
        return True

    # ---- threads --------------------------------------------------------------------------

    def start(self) -> None:
        """Sample now and every ``interval`` seconds, and watch XID events, on daemon threads."""
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._sample_loop, daemon=True, name="gpuchain-exporter-sampler"),
            threading.Thread(target=self._events_thread, daemon=True, name="gpuchain-exporter-events"),
        ]
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop sampling and the event watch (a hung backend call is abandoned, not joined)."""
        self._stop.set()
        loop, task = self._events_loop, self._events_task
        if loop is not None and task is not None:
            loop.call_soon_threadsafe(task.cancel)
        for t in self._threads:
            t.join(timeout)
        self._threads = []

    def _sample_loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.collect_once()
            except Exception:
                log.exception("collection cycle failed; serving the last good values")
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))

    def _events_thread(self) -> None:
        while not self._stop.is_set():
            try:
                asyncio.run(self._watch_events())
            except Exception as exc:
                self._error("events")
                log.warning("XID event stream failed: %s; retrying", exc)
            self._stop.wait(1.0)

    async def _watch_events(self) -> None:
        self._events_loop = asyncio.get_running_loop()
        self._events_task = asyncio.current_task()
        if self._stop.is_set():
            return
        try:
            async for event in self.backend.events():
                if event.kind is EventKind.XID and event.xid is not None:
                    self.xids.record(event.mig_uuid or event.gpu_uuid, event.xid)
        except asyncio.CancelledError:
            return


def _gauge(name: str, documentation: str, value: float) -> Family:
    """A gauge family of one unlabelled sample."""
    return Family(name, documentation, "gauge", [Sample(name, {}, value)])

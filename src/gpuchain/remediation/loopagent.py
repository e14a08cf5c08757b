"""The node side of the per-GPU repair loop: read the Node, ``advance`` each GPU, do the work, write back.

One agent runs on each GPU node (in ``gpuchain gpu-health``, next to the publisher whose
``gpu-faults`` and ``gpu-pods`` annotations it reads). Each pass:

1. reads its Node (the loop annotation, the faults and pod map the publisher wrote, the boot ID)
   and the remediator's status ConfigMap (is the breaker open? unreadable counts as open);
2. for every GPU with a fault or a record, ``gpuloop.advance``; a reset or burn-in asked for runs
   here through the ``GpuBackend`` port, but only once the record asking for it (for a reset, the
   attempt it uses up) is written to the Node: a Node that cannot be written gets no reset at all.
   The result goes through ``gpuloop.complete``;
3. writes, only when something changed, the loop annotation, the quarantine list the device
   plugin and DRA plugin follow, and the reboot request (annotation and ``GPURebootRequired``
   condition, the latter two only while the breaker is closed), and records an Event on the Node
   for every stage a GPU entered, once the Node records it.

All state lives on the Node, so a restarted agent resumes each GPU where it was; a result the
closing write could not record stays in memory until a write does (see ``run_once``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from gpuchain.common.supervise import wait_event
from gpuchain.exporter.exposition import Family, Sample, histogram, render_families
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import GpuError, NotReacquiredError, ReleasedError
from gpuchain.gpu.nvmlrelease import DEFAULT_WAIT, ReleaseBoard
from gpuchain.gpu.quarantine import QUARANTINE_ANNOTATION, encode_quarantine
from gpuchain.kube.errors import KubeError
from gpuchain.kube.kinds import CONFIGMAP, NODE
from gpuchain.kube.objects import Obj, annotations_of
from gpuchain.kube.port import Cluster, now_rfc3339
from gpuchain.remediation.controller import STATUS_NAME
from gpuchain.remediation.decide import DEFAULT_NAMESPACE
from gpuchain.remediation.gpuloop import (
    LOOP_ANNOTATION,
    REBOOT_ANNOTATION,
    REBOOT_CONDITION,
    GpuRecord,
    LoopPolicy,
    Stage,
    Step,
    Work,
    advance,
    complete,
    decode_records,
    encode_records,
    keep,
    reboot_reason,
    withheld,
)
from gpuchain.remediation.model import (
    FAULTS_ANNOTATION,
    PODS_ANNOTATION,
    Fault,
    decode_faults,
    decode_pods,
    find_condition,
)

log = logging.getLogger(__name__)

COMPONENT = "gpuchain-gpu-repair"
EVENT_REASONS: Mapping[Stage, tuple[str, Literal["Normal", "Warning"]]] = {
    Stage.QUARANTINED: ("GPUQuarantined", "Warning"),
    Stage.DRAINED: ("GPUDrained", "Normal"),
    Stage.RESET: ("GPUResetStarted", "Normal"),
    Stage.BURN_IN: ("GPUBurnIn", "Normal"),
    Stage.HEALTHY: ("GPUReadmitted", "Normal"),
    Stage.REBOOT: ("GPURebootRequested", "Warning"),
    Stage.FAILED: ("GPURepairFailed", "Warning"),
}
STAGE_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
"""Histogram bounds (seconds): a drain takes seconds to a job's grace period, a reset tens of seconds."""
MAX_WORK_PER_PASS = 4
"""Work items one GPU may run in one pass (reset, then burn-in, ...): a bound, not a target."""
MAX_RETRY_S = 60.0
"""The longest wait after failed passes: an API server shedding writes is not hammered by every node."""


def retry_delay(interval: float, *, failures: int, draw: Callable[[float, float], float] = random.uniform) -> float:
    """The wait after ``failures`` passes failed in a row: ``interval`` plus a random share (jitter, so
    a fleet of agents does not retry in step) of a span that doubles per failure up to ``MAX_RETRY_S``."""
    span = min(interval * (2 ** min(failures, 32) - 1), max(MAX_RETRY_S - interval, 0.0))
    return interval + draw(0.0, span)


def new_steps(before: GpuRecord, after: GpuRecord) -> tuple[Step, ...]:
    """The timeline entries ``after`` has and ``before`` had not (trimming drops only old ones)."""
    seen = set(before.timeline)
    return tuple(s for s in after.timeline if s not in seen)


OUTCOMES = (
    "readmitted",
    "reboot-requested",
    "failed",
    "reset-ok",
    "reset-failed",
    "burn-in-ok",
    "burn-in-failed",
    "reacquire-failed",
)
"""Every value of the outcome counter, served from zero so ``rate()`` and alerts see the first one."""
REPAIR_STAGES = tuple(s for s in Stage if s is not Stage.HEALTHY)


@dataclass(kw_only=True)
class LoopMetrics:
    """What the loop did since the agent started, served by ``gpu-health --metrics-port``.

    ``durations`` holds, per stage, how long each GPU spent in it (seconds) when it left it;
    ``repairs`` how long each repair took from the quarantine (the pass that saw the fault) to the
    re-admission; ``outcomes`` counts how repairs ended (readmitted, reboot-requested, failed) and
    the results of the work (reset-ok, burn-in-failed, ...); ``current`` how many GPUs stand in
    each repair stage after the last pass. It is its own collector (``collect``),
    so the exporter's ``MetricsServer`` serves it as it serves the exporter's metrics. The agent
    updates it on a worker thread while the server renders it on another: every access holds
    ``_lock``, and ``generation`` moves with every change.
    """

    node: str = ""
    durations: dict[str, list[float]] = field(default_factory=dict)
    repairs: list[float] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    current: Counter[str] = field(default_factory=Counter)
    passes: Counter[str] = field(default_factory=Counter)
    last_pass: tuple[float, str | None] | None = None
    """When the last pass ended and why it failed (None: it succeeded)."""
    generation: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def registry(self) -> LoopMetrics:
        """What ``MetricsServer`` renders: this collector itself."""
        return self

    def observe(self, before: GpuRecord, after: GpuRecord) -> None:
        """Count the stages ``after`` entered since ``before``."""
        steps = new_steps(before, after)
        if not steps:
            return
        with self._lock:
            entered = _entered(before.timeline)
            for step in steps:
                if entered is not None and step.stage is entered.stage:
                    continue  # a note within the stage (the burn-in passed), not a new stage
                if entered is not None:
                    self.durations.setdefault(entered.stage.value, []).append(step.at - entered.at)
                if step.stage is Stage.HEALTHY and entered is not None:
                    self.outcomes["readmitted"] += 1
                    start = _repair_start(after)
                    if start is not None:
                        self.repairs.append(step.at - start)
                elif step.stage in (Stage.REBOOT, Stage.FAILED):
                    self.outcomes[step.stage.value] += 1
                entered = step
            self.generation += 1

    def count(self, outcome: str) -> None:
        """One more ``outcome`` (a work result such as ``reset-ok``)."""
        with self._lock:
            self.outcomes[outcome] += 1
            self.generation += 1

    def finished_pass(self, records: Mapping[str, GpuRecord] | None, *, error: str | None, at: float) -> None:
        """A pass ended: the GPUs per stage after it (None: unknown, the pass failed) and its error."""
        with self._lock:
            if records is not None:
                self.current = Counter(r.stage.value for r in records.values() if r.stage is not Stage.HEALTHY)
            self.passes["failed" if error else "ok"] += 1
            self.last_pass = (at, error)
            self.generation += 1

    def health(self) -> tuple[bool, str]:
        """``/health``: healthy while the last pass succeeded (it read the Node and wrote what changed)."""
        with self._lock:
            last = self.last_pass
        if last is None:
            return False, "no repair pass has finished yet"
        at, error = last
        if error is not None:
            return False, f"the last repair pass failed: {error}"
        return True, f"last repair pass ok at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(at))}"

    def collect(self) -> Iterator[Family]:
        """The families, as gpuchain's own (``exporter.exposition.Family``: the repair loop loads no
        prometheus-client): one histogram per stage left, the detect-to-re-admitted histogram, the
        outcome and pass counters, the GPUs per stage now."""
        with self._lock:
            durations = {k: list(v) for k, v in self.durations.items()}
            repairs = list(self.repairs)
            outcomes = Counter(self.outcomes)
            current = Counter(self.current)
            passes = Counter(self.passes)
        node = {"node": self.node} if self.node else {}
        name = "gpuchain_gpu_repair_stage_seconds"
        yield Family(
            name,
            "Seconds a GPU spent in a repair stage (quarantined: from detection until drained; drained: "
            "until the reset; reset; burn-in: until re-admitted), observed when it left the stage.",
            "histogram",
            [
                s
                for stage in sorted(durations)
                for s in histogram(name, labels={"stage": stage, **node}, bounds=STAGE_BUCKETS, values=durations[stage])
            ],
        )
        name = "gpuchain_gpu_repair_duration_seconds"
        yield Family(
            name,
            "Seconds from a fault's detection (the GPU quarantined) to the GPU's re-admission.",
            "histogram",
            histogram(name, labels=node, bounds=STAGE_BUCKETS, values=repairs),
        )
        name = "gpuchain_gpu_repair_outcomes"
        yield Family(
            name,
            "How repairs ended (readmitted, reboot-requested, failed) and reset/burn-in results.",
            "counter",
            [Sample(f"{name}_total", {"outcome": o, **node}, outcomes[o]) for o in sorted({*OUTCOMES, *outcomes})],
        )
        name = "gpuchain_gpu_repair_gpus"
        yield Family(
            name,
            "GPUs in each repair stage after the last pass (every other GPU is serving).",
            "gauge",
            [Sample(name, {"stage": stage.value, **node}, current[stage.value]) for stage in REPAIR_STAGES],
        )
        name = "gpuchain_gpu_repair_passes"
        yield Family(
            name,
            "Repair passes by result (failed: logged, retried).",
            "counter",
            [Sample(f"{name}_total", {"result": r, **node}, passes[r]) for r in ("ok", "failed")],
        )

    def to_json(self) -> dict[str, Any]:
        """The same figures as plain data (``gpuchain sim run -o json``): per stage left and for
        whole repairs the count and the sum of seconds, and the outcomes that happened."""
        with self._lock:
            durations = {k: list(v) for k, v in self.durations.items()}
            repairs = list(self.repairs)
            outcomes = {k: v for k, v in sorted(self.outcomes.items()) if v}
        return {
            "stageSeconds": {k: {"count": len(v), "sum": round(sum(v), 3)} for k, v in sorted(durations.items())},
            "repairSeconds": {"count": len(repairs), "sum": round(sum(repairs), 3)},
            "outcomes": outcomes,
        }

    def prometheus(self) -> str:
        """The metrics in Prometheus' text format, as ``/metrics`` serves them."""
        return render_families(self.collect())


def _entered(timeline: tuple[Step, ...]) -> Step | None:
    """The step where the last stage of ``timeline`` was entered (a stage may add steps while in it)."""
    if not timeline:
        return None
    first = timeline[-1]
    for step in reversed(timeline):
        if step.stage is not first.stage:
            break
        first = step
    return first


def _repair_start(rec: GpuRecord) -> float | None:
    """When the repair that just ended began: the last time the GPU entered quarantine."""
    return next((s.at for s in reversed(rec.timeline) if s.stage is Stage.QUARANTINED), None)


@dataclass(frozen=True)
class LoopPass:
    """One pass: every GPU's record after it, and whether the Node was written."""

    records: Mapping[str, GpuRecord]
    written: bool
    breaker_open: bool


class GpuLoopAgent:
    """Runs the repair loop for the GPUs of one node."""

    def __init__(
        self,
        backend: GpuBackend,
        *,
        cluster: Cluster,
        node_name: str,
        policy: LoopPolicy | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        clock: Callable[[], float] = time.time,
        board: ReleaseBoard | None = None,
        release_wait: float = DEFAULT_WAIT,
    ) -> None:
        self.backend = backend
        self.board = board
        """The node's NVML release board: with it, the node's gpuchain agents let go of NVML
        around a reset (the driver refuses it while any process holds NVML); None: reset as is."""
        self.release_wait = release_wait
        self.cluster = cluster
        self.node_name = node_name
        self.policy = policy or LoopPolicy()
        self.namespace = namespace
        self.clock = clock
        self.metrics = LoopMetrics(node=node_name)
        self._indexes: dict[str, int] = {}
        self._devices: dict[str, tuple[str, ...]] = {}
        self._unrecorded: dict[str, tuple[dict[str, Any] | None, GpuRecord]] = {}
        """Per GPU, results of work done that the pass's closing write could not record: (the record
        the Node showed then, JSON, None for none; the record after the work)."""

    def breaker_open(self) -> bool:
        """The remediator's breaker, from its status ConfigMap; unreadable counts as open (safe)."""
        try:
            cm = self.cluster.get_or_none(CONFIGMAP, name=STATUS_NAME, namespace=self.namespace)
        except KubeError as exc:
            log.warning(
                "cannot read %s/%s (%s); holding resets as if the breaker were open", self.namespace, STATUS_NAME, exc
            )
            return True
        return ((cm or {}).get("data") or {}).get("breaker") == "open"

    def _observe_inventory(self) -> None:
        try:
            inventory = self.backend.inventory()
        except ReleasedError:
            return  # NVML is let go (see _take_back): the GPUs seen before, nothing is wrong with them
        except GpuError as exc:
            log.warning("inventory failed (%s); using the GPUs seen before", exc)
            return
        for gpu in inventory.gpus:
            self._indexes[gpu.uuid] = gpu.index
            self._devices[gpu.uuid] = (gpu.uuid, *(m.uuid for m in gpu.mig_devices))

    def run_once(self) -> LoopPass:
        """One pass (see the module docstring). Raises the port's errors; a bad annotation is logged
        and the pass leaves the node alone.

        Nothing is done to a GPU that the Node does not record first: before a reset or a burn-in the
        record that asks for it (for a reset, the attempt it uses up) is written to the Node, and
        when that write fails the work waits. Otherwise a Node that can be read but not written (an
        etcd space alarm, write throttling, a webhook refusing the agent) would see the GPU reset on
        every pass, the attempt count that bounds resets never reaching the Node. The results of
        work done that the closing write could not record are kept in this process
        (``_unrecorded``) and used while the Node still shows what was written before the work, so
        a burn-in that passed is not run again either."""
        node = self.cluster.get(NODE, name=self.node_name)
        annotations = dict(annotations_of(node))
        recorded = decode_records(annotations.get(LOOP_ANNOTATION))
        records = self._with_unrecorded(recorded)
        announced = dict(recorded)  # what the Node shows and its Events told; moves on with each write
        faults = decode_faults(annotations.get(FAULTS_ANNOTATION))
        pods = decode_pods(annotations.get(PODS_ANNOTATION))
        self._take_back()
        self._observe_inventory()
        breaker = self.breaker_open()
        boot_id = str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID", ""))
        by_gpu: dict[str, Fault] = {f.gpu: f for f in faults.values() if f.uuid == f.gpu}
        after: dict[str, GpuRecord] = {}
        unrecordable: KubeError | None = None
        for uuid in sorted(set(records) | set(by_gpu)):
            rec = records.get(uuid) or GpuRecord(uuid=uuid)
            if rec.index is None and uuid in self._indexes:
                rec = replace(rec, index=self._indexes[uuid])
            fault = by_gpu.get(uuid)
            devices = {uuid, *self._devices.get(uuid, ()), *(fault.covers if fault else ())}
            holding = tuple(sorted({ref for d in devices for ref in pods.get(d, ())}))
            for _ in range(MAX_WORK_PER_PASS):
                ready = rec
                rec, work = advance(
                    rec,
                    fault=fault,
                    pods=holding,
                    breaker_open=breaker,
                    boot_id=boot_id,
                    now=self.clock(),
                    policy=self.policy,
                )
                if work is None:
                    break
                if unrecordable is None:
                    intent = {**records, **after, uuid: rec}
                    try:
                        self._record_intent(annotations, intent)
                    except KubeError as exc:
                        unrecordable = exc
                    else:
                        self._announce(node, announced, intent)
                if unrecordable is not None:
                    rec = replace(ready, waiting=f"waiting to record the {work.value} on the Node before it runs")
                    break
                try:
                    ok, detail = self._do(work, rec)
                except ReleasedError:
                    # This process has not got NVML back (see _take_back): no verdict on the GPU and
                    # no attempt used up; the GPU stays where it was and the work runs next pass.
                    rec = replace(ready, waiting=f"waiting for NVML to be taken back before the {work.value}")
                    break
                self.metrics.count(f"{work.value}-{'ok' if ok else 'failed'}")
                rec = complete(
                    rec, work=work, ok=ok, detail=detail, boot_id=boot_id, now=self.clock(), policy=self.policy
                )
            after[uuid] = rec
        kept = {u: r for u, r in after.items() if keep(r, now=self.clock(), policy=self.policy)}
        shown = decode_records(annotations.get(LOOP_ANNOTATION))
        try:
            written = self._write(node, annotations, kept, breaker)
        except KubeError:
            seen = {u: _json_or_none(shown.get(u)) for u in after}
            self._unrecorded = {u: (seen[u], r) for u, r in after.items() if seen[u] != r.to_json()}
            raise
        self._unrecorded = {}
        self._announce(node, announced, after)
        if unrecordable is not None:
            raise unrecordable
        return LoopPass(after, written, breaker)

    def _with_unrecorded(self, records: dict[str, GpuRecord]) -> dict[str, GpuRecord]:
        """``records`` as read from the Node, with the results of work this process did but could not
        record, for each GPU whose record on the Node is still the one written before that work.
        A record that moved on (another writer, a restarted agent) wins."""
        merged = dict(records)
        for uuid, (seen, result) in self._unrecorded.items():
            if _json_or_none(records.get(uuid)) == seen:
                merged[uuid] = result
        return merged

    def _announce(self, node: Obj, announced: dict[str, GpuRecord], records: Mapping[str, GpuRecord]) -> None:
        """Count in the metrics and tell as Events the stages ``records`` entered since ``announced``
        (what was told before), once they are on the Node: a stage a failed write kept off the Node
        is told when a later write records it, not on every pass that recomputes it."""
        for uuid, rec in records.items():
            told = announced.get(uuid) or GpuRecord(uuid=uuid, index=rec.index)
            self.metrics.observe(told, rec)
            self._events(node, told, rec)
            announced[uuid] = rec

    def _record_intent(self, annotations: dict[str, str], records: Mapping[str, GpuRecord]) -> None:
        """Write the loop annotation and the quarantine list for ``records`` unless the Node already
        shows them; ``annotations`` becomes what the Node shows. Raises the port's error: the work
        the record asks for must then not run."""
        kept = {u: r for u, r in records.items() if keep(r, now=self.clock(), policy=self.policy)}
        wanted = {LOOP_ANNOTATION: encode_records(kept), QUARANTINE_ANNOTATION: encode_quarantine(withheld(kept))}
        patch = {k: v for k, v in wanted.items() if annotations.get(k) != v}
        if patch:
            written = self.cluster.patch(NODE, name=self.node_name, patch={"metadata": {"annotations": patch}})
            annotations.clear()
            annotations.update(annotations_of(written))

    def _take_back(self) -> None:
        """Take NVML back when a reset left this process without it (the backend could not be
        initialised again right after the reset): without this gpu-health would publish stale
        health and hear no event for good. A failure is logged and tried again next pass."""
        if not self.backend.released:
            return
        try:
            self.backend.reacquire()
        except GpuError as exc:
            log.error("NVML is still let go after a GPU reset on %s; taking it back failed: %s", self.node_name, exc)
            self.metrics.count("reacquire-failed")
        else:
            log.info("NVML taken back on node %s after a GPU reset", self.node_name)

    def _do(self, work: Work, rec: GpuRecord) -> tuple[bool, str]:
        """Run one reset or burn-in through the backend port; (ok, what happened). ReleasedError
        passes through: no NVML in this process now is no verdict on the GPU."""
        if rec.index is None:
            return False, "the GPU's index is unknown (it was lost before this agent saw it)"
        try:
            if work is Work.RESET:
                return self._reset(rec.index, rec.uuid)
            result = self.backend.burn_in(rec.index)
        except ReleasedError:
            raise
        except GpuError as exc:
            return False, str(exc)
        return result.passed, result.summary()

    def _reset(self, index: int, uuid: str) -> tuple[bool, str]:
        """Reset one GPU; with a board, while the node's agents have let go of NVML. A reset refused
        although some agent did not let go names it (component, pod, pid) in the detail, which the
        Event, the loop annotation and the reboot request carry."""
        if self.backend.released:  # no NVML here: asking the node's agents to let go would be for nothing
            raise ReleasedError(f"GPU {index}: NVML is not taken back yet after an earlier reset")
        if self.board is None:
            return self._reset_now(index)
        with self.board.letting_go((uuid,), reason=f"reset GPU {index}", wait=self.release_wait, by=COMPONENT) as seen:
            try:
                ok, detail = self._reset_now(index)
            except ReleasedError:
                raise
            except GpuError as exc:
                if seen.complete:
                    raise
                return False, f"{exc}; {seen.describe()}"
        return ok, detail + ("" if seen.complete else f" ({seen.describe()})")

    def _reset_now(self, index: int) -> tuple[bool, str]:
        """The backend's reset. One that went through although NVML could not be taken back after it
        is a reset done: the GPU goes on to its burn-in, which waits until the next pass takes NVML
        back (``_take_back``)."""
        try:
            self.backend.reset_gpu(index)
        except NotReacquiredError as exc:
            if exc.reset_error is not None:
                raise
            log.error("%s", exc)
            return True, f"GPU {index} reset; NVML not yet taken back"
        return True, f"GPU {index} reset"

    def _events(self, node: Obj, before: GpuRecord, after: GpuRecord) -> None:
        for step in new_steps(before, after):
            reason, kind = EVENT_REASONS[step.stage]
            if step.stage is Stage.BURN_IN and step.note.startswith("passed"):
                reason = "GPUBurnInPassed"
            message = f"GPU {after.index if after.index is not None else '?'} ({after.uuid}): {step.stage.value}"
            if step.note:
                message += f": {step.note}"
            try:
                self.cluster.record_event(node, reason=reason, message=message, type=kind, component=COMPONENT)
            except KubeError as exc:  # an Event is a courtesy; the annotation is the record
                log.warning("could not record %s on Node %s: %s", reason, self.node_name, exc)

    def _write(
        self, node: Obj, annotations: Mapping[str, str], records: Mapping[str, GpuRecord], breaker: bool
    ) -> bool:
        reason = reboot_reason(records)
        asked = annotations.get(REBOOT_ANNOTATION)
        request = reason if reason is not None and (not breaker or asked) else None
        wanted = {
            LOOP_ANNOTATION: encode_records(records),
            QUARANTINE_ANNOTATION: encode_quarantine(withheld(records)),
            REBOOT_ANNOTATION: request,
        }
        patch = {k: v for k, v in wanted.items() if annotations.get(k) != v}
        if patch:
            node = self.cluster.patch(NODE, name=self.node_name, patch={"metadata": {"annotations": patch}})
        before = find_condition(node, REBOOT_CONDITION)
        status = "True" if request else "False"
        if (before is None and request) or (before is not None and before.status != status):
            message = request or "no GPU needs the node rebooted"
            self.cluster.set_condition(NODE, name=self.node_name, condition=_condition(status, message))
        return bool(patch)

    async def run(self, stop: asyncio.Event | None = None, interval: float = 5.0) -> None:
        """Pass after pass until ``stop`` is set. A failed pass is logged whole and the next one
        starts from a fresh read of the Node (the loop's state is there, not in this process), after
        a backoff with jitter (``retry_delay``) while passes keep failing."""
        stop = stop or asyncio.Event()
        failures = 0
        while not stop.is_set():
            wait = interval
            try:
                result = await asyncio.to_thread(self.run_once)
            except Exception as exc:
                failures += 1
                wait = retry_delay(interval, failures=failures)
                log.exception("GPU repair pass on node %s failed; retrying in %.1f s", self.node_name, wait)
                self.metrics.finished_pass(None, error=f"{type(exc).__name__}: {exc}", at=self.clock())
            else:
                failures = 0
                self.metrics.finished_pass(result.records, error=None, at=self.clock())
            await wait_event(stop, wait)


def _json_or_none(rec: GpuRecord | None) -> dict[str, Any] | None:
    """A record as the annotation holds it (None: the Node has none for the GPU), for comparing."""
    return None if rec is None else rec.to_json()


def _condition(status: str, message: str) -> dict[str, Any]:
    stamp = now_rfc3339()
    return {
        "type": REBOOT_CONDITION,
        "status": status,
        "reason": "GPURepairNeedsReboot" if status == "True" else "NoRebootNeeded",
        "message": message,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }

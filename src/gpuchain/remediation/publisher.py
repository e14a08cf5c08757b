"""Node side: publish this node's GPU health and GPU-to-pod map on its Node object.

The device plugin stops handing out a failed GPU but cannot tell anyone about the pods already
on it. This publisher (``gpuchain gpu-health``, one per GPU node) watches the same backend health
events with the same ``HealthPolicy``, recovery quiet period and stream-failure handling as the
device plugin (the GPU layer's ``HealthState`` and ``follow_events``), and writes:

- condition ``GPUHealthy`` (False with the UUIDs and XIDs; True again on recovery) and an Event
  on each transition,
- the ``gpuchain.io/gpu-faults`` and ``gpuchain.io/gpu-pods`` annotations (see ``model``), the
  pod map coming from the kubelet's pod-resources API through the exporter's client.

Writes happen only when something differs, so a resync that finds nothing new makes no writes.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from gpuchain.common.supervise import cancel_and_wait, spawn
from gpuchain.exporter.podresources import Assignment, PodResourcesError, attribute
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import GpuError, ReleasedError
from gpuchain.gpu.health import HealthState, follow_events
from gpuchain.gpu.model import DriverInfo, EventKind, Gpu, HealthEvent, Inventory
from gpuchain.gpu.probes import ProbeState
from gpuchain.gpu.xid import HealthPolicy
from gpuchain.kube.errors import ForbiddenError
from gpuchain.kube.kinds import NODE
from gpuchain.kube.objects import Obj, annotations_of
from gpuchain.kube.port import Cluster, now_rfc3339
from gpuchain.remediation.model import (
    CONDITION_TYPE,
    FAULTS_ANNOTATION,
    PODS_ANNOTATION,
    Fault,
    condition_for,
    encode_faults,
    encode_pods,
    find_condition,
)

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 300.0
"""How often an unchanged GPUHealthy condition is rewritten (its lastHeartbeatTime moves)."""

COMPONENT = "gpuchain-gpu-health"
EVENT_UNHEALTHY = "GPUUnhealthy"
EVENT_HEALTHY = "GPUHealthy"

PodSource = Callable[[], list[Assignment]]
"""Where device assignments come from: ``PodResourcesClient(socket).list`` on a node."""


@dataclass(kw_only=True)
class FaultTracker:
    """Which devices are unhealthy and with which XIDs (pure state; the caller passes the clock).

    ``HealthState`` (the device plugin's) decides what counts, keeps the XIDs that counted per
    device, and when a recovered GPU is healthy again; this adds what the controller needs and
    HealthState does not keep: lost GPUs, and the MIG devices a whole-GPU failure takes down.
    """

    health: HealthState
    lost: set[str] = field(default_factory=set)
    migs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    probed: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """GPU UUID -> the probes its readings trip now (``gpu.probes``); GPUs with none are left out."""

    @classmethod
    def with_policy(cls, policy: HealthPolicy | None = None, quiet_seconds: float = 10.0) -> FaultTracker:
        return cls(health=HealthState(policy=policy or HealthPolicy(), quiet_seconds=quiet_seconds))

    def observe(self, gpus: Iterable[Gpu]) -> None:
        """Remember each GPU's MIG devices (a lost GPU drops out of the inventory; its MIGs must not)."""
        for gpu in gpus:
            self.migs[gpu.uuid] = tuple(m.uuid for m in gpu.mig_devices)

    def apply(self, event: HealthEvent, now: float) -> bool:
        """Take one backend event into account; True when the published faults change."""
        before = self.faults()
        self.health.apply(event, now)
        if event.kind is EventKind.GPU_LOST and self.health.policy.checks:
            self.lost.add(event.gpu_uuid)
        self._prune()
        return self.faults() != before

    def fail_all(self, gpu_uuids: list[str]) -> None:
        """The event stream broke: as the device plugin does, vouch for nothing."""
        self.health.fail_all(gpu_uuids)

    def due(self, now: float) -> bool:
        """Finish recoveries whose quiet period has passed; True when any device came back."""
        done = self.health.due(now)
        self._prune()
        return bool(done)

    def next_deadline(self) -> float | None:
        return self.health.next_deadline()

    def _prune(self) -> None:
        self.lost &= set(self.health.bad_gpus)

    def faults(self) -> dict[str, Fault]:
        """The unhealthy devices as published: whole GPUs cover their MIG devices; a GPU whose
        readings trip a probe is published with it even when no event marked it. Each carries the
        node's verdict (its resolution by this node's XID table, overrides included), which the
        remediator acts on instead of the shipped table."""
        out: dict[str, Fault] = {}
        for gpu in sorted(set(self.health.bad_gpus) | set(self.probed)):
            covers = (gpu, *self.migs.get(gpu, ()))
            xids = tuple(sorted(self.health.xids.get(gpu, ())))
            probed = self.probed.get(gpu, ())
            out[gpu] = self._judged(
                Fault(
                    uuid=gpu,
                    gpu=gpu,
                    xids=xids,
                    lost=gpu in self.lost,
                    covers=covers,
                    probes=probed,
                    repeated=self.health.repeated(gpu),
                )
            )
        for mig, (parent, _) in self.health.bad_migs.items():
            if parent not in out:
                xids = tuple(sorted(self.health.xids.get(mig, ())))
                out[mig] = self._judged(
                    Fault(
                        uuid=mig, gpu=parent, xids=xids, lost=False, covers=(mig,), repeated=self.health.repeated(mig)
                    )
                )
        return out

    def _judged(self, fault: Fault) -> Fault:
        return replace(fault, resolution=fault.needs(self.health.policy.table))


@dataclass(frozen=True, kw_only=True)
class PublishResult:
    """What one publish pass found and wrote."""

    faults: dict[str, Fault]
    pods: dict[str, tuple[str, ...]]
    annotations_written: bool
    condition_written: bool
    event: str | None = None


class GpuHealthPublisher:
    """Keeps one Node's GPUHealthy condition and GPU annotations in step with the backend's events."""

    def __init__(
        self,
        backend: GpuBackend,
        *,
        cluster: Cluster,
        node_name: str,
        pods: PodSource | None = None,
        policy: HealthPolicy | None = None,
        quiet_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        heartbeat_s: float = HEARTBEAT_SECONDS,
    ) -> None:
        """``heartbeat_s``: rewrite an unchanged condition this often, so its lastHeartbeatTime
        shows the remediator it was written under the current admission policy."""
        self.heartbeat_s = heartbeat_s
        self.backend = backend
        self.cluster = cluster
        self.node_name = node_name
        self.pod_source = pods
        self.tracker = FaultTracker.with_policy(policy, quiet_seconds)
        self.clock = clock
        self._lock = threading.Lock()
        self._gpus: dict[str, Gpu] = {}
        self._pods: dict[str, tuple[str, ...]] = {}
        self._driver: DriverInfo | None = None
        self.probes = ProbeState()

    def handle(self, event: HealthEvent) -> bool:
        """Feed one backend event; True when the node needs publishing."""
        with self._lock:
            if event.kind is EventKind.GPU_RECOVERED:
                self.probes.reset(event.gpu_uuid, self.clock())  # a reset starts its counters afresh
            return self.tracker.apply(event, self.clock())

    def _refresh_inventory(self) -> Inventory | None:
        try:
            inventory = self.backend.inventory()
        except ReleasedError:
            pass  # NVML let go for a GPU reset on this node: the last known GPUs, nothing is wrong
        except GpuError as exc:
            log.warning("inventory failed (%s); keeping the last known GPUs", exc)
        else:
            self._driver = inventory.driver
            self._gpus.update({g.uuid: g for g in inventory.gpus})
            with self._lock:
                self.tracker.observe(inventory.gpus)
        if self._driver is None:
            return None
        return Inventory(self._driver, tuple(sorted(self._gpus.values(), key=lambda g: g.index)))

    def _pod_map(self, inventory: Inventory | None) -> dict[str, tuple[str, ...]]:
        """Device UUID -> containers, from pod-resources; the last good map when the kubelet does not answer."""
        if self.pod_source is None or inventory is None:
            return self._pods
        try:
            rows = self.pod_source()
        except PodResourcesError as exc:
            log.warning("%s; keeping the last pod map", exc)
            return self._pods
        held = attribute(rows, inventory)
        self._pods = {u: tuple(f"{r.namespace}/{r.pod}/{r.container}" for r in refs) for u, refs in held.items()}
        return self._pods

    def _probe(self, inventory: Inventory | None) -> dict[str, tuple[str, ...]]:
        """The probes each GPU's readings trip. A GPU that cannot be read now keeps what its last
        reading tripped: no reading is no evidence either way. While NVML is let go for another
        GPU's reset (ReleasedError), dropping a probed fault would publish the node healthy for the
        length of the reset, and the remediator would lift its taint from a node waiting for a
        reboot. A lost GPU is reported by its event."""
        found: dict[str, tuple[str, ...]] = {}
        with self._lock:
            before = dict(self.tracker.probed)
        for gpu in inventory.gpus if inventory is not None else ():
            try:
                tripped = self.probes.check(self.backend.health_readings(gpu.uuid), self.clock())
            except GpuError:  # ReleasedError included: never a fault, never a recovery
                if gpu.uuid in before:
                    found[gpu.uuid] = before[gpu.uuid]
                continue
            if tripped and self.tracker.health.policy.checks:
                found[gpu.uuid] = tripped
        return found

    def publish(self) -> PublishResult:
        """Write the annotations (first, so the controller never sees a condition without its data),
        then the condition and an Event on a change. Writes nothing when the Node already says it."""
        inventory = self._refresh_inventory()
        probed = self._probe(inventory)
        with self._lock:
            self.tracker.probed = probed
            self.tracker.due(self.clock())
            faults = self.tracker.faults()
        pods = self._pod_map(inventory)
        node = self.cluster.get(NODE, name=self.node_name)
        wanted = {
            FAULTS_ANNOTATION: encode_faults(faults) if faults else None,
            PODS_ANNOTATION: encode_pods(pods) if pods else None,
        }
        current = annotations_of(node)
        patch = {k: v for k, v in wanted.items() if current.get(k) != v}
        if patch:
            node = self.cluster.patch(NODE, name=self.node_name, patch={"metadata": {"annotations": patch}})
        status, reason, message = condition_for(faults)
        before = find_condition(node)
        same = before is not None and (before.status, before.reason, before.message) == (status, reason, message)
        if same and not _heartbeat_due(node, self.heartbeat_s):
            return PublishResult(faults=faults, pods=pods, annotations_written=bool(patch), condition_written=False)
        self.cluster.set_condition(NODE, name=self.node_name, condition=_condition(node, status, reason, message))
        event = None
        if status == "False":
            event = EVENT_UNHEALTHY
            self.cluster.record_event(node, reason=event, message=message, type="Warning", component=COMPONENT)
        elif before is not None and not before.healthy:
            event = EVENT_HEALTHY
            self.cluster.record_event(node, reason=event, message=message, component=COMPONENT)
        return PublishResult(
            faults=faults, pods=pods, annotations_written=bool(patch), condition_written=True, event=event
        )

    async def run(self, stop: asyncio.Event | None = None, resync: float = 30.0) -> None:
        """Publish now, then on every health change, recovery deadline and every ``resync`` seconds
        (pods come and go without health events) until ``stop`` is set."""
        stop = stop or asyncio.Event()
        wake = asyncio.Event()

        async def on_event(event: HealthEvent) -> None:
            deadline = self.tracker.next_deadline()
            if self.handle(event) or self.tracker.next_deadline() != deadline:
                wake.set()  # new fault, or a recovery whose quiet period needs a timer

        async def on_failure(exc: Exception) -> None:
            with self._lock:
                self.tracker.fail_all(list(self._gpus))
            wake.set()

        async def on_subscribe() -> None:
            with self._lock:
                self.tracker.health.stream_restored(self.clock())
            wake.set()  # the stream marks' quiet period needs a timer

        consumer = spawn(
            "gpu-health: health events",
            run=lambda: follow_events(
                self.backend.events, on_event=on_event, on_failure=on_failure, on_subscribe=on_subscribe
            ),
        )
        stopper = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                try:
                    await asyncio.to_thread(self.publish)
                except ForbiddenError as exc:  # retried too: RBAC and policy caches can lag a fresh install
                    log.error(
                        "the cluster refuses gpu-health's writes to node %s (RBAC or gpuchain's admission "
                        "policy; gpu-health must run on that node with its pod's own service account token): %s",
                        self.node_name,
                        exc,
                    )
                except Exception as exc:  # keep running: the next pass retries against a fresh read
                    log.error("publishing GPU health on node %s failed: %s", self.node_name, exc)
                timeout = resync
                deadline = self.tracker.next_deadline()
                if deadline is not None:
                    timeout = max(0.0, min(resync, deadline - self.clock()))
                waker = asyncio.create_task(wake.wait())
                await asyncio.wait({waker, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                waker.cancel()
                wake.clear()
        finally:
            await cancel_and_wait(consumer, stopper)


def _heartbeat_due(node: Obj, every_s: float) -> bool:
    """Is the GPUHealthy condition's lastHeartbeatTime older than ``every_s`` (or unreadable)?"""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == CONDITION_TYPE:
            try:
                beat = datetime.datetime.fromisoformat(str(c.get("lastHeartbeatTime", "")).replace("Z", "+00:00"))
            except ValueError:
                return True
            return (datetime.datetime.now(datetime.UTC) - beat).total_seconds() >= every_s
    return True


def _condition(node: Obj, status: str, reason: str, message: str) -> dict[str, Any]:
    """The GPUHealthy condition to write, given the Node as read (only this condition is sent:
    the port merges it by type, so the kubelet's conditions are never rewritten from a stale read).

    lastTransitionTime moves only when the status flips, as Kubernetes conditions require.
    """
    stamp = now_rfc3339()
    conditions = (node.get("status") or {}).get("conditions") or []
    old = next((c for c in conditions if c.get("type") == CONDITION_TYPE), None)
    transition = stamp if old is None or old.get("status") != status else old.get("lastTransitionTime", stamp)
    return {
        "type": CONDITION_TYPE,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": transition,
    }

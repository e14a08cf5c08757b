"""The DRA plugin's decisions, free of gRPC: publish the slice, follow health, prepare claims.

``DraDriver`` joins the pure parts (``slices``, ``health``, ``cdi``) with the node's GPU backend,
the ``Cluster`` port and the checkpoint. The gRPC services in ``server`` and the simulator call
it; tests can too. Every method is safe to call from several threads.

Prepare reads the ResourceClaim from the API (the kubelet sends only namespace, name and UID),
takes the allocation results for this driver, checks each device is one this node publishes and
healthy, writes the claim's CDI spec, then records the claim in the checkpoint. A second Prepare
answers from the checkpoint (rewriting the spec if a reboot emptied the CDI directory);
Unprepare removes the spec and the record, and succeeds when they are already gone. Either step
may be repeated after a crash without harm.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuchain.dra import cdi, health, slices
from gpuchain.dra.checkpoint import FILE_NAME, Checkpoint, PreparedClaim, PreparedDevice
from gpuchain.dra.kinds import DRIVER, RESOURCE_CLAIM, RESOURCE_SLICE
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.errors import GpuError
from gpuchain.gpu.model import HealthEvent, Inventory
from gpuchain.gpu.xid import HealthPolicy
from gpuchain.kube.errors import KubeError
from gpuchain.kube.kinds import NODE
from gpuchain.kube.objects import Obj
from gpuchain.kube.port import Cluster

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path("/var/lib/kubelet/plugins") / DRIVER


class PrepareError(Exception):
    """A claim cannot be prepared (or unprepared) on this node; the message says which and why."""


@dataclass(frozen=True)
class ClaimRef:
    """A ResourceClaim as the kubelet names it."""

    namespace: str
    uid: str
    name: str


@dataclass(frozen=True)
class DriverConfig:
    """Where the plugin keeps its files and which health events withdraw devices."""

    node: str
    cdi_dir: Path = cdi.DEFAULT_CDI_DIR
    state_dir: Path = DEFAULT_STATE_DIR
    policy: HealthPolicy = field(default_factory=HealthPolicy)


@dataclass(frozen=True)
class Published:
    """The outcome of one publish: the pool generation now live and whether this call changed it."""

    generation: int
    changed: bool
    devices: tuple[str, ...]


class DraDriver:
    """One node's DRA plugin state: unhealthy devices, the published pool, prepared claims."""

    def __init__(self, backend: GpuBackend, cluster: Cluster, config: DriverConfig) -> None:
        self.backend = backend
        self.cluster = cluster
        self.config = config
        self.checkpoint = Checkpoint(config.state_dir / FILE_NAME)
        self._unhealthy: frozenset[str] = frozenset()
        self._lock = threading.RLock()

    @property
    def node(self) -> str:
        return self.config.node

    @property
    def unhealthy(self) -> frozenset[str]:
        """GPU and MIG UUIDs withdrawn for health."""
        return self._unhealthy

    # ---- the slice ----------------------------------------------------------------------------

    def desired_slice(self, inventory: Inventory | None = None, live: Obj | None = None) -> Obj:
        """The ResourceSlice this node should publish now, checked against the API's rules."""
        inv = inventory or self.backend.inventory()
        devices = slices.render_devices(inv, self._unhealthy)
        owner = self.cluster.get_or_none(NODE, self.node)
        obj = slices.resource_slice(self.node, devices, slices.pool_generation(live, devices), owner)
        slices.check_slice(obj)
        return obj

    def publish(self) -> Published:
        """Bring the live ResourceSlice to the current devices; a new generation only on change."""
        with self._lock:
            live = self.cluster.get_or_none(RESOURCE_SLICE, slices.slice_name(self.node))
            desired = self.desired_slice(live=live)
            result = self.cluster.apply(desired, live, known_live=True)
            spec = desired["spec"]
            names = tuple(str(d["name"]) for d in spec["devices"])
            return Published(int(spec["pool"]["generation"]), result.changed, names)

    def on_event(self, event: HealthEvent) -> Published | None:
        """Apply a health event; republish when it changed the unhealthy set (else None)."""
        with self._lock:
            inventory = self.backend.inventory()
            after = health.apply_event(self._unhealthy, event, inventory, self.config.policy)
            if after == self._unhealthy:
                return None
            self._unhealthy = after
            return self.publish()

    async def follow_health(self) -> None:
        """Consume the backend's health events forever, republishing on each change.

        A failed publish is logged, not raised: the unhealthy set is already updated and the next
        resync publishes it, while the plugin keeps serving prepared claims.
        """
        async for event in self.backend.events():
            try:
                await asyncio.to_thread(self.on_event, event)
            except (KubeError, GpuError, OSError) as exc:
                log.error("health event %s on %s: slice not republished yet: %s", event.kind, event.gpu_uuid, exc)

    async def resync(self, interval: float) -> None:
        """Republish every ``interval`` seconds, so a MIG re-layout (no event) or a failed write heals."""
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(self.publish)
            except (KubeError, GpuError, OSError) as exc:
                log.error("republishing ResourceSlice %s failed, retrying in %ss: %s", self.node, interval, exc)

    # ---- claims -------------------------------------------------------------------------------

    def prepare(self, ref: ClaimRef) -> PreparedClaim:
        """Prepare a claim (idempotent); raises PrepareError naming the claim and the problem."""
        with self._lock:
            done = self.checkpoint.get(ref.uid)
            if done is not None:
                self._ensure_spec(done)
                return done
            results = self._allocated(ref)
            known = self._devices_by_name()
            devices: list[cdi.CdiDevice] = []
            for result in results:
                name = str(result.get("device", ""))
                if name not in known:
                    raise PrepareError(f"claim {ref.namespace}/{ref.name}: device {name!r} is not on node {self.node}")
                device, healthy = known[name]
                if not healthy:
                    raise PrepareError(
                        f"claim {ref.namespace}/{ref.name}: device {name!r} ({device.uuid}) is unhealthy and "
                        "withdrawn from the slice; delete the claim so the scheduler allocates another device"
                    )
                devices.append(device)
            cdi_ids = cdi.write_spec(self.config.cdi_dir, ref.uid, devices)
            prepared = PreparedClaim(
                ref.uid,
                ref.namespace,
                ref.name,
                tuple(
                    PreparedDevice((str(r.get("request", "")),), self.node, d.name, (cid,), d.uuid, d.device_node)
                    for r, d, cid in zip(results, devices, cdi_ids, strict=True)
                ),
            )
            self.checkpoint.add(prepared)
            return prepared

    def _ensure_spec(self, claim: PreparedClaim) -> None:
        """Rewrite a prepared claim's CDI spec if it is gone (a reboot empties /var/run/cdi)."""
        if not cdi.spec_path(self.config.cdi_dir, claim.uid).exists():
            devices = [cdi.CdiDevice(d.device, d.uuid, d.device_node) for d in claim.devices]
            cdi.write_spec(self.config.cdi_dir, claim.uid, devices)

    def unprepare(self, ref: ClaimRef) -> bool:
        """Undo Prepare (idempotent); False when the claim was not prepared."""
        with self._lock:
            removed = cdi.remove_spec(self.config.cdi_dir, ref.uid)
            forgotten = self.checkpoint.discard(ref.uid)
            return removed or forgotten

    def _allocated(self, ref: ClaimRef) -> list[dict[str, Any]]:
        where = f"claim {ref.namespace}/{ref.name}"
        claim = self.cluster.get_or_none(RESOURCE_CLAIM, ref.name, ref.namespace)
        if claim is None:
            raise PrepareError(f"{where} does not exist")
        uid = claim.get("metadata", {}).get("uid")
        if uid and uid != ref.uid:
            raise PrepareError(f"{where} has UID {uid}, the kubelet asked for {ref.uid} (the claim was recreated)")
        allocation = claim.get("status", {}).get("allocation")
        if not allocation:
            raise PrepareError(f"{where} is not allocated yet (status.allocation is empty)")
        results = [r for r in allocation.get("devices", {}).get("results", []) if r.get("driver") == DRIVER]
        if not results:
            raise PrepareError(f"{where} has no device of driver {DRIVER} in status.allocation.devices.results")
        for r in results:
            if r.get("pool") != self.node:
                raise PrepareError(
                    f"{where}: device {r.get('device')!r} is allocated from pool {r.get('pool')!r}, "
                    f"not this node's pool {self.node!r}"
                )
        return results

    def _devices_by_name(self) -> dict[str, tuple[cdi.CdiDevice, bool]]:
        """Every device this node has (published or withdrawn) by DRA name, with its health."""
        found: dict[str, tuple[cdi.CdiDevice, bool]] = {}
        for gpu in self.backend.inventory().gpus:
            gpu_ok = not slices.withdrawn(gpu, self._unhealthy)
            if not gpu.mig_enabled:
                found[slices.gpu_device_name(gpu)] = (
                    cdi.CdiDevice(slices.gpu_device_name(gpu), gpu.uuid, gpu.device_node),
                    gpu_ok,
                )
            for mig in gpu.mig_devices:
                name = slices.mig_device_name(mig)
                mig_ok = gpu_ok and mig.uuid not in self._unhealthy
                found[name] = (cdi.CdiDevice(name, mig.uuid, gpu.device_node), mig_ok)
        return found

"""The DRA plugin's decisions, free of gRPC: publish the slice, follow health, prepare claims.

``DraDriver`` joins the pure parts (``slices``, ``cdi``, and the GPU layer's ``HealthState``,
the same health rules as the device plugin's) with the node's GPU backend, the ``Cluster`` port
and the checkpoint. The gRPC services in ``server`` and the simulator call
it; tests can too. Every method is safe to call from several threads. It decides; the slice and
Node writes are ``publishing``'s, the MIG instances made and destroyed ``instances``'s, the
reading of a shared GPU's other consumers ``consumers``'s.

Prepare reads the ResourceClaim from the API (the kubelet sends only namespace, name and UID),
takes the allocation results for this driver, checks each device is one this node publishes and
healthy, writes the claim's CDI spec, then records the claim in the checkpoint. A second Prepare
answers from the checkpoint (rewriting the spec if a reboot emptied the CDI directory);
Unprepare removes the record, then the spec, and succeeds when they are already gone. Either step
may be repeated after a crash without harm.

Both are all or nothing, so that a plugin restart finds exactly the claims the kubelet was told
are prepared: Prepare answers success only once the checkpoint on disk holds the claim, and when
it cannot record it (the state directory full) it removes the spec it wrote and keeps nothing in
memory; Unprepare that cannot record the claim's removal leaves the claim prepared, its record
and spec in place, and answers the error, so the kubelet retries it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuchain.common.files import remove
from gpuchain.dra import cdi, claims, consumers, instances, mps, partitions, publishing, shares, slices
from gpuchain.dra.checkpoint import FILE_NAME, Checkpoint, CreatedInstance, PreparedClaim, PreparedDevice
from gpuchain.dra.errors import PrepareError
from gpuchain.dra.kinds import DRIVER, RESOURCE_CLAIM
from gpuchain.dra.metrics import DraMetrics
from gpuchain.dra.taints import health_taint, mps_taint
from gpuchain.gpu.backend import GpuBackend, SeenInventory
from gpuchain.gpu.cdi import DEFAULT_CDI_DIR
from gpuchain.gpu.errors import GpuError
from gpuchain.gpu.health import DEFAULT_QUIET_SECONDS, HealthState, follow_events, run_recoveries
from gpuchain.gpu.model import HealthEvent, Inventory
from gpuchain.gpu.xid import HealthPolicy
from gpuchain.kube.allocator import DEVICE_PLUGIN, Allocator, dra_may_publish
from gpuchain.kube.errors import InvalidError, KubeError
from gpuchain.kube.kinds import NODE
from gpuchain.kube.mig_owner import mig_change_pending
from gpuchain.kube.objects import Obj
from gpuchain.kube.port import Cluster

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path("/var/lib/kubelet/plugins") / DRIVER


@dataclass(frozen=True)
class ClaimRef:
    """A ResourceClaim as the kubelet names it."""

    namespace: str
    uid: str
    name: str


@dataclass(frozen=True, kw_only=True)
class DriverConfig:
    """Where the plugin keeps its files, which health events withdraw devices and when they return.

    ``recovery_quiet_seconds`` is the device plugin's ``health.recoveryQuietSeconds``: how long a
    recovered GPU (or a restored event stream) must stay quiet before its devices are published
    again. ``dev_root`` is where the driver's ``/dev`` lives (``/`` for a host driver, the driver
    container's root otherwise); optional control devices are looked up there. ``unlabelled``:
    who serves a node without the ``gpuchain.io/gpu.allocator`` label (``kube.allocator``): the
    device plugin (the driver then publishes nothing there), or this driver where no device plugin
    is deployed. ``device_taints``: publish unhealthy devices with a taint (``dra.taints``) instead of
    leaving them out, where the cluster serves ``Device.taints``. ``partitionable_mig``: publish
    MIG-capable GPUs as partitionable devices (``dra.partitions``: the full GPU and every MIG
    placement, sharing counters; MIG devices created on Prepare) where the cluster serves
    ``sharedCounters`` (the ``DRAPartitionableDevices`` gate); the driver then owns those GPUs' MIG
    layout, and the MIG manager keeps off them (``kube.mig_owner``). ``gpu_shares``: publish whole GPUs for
    several claims to share, each with the memory and SMs it asks for (``dra.shares``), where the
    cluster serves consumable capacity (the ``DRAConsumableCapacity`` gate); Prepare gives each
    claim its share as MPS limits. ``mps_root``: with shares, run an MPS control daemon per GPU
    while shares of part of it are prepared, which enforces those limits (``dra.mps``), its
    directories under this host directory (the same path in the plugin's container); None: no
    daemon, the GPU is time-sliced and the limits are a promise.
    """

    node: str
    cdi_dir: Path = DEFAULT_CDI_DIR
    state_dir: Path = DEFAULT_STATE_DIR
    policy: HealthPolicy = field(default_factory=HealthPolicy)
    recovery_quiet_seconds: float = DEFAULT_QUIET_SECONDS
    dev_root: Path = Path("/")
    unlabelled: Allocator = DEVICE_PLUGIN
    device_taints: bool = False
    partitionable_mig: bool = False
    gpu_shares: bool = False
    mps_root: Path | None = None


@dataclass(frozen=True)
class Published:
    """The outcome of one publish: the pool generation now live and whether this call changed it."""

    generation: int
    changed: bool
    devices: tuple[str, ...]


class DraDriver:
    """One node's DRA plugin state: unhealthy devices, the published pool, prepared claims."""

    def __init__(
        self,
        backend: GpuBackend,
        *,
        cluster: Cluster,
        config: DriverConfig,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self._inventory = SeenInventory(backend)
        """The GPUs; while NVML is let go for a GPU reset on the node, the last answer, so the slice
        is republished and other GPUs' claims are prepared as before."""
        self.cluster = cluster
        self.config = config
        self.checkpoint = Checkpoint(config.state_dir / FILE_NAME)
        self._remove_orphan_specs()
        self.health = HealthState(policy=config.policy, quiet_seconds=config.recovery_quiet_seconds)
        self.clock = clock
        self._gpus: tuple[str, ...] = ()
        self._kick = asyncio.Event()
        self._health_loop: asyncio.AbstractEventLoop | None = None
        """The loop ``follow_health`` runs on, which ``_kick`` wakes."""
        self._lock = threading.RLock()
        self._node_seen: Obj | None = None
        """This Node as the last publish read it (or as the last annotation patch left it)."""
        self.withheld: str | None = None
        """Why the node's GPUs are not published now (they belong to the device plugin), or None."""
        self.taints_served = config.device_taints
        """Unhealthy devices are published tainted: asked for, and the API server kept the taints."""
        self.partitions_served = config.partitionable_mig
        """MIG-capable GPUs are partitionable: asked for, and the API server kept the counters."""
        self.shares_served = config.gpu_shares
        """Whole GPUs are shared: asked for, and the API server kept ``allowMultipleAllocations``."""
        self._orphans_due = config.partitionable_mig
        """MIG instances an interrupted Prepare may have left are still to be looked for (``_clean_orphans``)."""
        self.mps = mps.GpuDaemons(config.mps_root, on_health=self._on_mps_health) if config.mps_root else None
        """The MPS control daemons of shared GPUs (``--mps-root``), kept while ``keep_mps`` runs."""
        self._mps_down: frozenset[str] = frozenset()
        """GPUs whose MPS daemon does not answer: unhealthy, their shares refused."""
        self._background: set[asyncio.Task[None]] = set()
        self.metrics = DraMetrics(node=config.node, states=self.device_states)
        """Prepare/unprepare latencies and the devices per state (``dra-plugin --metrics-port``)."""

    @property
    def node(self) -> str:
        return self.config.node

    def _remove_orphan_specs(self) -> None:
        """Remove the claim specs the checkpoint does not hold: a crash between writing a spec and
        recording the claim (or between forgetting a claim and removing its spec) leaves one, and
        the kubelet, which never got a success for that claim, will not unprepare it."""
        for uid, path in cdi.spec_claims(self.config.cdi_dir).items():
            if self.checkpoint.get(uid) is None and remove(path):
                log.info("removed %s: no prepared claim %s in %s", path, uid, self.checkpoint.path)

    @property
    def unhealthy(self) -> frozenset[str]:
        """GPU and MIG UUIDs withdrawn for health (a GPU whose MPS daemon does not answer too)."""
        return self.health.unhealthy() | self._mps_down

    def _taint_of(self, gpu_uuid: str, mig_uuid: str | None) -> Obj | None:
        """A device's taint: its health's, else ``mps-daemon-down`` while its GPU's daemon is down."""
        taint = health_taint(self.health, gpu_uuid=gpu_uuid, mig_uuid=mig_uuid)
        if taint is None and gpu_uuid in self._mps_down:
            return mps_taint()
        return taint

    # ---- the slice ----------------------------------------------------------------------------

    def desired_slices(self, lives: Mapping[str, Obj], inventory: Inventory | None = None) -> list[Obj]:
        """The ResourceSlices this node should publish now (``lives``: those live, by name), checked
        against the API's rules: the plain devices' slice, then the partitionable GPUs' counter
        sets and devices (``slices.pool_slices``)."""
        inv = inventory or self._inventory()
        self._gpus = tuple(g.uuid for g in inv.gpus)
        owner = self.cluster.get_or_none(NODE, name=self.node)
        self._node_seen = owner
        withheld = dra_may_publish(owner, self.config.unlabelled)
        if withheld != self.withheld:
            if withheld:
                log.warning("Node %s: publishing no devices: %s", self.node, withheld)
            else:
                log.info("Node %s: its GPUs are this driver's: publishing them", self.node)
            self.withheld = withheld
        taint_of = self._taint_of if self.taints_served else None
        plain = (
            []
            if withheld
            else slices.render_devices(
                inv,
                unhealthy=self.unhealthy,
                taint_of=taint_of,
                partitionable=self.partitions_served,
                shared=self.shares_served,
            )
        )
        parts = (
            []
            if withheld or not self.partitions_served
            else slices.render_gpu_slices(inv, unhealthy=self.unhealthy, taint_of=taint_of)
        )
        out = slices.pool_slices(self.node, plain=plain, parts=parts, owner=owner)
        generation = slices.pool_generation(lives, out)
        for obj in out:
            obj["spec"]["pool"]["generation"] = generation
            slices.check_slice(obj)
        return out

    def publish(self) -> Published:
        """Bring the live ResourceSlices to the current devices; a new generation only on change.
        The GPUs whose MIG layout the driver owns are announced on the Node before any is published
        (``kube.mig_owner``), and the announcement is brought to what was published after."""
        with self._lock:
            lives = self._live_slices()
            desired = self.desired_slices(lives)
            self._announce_mig_gpus()
            self._clean_orphans()
            try:
                written, changed = publishing.write(self.cluster, desired=desired, lives=lives)
            except InvalidError as exc:
                if not any(obj["spec"].get("sharedCounters") for obj in desired):
                    raise
                self._partitions_refused(exc)
                lives = self._live_slices()
                desired = self.desired_slices(lives)
                written, changed = publishing.write(self.cluster, desired=desired, lives=lives)
            if self._dropped(desired, written):
                desired = self.desired_slices(written)
                written, again = publishing.write(self.cluster, desired=desired, lives=written)
                changed |= again
            self._announce_mig_gpus()
            devices = tuple(str(d["name"]) for obj in desired for d in slices.devices_of(obj))
            return Published(int(desired[0]["spec"]["pool"]["generation"]), changed, devices)

    def _mig_gpus(self) -> frozenset[int]:
        """The GPUs whose MIG layout this driver owns now: those published as partitionable
        devices, and those holding a MIG device it created for a prepared claim."""
        made = {d.created.gpu_index for c in self.checkpoint.claims() for d in c.devices if d.created is not None}
        if self.withheld or not self.partitions_served:
            return frozenset(made)
        return frozenset(made | {g.index for g in self._inventory().gpus if partitions.partitionable(g)})

    def _announce_mig_gpus(self) -> None:
        """Bring the Node annotation naming the GPUs whose MIG layout this driver owns to them
        (``publishing.announce_mig_gpus``); no Node, no announcement."""
        if self._node_seen is not None:
            self._node_seen = publishing.announce_mig_gpus(self.cluster, node=self._node_seen, wanted=self._mig_gpus())

    def _live_slices(self) -> dict[str, Obj]:
        return publishing.live_slices(self.cluster, node=self.node, partitionable=self.config.partitionable_mig)

    def _partitions_refused(self, exc: InvalidError) -> None:
        """The API server refused the partitionable GPUs' slices: Kubernetes 1.34 wants each counter
        set in the slice of the devices consuming it, the layout 1.35 and later refuse and this
        driver does not write (``dra.partitions``). The GPUs are published without partitions rather
        than not at all."""
        log.error(
            "the API server refused the partitionable GPUs' ResourceSlices (%s); Kubernetes before 1.35 wants "
            "counter sets in the slice of the devices that consume them, and this plugin writes the layout of "
            "1.35 and later: publishing MIG-capable GPUs without partitions",
            exc,
        )
        self.partitions_served = False

    def _dropped(self, desired: list[Obj], written: Mapping[str, Obj]) -> bool:
        """Whether the API server dropped a feature just written, for want of its gate; each dropped
        one is published without from here on (``publishing``)."""
        taints = publishing.taints_dropped(desired, written, node=self.node)
        counters = publishing.counters_dropped(desired, written)
        shared = publishing.shares_dropped(desired, written, node=self.node)
        self.taints_served &= not taints
        self.partitions_served &= not counters
        self.shares_served &= not shared
        return taints or counters or shared

    def node_changed(self, node: Obj) -> Published | None:
        """This Node as just read (its labels, its capacity): republish when whether its GPUs are
        this driver's changed, so a node handed over either way is served at once."""
        with self._lock:
            reason = dra_may_publish(node, self.config.unlabelled)
            if (reason is None) == (self.withheld is None):
                self.withheld = reason  # the same verdict, perhaps newer words
                return None
            return self.publish()

    def on_event(self, event: HealthEvent) -> Published | None:
        """Apply a health event; republish when it changed the unhealthy set (else None).

        A recovery waits out the quiet period first: ``finish_recoveries`` publishes it then.
        """
        with self._lock:
            return self._republish_if(lambda: self.health.apply(event, self.clock()))

    def mps_health(self) -> Published | None:
        """A shared GPU's MPS daemon answers again (or stopped answering): the GPUs whose daemon is
        down now (``GpuDaemons.down``) are withdrawn or tainted, like any unhealthy GPU, the others
        published again; republish on change. The state is read, not the report applied: reports
        are applied on worker threads, in any order."""
        if self.mps is None:
            return None
        with self._lock:

            def change() -> bool:
                assert self.mps is not None
                self._mps_down = self.mps.down
                return True

            return self._republish_if(change)

    def _on_mps_health(self, gpu_uuid: str, up: bool) -> None:
        """``mps_health`` off the loop (the daemons call this on it); a failed publish is logged, the
        next resync publishes the state."""
        if up:
            log.info("GPU %s: its MPS control daemon answers; its shares are served", gpu_uuid)
        else:
            log.error("GPU %s: its MPS control daemon does not answer; its shares are withdrawn", gpu_uuid)

        async def run() -> None:
            try:
                await asyncio.to_thread(self.mps_health)
            except (KubeError, GpuError, OSError) as exc:
                log.error("MPS daemon of GPU %s: slice not republished yet: %s", gpu_uuid, exc)

        task = asyncio.get_running_loop().create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def keep_mps(self) -> None:
        """Keep the MPS daemons of the shares the checkpoint holds, until cancelled (``dra.mps``);
        returns at once without ``--mps-root``."""
        if self.mps is None:
            return
        wanted = await asyncio.to_thread(self._mps_wanted)
        await self.mps.run(wanted)

    def _mps_wanted(self, more: Iterable[tuple[str, shares.Share | None]] = ()) -> dict[str, int]:
        """The GPUs (UUID -> index) whose daemon the prepared claims (and the shares ``more``) need."""
        held = [(d.uuid, d.share) for claim in self.checkpoint.claims() for d in claim.devices]
        return mps.wanted(self._inventory().gpus, [*held, *more])

    def _mps_client(self, where: str, devices: Iterable[tuple[str, shares.Share | None]]) -> str | None:
        """The GPU whose daemon a claim's container talks to (``mps.client_gpu``); None without ``--mps-root``."""
        if self.mps is None:
            return None
        return mps.client_gpu(where, held=devices, gpus=self._inventory().gpus)

    def _mps_edits(self, gpu_uuid: str | None) -> cdi.MpsClient | None:
        if self.mps is None or gpu_uuid is None:
            return None
        return mps.client_edits(self.mps.root, gpu_uuid)

    def _mps_start(self, where: str, gpu_uuid: str, held: list[tuple[str, shares.Share | None]]) -> None:
        """Have the GPU's daemon answering before the claim is prepared: started for the first share
        of it (a GPU whose daemon stopped answering was refused before, as unhealthy)."""
        assert self.mps is not None
        try:
            self.mps.want(self._mps_wanted(held))
        except RuntimeError as exc:
            raise PrepareError(f"{where}: {exc}") from exc
        problem = self.mps.wait_up(gpu_uuid)
        if problem is not None:
            self._mps_settle()
            raise PrepareError(f"{where}: GPU {gpu_uuid}: {problem}; nothing was prepared")

    def _mps_settle(self) -> None:
        """Keep the daemons the prepared claims need, and only those (a last share gone, a Prepare
        undone); a failure is logged: the claims are as recorded, the next change settles again."""
        if self.mps is None:
            return
        try:
            self.mps.want(self._mps_wanted())
        except (RuntimeError, GpuError) as exc:
            log.error("MPS control daemons not brought to the prepared shares: %s", exc)

    def set_quarantined(self, gpu_uuids: frozenset[str]) -> Published | None:
        """Withdraw exactly these GPUs (and their MIG devices) for the repair loop; republish on change.
        A GPU it gives back was repaired, so an XID seen before clears after the quiet period."""
        with self._lock:
            published = self._republish_if(lambda: self.health.quarantine(gpu_uuids, self.clock()))
        self._wake_recoveries()  # a recovery deadline may have started
        return published

    def _wake_recoveries(self) -> None:
        """Wake ``follow_health``'s recovery loop from any thread (the quarantine follower calls
        ``set_quarantined`` on a worker thread; an asyncio event is set on its loop only)."""
        loop = self._health_loop
        if loop is None or loop.is_closed():
            self._kick.set()  # no loop waits on it
        else:
            loop.call_soon_threadsafe(self._kick.set)

    def finish_recoveries(self) -> Published | None:
        """Publish devices whose quiet period has passed (None when none came back)."""
        with self._lock:
            return self._republish_if(lambda: bool(self.health.due(self.clock())))

    def stream_failed(self) -> Published | None:
        """The event stream broke: withdraw every GPU until a new subscription has stayed up."""
        with self._lock:
            return self._republish_if(lambda: self.health.fail_all(list(self._gpus)))

    def stream_subscribed(self) -> Published | None:
        """A (new) subscription started: the stream marks go after the quiet period."""
        with self._lock:
            now = self.clock()
            return self._republish_if(lambda: self.health.stream_restored(now) and bool(self.health.due(now)))

    def _republish_if(self, change: Callable[[], bool]) -> Published | None:
        before = self._health_marks()
        change()
        if self._health_marks() == before:
            return None
        return self.publish()

    def _health_marks(self) -> object:
        """What the slice shows of health: the unhealthy devices, and with taints also why (a GPU
        already unhealthy that the repair loop takes changes its taint, not the set)."""
        if not self.taints_served:
            return self.unhealthy
        h = self.health
        return (self.unhealthy, h.quarantined, tuple(sorted(h.bad_gpus.items())), tuple(sorted(h.bad_migs.items())))

    async def follow_health(self) -> None:
        """Consume the backend's health events forever, republishing on each change.

        A broken stream withdraws every GPU and is subscribed again with a bounded backoff; the
        GPUs come back once the new subscription has run for the quiet period. A failed publish
        is logged, not raised: the unhealthy set is already updated and the next resync publishes
        it, while the plugin keeps serving prepared claims.
        """

        def step(
            name: str, call: Callable[[], Published | None], moves_deadlines: bool = True
        ) -> Callable[[], Awaitable[None]]:
            """Run ``call`` off the loop; wake the recovery loop only if the call may have moved a deadline.

            The recovery step itself never wakes it: it only clears deadlines that are due, and
            waking the loop after its own step would run it again at once, forever (a busy loop).
            """

            async def run() -> None:
                try:
                    await asyncio.to_thread(call)
                except (KubeError, GpuError, OSError) as exc:
                    log.error("%s: slice not republished yet: %s", name, exc)
                if moves_deadlines:
                    self._kick.set()  # set here, on the loop's thread

            return run

        self._health_loop = asyncio.get_running_loop()

        async def on_event(event: HealthEvent) -> None:
            await step(f"health event {event.kind} on {event.gpu_uuid}", lambda: self.on_event(event))()

        async def on_failure(exc: Exception) -> None:
            await step("event stream failure", self.stream_failed)()

        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(
                follow_events(
                    self.backend.events,
                    on_event=on_event,
                    on_failure=on_failure,
                    on_subscribe=step("resubscription", self.stream_subscribed),
                )
            )
            tasks.create_task(
                run_recoveries(
                    self.health.next_deadline,
                    kick=self._kick,
                    finish=step("recovery", self.finish_recoveries, moves_deadlines=False),
                    clock=self.clock,
                )
            )

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
        with self._timed("prepare"):
            return self._prepare(ref)

    def _prepare(self, ref: ClaimRef) -> PreparedClaim:
        with self._lock:
            done = self.checkpoint.get(ref.uid)
            if done is not None:
                self._ensure_spec(done)
                return done
            claim, results = self._allocated(ref)
            known = self._devices_by_name()
            devices: list[cdi.CdiDevice] = []
            created: list[CreatedInstance | None] = []
            where = f"claim {ref.namespace}/{ref.name}"
            for result in results:
                name = str(result.get("device", ""))
                if name not in known:
                    raise PrepareError(f"claim {ref.namespace}/{ref.name}: device {name!r} is not on node {self.node}")
                device, healthy = known[name]
                if self.withheld:
                    raise PrepareError(f"claim {ref.namespace}/{ref.name}: device {name!r}: {self.withheld}")
                if not healthy and device.uuid in self._mps_down:
                    raise PrepareError(
                        f"claim {ref.namespace}/{ref.name}: device {name!r}: the MPS control daemon of its GPU does "
                        "not answer (the plugin starts it again); its shares are withdrawn until it does"
                    )
                if not healthy:
                    raise PrepareError(
                        f"claim {ref.namespace}/{ref.name}: device {name!r} ({device.uuid}) is unhealthy and "
                        "withdrawn from the slice; delete the claim so the scheduler allocates another device"
                    )
                devices.append(consumers.with_share(device, result=result, gpus=self._inventory().gpus, where=where))
            held = [(d.uuid, d.share) for d in devices]
            client = self._mps_client(where, held)
            if client is not None:
                consumers.refuse_other_gpus(
                    self.cluster,
                    where=where,
                    claim=claim,
                    gpu_uuid=client,
                    node=self.node,
                    known=known,
                    gpus=self._inventory().gpus,
                )
                self._mps_start(where, client, held)
            try:
                for i, device in enumerate(devices):
                    devices[i], instance = self._make_ready(ref, device)
                    created.append(instance)
                cdi_ids = cdi.write_spec(
                    self.config.cdi_dir,
                    claim_uid=ref.uid,
                    devices=devices,
                    dev_root=self.config.dev_root,
                    mps=self._mps_edits(client),
                )
            except BaseException:
                # nothing prepared: no MIG device either
                instances.destroy(self.backend, (c for c in created if c is not None))
                self._mps_settle()
                raise
            prepared = PreparedClaim(
                uid=ref.uid,
                namespace=ref.namespace,
                name=ref.name,
                devices=tuple(
                    PreparedDevice(
                        requests=(str(r.get("request", "")),),
                        pool=self.node,
                        device=d.name,
                        cdi_ids=(cid,),
                        uuid=d.uuid,
                        device_node=d.device_node,
                        created=made,
                        share=d.share,
                    )
                    for r, d, cid, made in zip(results, devices, cdi_ids, created, strict=True)
                ),
            )
            try:
                self.checkpoint.add(prepared)
            except OSError as exc:
                cdi.remove_spec(self.config.cdi_dir, ref.uid)  # nothing prepared: no spec either
                instances.destroy(self.backend, (c for c in created if c is not None))
                self._mps_settle()
                raise PrepareError(
                    f"claim {ref.namespace}/{ref.name}: cannot record it in {self.checkpoint.path} ({exc}); "
                    "nothing was prepared"
                ) from exc
            return prepared

    def _make_ready(self, ref: ClaimRef, device: cdi.CdiDevice) -> tuple[cdi.CdiDevice, CreatedInstance | None]:
        """Put a partitionable GPU in the MIG mode ``device`` needs and create its MIG device
        (``instances.make_ready``); a device of no partitionable GPU is handed out as it is."""
        gpus = self._inventory().gpus if self.partitions_served else ()
        part = instances.placements(gpus).get(device.name)
        gpu = part.gpu if part is not None else instances.partitionable_gpu(gpus, device.name)
        if gpu is None:
            return device, None
        return instances.make_ready(
            self.backend,
            cluster=self.cluster,
            node=self.node,
            claim=f"claim {ref.namespace}/{ref.name}",
            device=device,
            part=part,
            gpu=gpu,
        )

    def _clean_orphans(self) -> None:
        """Destroy the MIG instances an interrupted Prepare left (``instances.destroy_orphans``) at
        the first publish that may: once the GPUs are announced as this driver's (never on a node
        whose GPUs are the device plugin's, where the MIG layout is the MIG manager's) and while no
        MIG change is under way (``kube.mig_owner``); a later publish (the resync) tries again."""
        if not self._orphans_due or self.withheld or not self.partitions_served:
            return
        if mig_change_pending(self._node_seen):
            log.info(
                "Node %s: a MIG change is under way; MIG instances left by a Prepare are destroyed later", self.node
            )
            return
        instances.destroy_orphans(self.backend, gpus=self._inventory().gpus, prepared=self.checkpoint.claims())
        self._orphans_due = False

    def _ensure_spec(self, claim: PreparedClaim) -> None:
        """Rewrite a prepared claim's CDI spec if it is gone (a reboot empties /var/run/cdi)."""
        if not cdi.spec_path(self.config.cdi_dir, claim.uid).exists():
            devices = [
                cdi.CdiDevice(name=d.device, uuid=d.uuid, device_node=d.device_node, share=d.share)
                for d in claim.devices
            ]
            client = self._mps_client(f"claim {claim.namespace}/{claim.name}", ((d.uuid, d.share) for d in devices))
            cdi.write_spec(
                self.config.cdi_dir,
                claim_uid=claim.uid,
                devices=devices,
                dev_root=self.config.dev_root,
                mps=self._mps_edits(client),
            )

    def unprepare(self, ref: ClaimRef) -> bool:
        """Undo Prepare (idempotent); False when the claim was not prepared. Raises PrepareError,
        the claim still prepared (record and spec as they were), when its removal cannot be recorded
        or its spec cannot be removed."""
        with self._timed("unprepare"):
            return self._unprepare(ref)

    @contextmanager
    def _timed(self, operation: str) -> Iterator[None]:
        """Observe how long ``operation`` took, and whether it raised, in the metrics."""
        start = time.perf_counter()
        ok = False
        try:
            yield
            ok = True
        finally:
            self.metrics.observe(operation, seconds=time.perf_counter() - start, ok=ok)

    def device_states(self) -> dict[str, int]:
        """The node's devices by state (``dra.metrics.STATES``): withheld while the GPUs are not DRA's;
        else unhealthy ones tainted or withdrawn, the others prepared (held by a claim) or available."""
        with self._lock:
            prepared = {d.device for c in self.checkpoint.claims() for d in c.devices}
            states: Counter[str] = Counter()
            for name, (_, healthy) in self._devices_by_name().items():
                if self.withheld:
                    states["withheld"] += 1
                elif not healthy:
                    states["tainted" if self.taints_served else "withdrawn"] += 1
                else:
                    states["prepared" if name in prepared else "available"] += 1
            return dict(states)

    def _unprepare(self, ref: ClaimRef) -> bool:
        where = f"claim {ref.namespace}/{ref.name}"
        with self._lock:
            claim = self.checkpoint.get(ref.uid)
            try:
                instances.destroy(
                    self.backend, (d.created for d in (claim.devices if claim else ()) if d.created is not None)
                )
            except GpuError as exc:
                raise PrepareError(f"{where}: cannot destroy its MIG device ({exc}); it stays prepared") from exc
            try:
                forgotten = self.checkpoint.discard(ref.uid)
            except OSError as exc:
                raise PrepareError(
                    f"{where}: cannot record its removal in {self.checkpoint.path} ({exc}); it stays prepared"
                ) from exc
            try:
                removed = cdi.remove_spec(self.config.cdi_dir, ref.uid)
            except OSError as exc:
                if claim is not None:
                    self.checkpoint.add(claim)  # the spec is still there: so is the claim
                raise PrepareError(f"{where}: cannot remove its CDI spec ({exc}); it stays prepared") from exc
            if claim is not None:
                self._mps_settle()  # its GPU's daemon stops with the last share
            return removed or forgotten

    def _allocated(self, ref: ClaimRef) -> tuple[Obj, list[dict[str, Any]]]:
        """The claim as the API holds it and its results for this driver (``claims.allocated``)."""
        claim = self.cluster.get_or_none(RESOURCE_CLAIM, name=ref.name, namespace=ref.namespace)
        where = f"claim {ref.namespace}/{ref.name}"
        return claims.allocated(claim, where=where, uid=ref.uid, node=self.node)

    def _devices_by_name(self) -> dict[str, tuple[cdi.CdiDevice, bool]]:
        """Every device this node has (published or withdrawn) by DRA name, with its health."""
        gpus = self._inventory().gpus
        return slices.node_devices(gpus, unhealthy=self.unhealthy, partitionable=self.partitions_served)

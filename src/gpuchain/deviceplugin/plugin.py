"""The running device plugin: one endpoint per resource, registration, health, kubelet restarts.

``DevicePlugin`` is the imperative shell around the pure parts. It

- maps the inventory to resources and serves each on ``<socket dir>/nvidia-<name>.sock``;
- registers each endpoint with ``<socket dir>/kubelet.sock`` (API version v1beta1);
- in CDI mode keeps the CDI spec of what it serves in the CDI directory (``deviceplugin.cdi``),
  rewritten with every re-serve;
- watches the socket directory (inotify): when the kubelet restarts it wipes the directory and
  creates a new ``kubelet.sock``; the plugin then re-serves and re-registers at once;
- consumes the backend's health events and pushes a new device list on every change, and
  clears recovered GPUs after the quiet period; a broken event stream marks every device
  unhealthy until a new subscription (retried with a bounded backoff) has run for the quiet period;
- reloads its config on demand (SIGHUP in the CLI) without dropping health state;
- when the config no longer fits the node after a kubelet restart or a GPU change (time-slicing
  ``devices: 8`` with a GPU lost, a half-changed MIG layout under ``single``) it keeps serving what
  still fits (``fit_resources``), logs why and calls ``on_degraded`` (the CLI records a Warning
  Event on the Node); when the node fits again it announces everything once more.

Its loops run under ``gpuchain.common.supervise``: an exception in any of them is logged at once
and the loop restarted with backoff, so the plugin never stops re-registering silently.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from gpuchain.api.config.v1.config import Config
from gpuchain.api.config.v1.replicas import ReplicatedResources
from gpuchain.api.config.v1.sharing import Sharing
from gpuchain.common.dirwatch import DirectoryChanges
from gpuchain.common.files import remove
from gpuchain.common.supervise import cancel_and_wait, reraise_cancel, spawn
from gpuchain.deviceplugin import cdi
from gpuchain.deviceplugin.allocate import CDI_STRATEGIES
from gpuchain.deviceplugin.resources import Resource, ResourceMappingError, map_resources, mig_strategy_problems
from gpuchain.deviceplugin.server import ResourceServer, ResourceServicer
from gpuchain.gpu.backend import GpuBackend, SeenInventory
from gpuchain.gpu.cdi import write as write_spec
from gpuchain.gpu.devnodes import control_device_nodes
from gpuchain.gpu.health import HealthState, follow_events, run_recoveries
from gpuchain.gpu.model import EventKind, Gpu, HealthEvent, Inventory
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2 as pb
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from gpuchain.gpu.mps import MpsControl

MPS_DOWN = "the MPS control daemon does not answer"
log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
DEFAULT_SOCKET_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET = "kubelet.sock"
KUBELET_RESYNC_SECONDS = 10.0
"""How often the socket directory is looked at although no change of it was seen (a safety net)."""


class RegistrationError(RuntimeError):
    """The kubelet refused or did not answer a registration."""


@dataclass(frozen=True, kw_only=True)
class Registered:
    """One successful registration, for logs and the demo transcript."""

    resource: str
    endpoint: str
    devices: int
    at: float


def fit_resources(inventory: Inventory, config: Config) -> tuple[list[Resource], str | None]:
    """The resources ``config`` announces on ``inventory``, and None; or, when it does not fit,
    what still fits and why the rest is not announced.

    What still fits: under ``single``, the largest group of GPUs that share one layout (MIG
    disabled, or MIG enabled with one profile); a sharing entry that replicates ``N`` devices of a
    resource that now has fewer replicates those it has.
    """
    try:
        return map_resources(inventory, config), None
    except ResourceMappingError as exc:
        reason = str(exc)
    fitting = _single_fit(inventory, config)
    return map_resources(fitting, _clamped(fitting, config)), reason


def served_resources(
    inventory: Inventory, *, config: Config, handed_to_dra: bool = False, fit: bool = False
) -> tuple[list[Resource], str | None]:
    """What the plugin serves, and why not all of it (None when it is): while the Node gives its GPUs
    to the DRA driver (``kube.allocator``), its resources with no device, so the kubelet's capacity
    drops to 0 at once (an endpoint that goes away keeps its capacity for the kubelet's grace period,
    and the DRA driver waits for 0); else the config's resources, and with ``fit`` what still fits
    when not all of it does (``fit_resources``; without, ResourceMappingError)."""
    if handed_to_dra:
        return [replace(r, devices=()) for r in fit_resources(inventory, config)[0]], None
    if fit:
        return fit_resources(inventory, config)
    return map_resources(inventory, config), None


def _single_fit(inventory: Inventory, config: Config) -> Inventory:
    if not mig_strategy_problems(inventory, config.flags.mig_strategy):
        return inventory
    groups: dict[str, list[Gpu]] = {}
    for gpu in inventory.gpus:
        profiles = {m.profile for m in gpu.mig_devices}
        if not gpu.mig_enabled:
            groups.setdefault("", []).append(gpu)
        elif len(profiles) == 1:
            groups.setdefault(profiles.pop(), []).append(gpu)
    # the most GPUs; on a tie MIG (the layout being moved to) before whole GPUs
    best = max(groups.items(), key=lambda kv: (len(kv[1]), kv[0] != ""), default=("", []))[1]
    return replace(inventory, gpus=tuple(best))


def _clamped(inventory: Inventory, config: Config) -> Config:
    replication = config.replication
    if replication is None:
        return config
    base = map_resources(inventory, replace(config, sharing=Sharing()))
    have = {r.name: len(r.devices) for r in base}

    def clamp(settings: ReplicatedResources) -> ReplicatedResources:
        entries = []
        for entry in settings.resources:
            if isinstance(entry.devices, int) and entry.devices > have.get(entry.name, 0):
                if have.get(entry.name, 0) == 0:
                    continue
                entry = replace(entry, devices=have[entry.name])
            entries.append(entry)
        return replace(settings, resources=tuple(entries))

    sharing = config.sharing
    update: dict[str, ReplicatedResources] = {}
    if sharing.time_slicing is not None:
        update["time_slicing"] = clamp(sharing.time_slicing)
    if sharing.mps is not None:
        update["mps"] = clamp(sharing.mps)
    return replace(config, sharing=replace(sharing, **update))


class DevicePlugin:
    """All of a node's device plugin endpoints, kept registered with the kubelet."""

    def __init__(
        self,
        backend: GpuBackend,
        *,
        config: Config | None = None,
        socket_dir: str | Path = DEFAULT_SOCKET_DIR,
        env: Mapping[str, str] | None = None,
        watch_interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        pre_start_required: bool = False,
        extra_handlers: Sequence[grpc.GenericRpcHandler[Any, Any]] = (),
        cdi_dir: Path | None = None,
    ) -> None:
        """``extra_handlers`` are served on every endpoint's socket too (the benchmark's bare baseline).
        With ``cdi_dir`` the plugin keeps its CDI spec there while a CDI device list strategy is on
        (``deviceplugin.cdi``); without, it writes none (the kubelet double's runtime needs none)."""
        self.backend = backend
        self._inventory = SeenInventory(backend)
        """What the GPUs are: while NVML is let go for a GPU reset on the node, the last answer (a
        kubelet restart or a reload then re-serves the same devices instead of failing)."""
        self.extra_handlers = tuple(extra_handlers)
        self.cdi_dir = cdi_dir
        self.config = config or Config()
        self.socket_dir = Path(socket_dir)
        self.watch_interval = watch_interval
        self.pre_start_required = pre_start_required
        self._clock = clock
        self.health = HealthState(
            policy=self.config.health.policy(env if env is not None else os.environ),
            quiet_seconds=self.config.health.recovery_quiet_seconds,
        )
        self.env = env
        self.inventory: Inventory | None = None
        self.resources: list[Resource] = []
        self.servers: dict[str, ResourceServer] = {}
        self._served: frozenset[str] = frozenset()
        """The GPUs some served device is on (a recovered GPU not among them is mapped again)."""
        self.registrations: list[Registered] = []
        self.on_event: Callable[[HealthEvent], None] | None = None
        self.on_degraded: Callable[[str], Awaitable[None]] | None = None
        """Called with the reason when the config stopped fitting and only part is served."""
        self.degraded: str | None = None
        """Why only part of the config is served now, or None when all of it is."""
        self._tasks: list[asyncio.Task[None]] = []
        self._kick = asyncio.Event()
        self._registered_with: tuple[int, int] | None = None
        self._unserved = True
        """No endpoint is up (before start, or a re-serve failed): the kubelet watch serves again."""
        self._lock = asyncio.Lock()
        self._mps: dict[str, tuple[tuple[str, ...], asyncio.Task[None]]] = {}
        """Per MPS-shared resource: its announced ids and the task keeping its control daemon."""
        self.mps_health_interval: float | None = None
        """Seconds between two health questions to each running MPS control daemon (None:
        ``gpu.mps.HEALTH_INTERVAL``; the MPS modules load only once a resource is MPS-shared)."""
        self.mps_down: set[str] = set()
        """MPS-shared resources whose control daemon does not answer (their devices are Unhealthy)."""
        self.handed_to_dra = False
        """The Node gives its GPUs to the DRA driver (``kube.allocator``): every endpoint announces no device."""

    # ---- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve every resource, register when the kubelet is there, and start watching.

        Raises ResourceMappingError when the config does not fit the node; serving failures
        surface as OSError. Registration is retried by the watcher, so a kubelet that is not up
        yet is not an error.
        """
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        async with self._lock:
            await self._serve()
            await self._try_register()
        self._tasks = [
            spawn("device plugin: kubelet watch", run=self._watch_kubelet),
            spawn(
                "device plugin: health events",
                run=lambda: follow_events(
                    self.backend.events,
                    on_event=self._on_event,
                    on_failure=self._on_stream_failure,
                    on_subscribe=self._on_subscribe,
                ),
            ),
            spawn(
                "device plugin: recoveries",
                run=lambda: run_recoveries(
                    lambda: self.health.next_deadline(),
                    kick=self._kick,
                    finish=self._finish_recoveries,
                    clock=self._clock,
                ),
            ),
        ]

    async def stop(self) -> None:
        """Stop watching and serving; remove our sockets. Safe to call twice."""
        await cancel_and_wait(*self._tasks)
        self._tasks = []
        async with self._lock:
            await self._unserve()
            await self._stop_mps(set(self._mps))

    async def reload(self, config: Config) -> None:
        """Apply a new config: re-map resources, re-serve and re-register. Health state is kept.

        All or nothing: a config whose health policy or resource mapping is invalid for this node
        raises (ValueError, ResourceMappingError) before anything is torn down, and a re-serve that
        fails puts the running config back, so the node never ends up announcing no GPUs.
        """
        async with self._lock:
            policy = config.health.policy(self.env if self.env is not None else os.environ)
            map_resources(self._inventory(), config)
            old = (self.config, self.health.policy, self.health.quiet_seconds)
            self.config = config
            self.health.policy = policy
            self.health.quiet_seconds = config.health.recovery_quiet_seconds
            await self._unserve()
            try:
                await self._serve()
            except (ResourceMappingError, OSError):
                self.config, self.health.policy, self.health.quiet_seconds = old
                await self._serve()
                raise
            finally:
                await self._try_register()

    @property
    def registered(self) -> bool:
        return self._registered_with is not None

    async def listed(self, timeout: float) -> bool:
        """Registered, wait (at most ``timeout`` s) until the kubelet has had every resource's
        first device list; whether it has. Not registered (no kubelet yet): False at once. What
        shares the process waits for this before loading and starting its own work on the event
        loop that answers the kubelet (``agent.roles.device_plugin``)."""
        if not self.registered:
            return False
        waits = [asyncio.ensure_future(s.servicer.listed.wait()) for s in self.servers.values()]
        if not waits:
            return True
        try:
            _done, pending = await asyncio.wait(waits, timeout=timeout)
        finally:
            for w in waits:
                w.cancel()
        return not pending

    def servicer(self, resource: str) -> ResourceServicer:
        return self.servers[resource].servicer

    # ---- serving and registration ---------------------------------------------------------------

    async def _serve(self, fit: bool = False) -> None:
        """Serve the config's resources; with ``fit``, what still fits when not all of it does
        (otherwise ResourceMappingError)."""
        inventory = self._inventory()
        resources, degraded = served_resources(inventory, config=self.config, handed_to_dra=self.handed_to_dra, fit=fit)
        servers = {}
        try:
            for res in resources:
                servicer = ResourceServicer(
                    res,
                    inventory=inventory,
                    config=self.config,
                    health=self.health,
                    pre_start_required=self.pre_start_required,
                )
                if res.name in self.mps_down:
                    servicer.held = MPS_DOWN
                server = ResourceServer(servicer, socket_dir=self.socket_dir, extra_handlers=self.extra_handlers)
                await server.start()
                servers[res.name] = server
        except BaseException:
            for server in servers.values():
                await server.stop(0)
            raise
        self.inventory, self.resources, self.servers = inventory, resources, servers
        self._keep_cdi_spec()
        await self._keep_mps()
        self._served = frozenset(d.gpu_uuid for r in resources for d in r.devices)
        self._registered_with = None
        self._unserved = False
        if degraded != self.degraded:
            self.degraded = degraded
            if degraded is None:
                log.info("the config fits the node again: serving all of it")
            else:
                served = ", ".join(f"{r.name}={len(r.devices)}" for r in resources) or "nothing"
                log.error("the config no longer fits this node (%s); serving what still fits: %s", degraded, served)
                if self.on_degraded is not None:
                    await self.on_degraded(degraded)

    def _keep_cdi_spec(self) -> None:
        """Write the CDI spec for what is served now, or remove one a CDI config left behind."""
        if self.cdi_dir is None:
            return
        flags = self.config.flags
        path = cdi.spec_path(self.cdi_dir)
        if set(flags.plugin.device_list_strategy) & CDI_STRATEGIES:
            spec = cdi.plugin_spec(
                self.resources,
                strategy=flags.plugin.device_id_strategy,
                control_nodes=control_device_nodes(flags.dev_root),
                dev_root=flags.dev_root,
            )
            write_spec(path, spec)
        elif remove(path):
            log.info("removed the CDI spec %s: no CDI device list strategy any more", path)

    async def _keep_mps(self) -> None:
        """With ``flags.mpsRoot`` set, keep one MPS control daemon per MPS-shared resource served
        now (NVIDIA's plugin requires the root for MPS; without it the replicas are announced and
        no daemon runs); stop those of resources no longer served the same way."""
        root = self.config.flags.mps_root
        wanted = {r.name: r for r in self.resources if r.sharing == "mps" and r.devices} if root else {}
        stale = {
            name
            for name, (ids, _) in self._mps.items()
            if name not in wanted or ids != tuple(d.id for d in wanted[name].devices)
        }
        await self._stop_mps(stale)
        if root is None or self.inventory is None:
            return
        from gpuchain.deviceplugin.mps import daemon_commands
        from gpuchain.gpu.mps import MpsControl, MpsRoot

        memory = {g.uuid: g.memory_mib for g in self.inventory.gpus}
        for name, res in wanted.items():
            if name in self._mps:
                continue
            control = MpsControl(resource=name, root=MpsRoot(root))
            commands = daemon_commands(res, memory)
            self._mps_health(name, False)
            task = spawn(f"device plugin: MPS control daemon for {name}", run=self._mps_keeper(control, commands, res))
            self._mps[name] = (tuple(d.id for d in res.devices), task)

    def _mps_keeper(self, control: MpsControl, commands: list[str], res: Resource) -> Callable[[], Awaitable[None]]:
        """What the supervisor runs (and runs again should it fail) for one resource's daemon."""
        from gpuchain.gpu.mps import HEALTH_INTERVAL, keep_daemon

        interval = HEALTH_INTERVAL if self.mps_health_interval is None else self.mps_health_interval

        def run() -> Awaitable[None]:
            return keep_daemon(
                control,
                commands=commands,
                gpu_uuids=res.unit_uuids,
                on_health=lambda up: self._mps_health(res.name, up),
                interval=interval,
            )

        return run

    async def _stop_mps(self, names: set[str]) -> None:
        for name in names:
            _, task = self._mps.pop(name)
            await cancel_and_wait(task)
            self.mps_down.discard(name)

    def _mps_health(self, resource: str, up: bool) -> None:
        """The resource's MPS daemon answers (or not): its devices are reported (Un)healthy."""
        if up:
            self.mps_down.discard(resource)
        else:
            self.mps_down.add(resource)
        server = self.servers.get(resource)
        if server is not None:
            server.servicer.held = None if up else MPS_DOWN
            server.servicer.notify()

    async def _unserve(self) -> None:
        for server in self.servers.values():
            await server.stop()
        self.servers = {}
        self._registered_with = None
        self._unserved = True

    def _kubelet_identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.socket_dir / KUBELET_SOCKET)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_ctime_ns

    async def _try_register(self) -> bool:
        identity = self._kubelet_identity()
        if identity is None:
            return False
        try:
            await self._register_all()
        except RegistrationError as exc:
            log.warning("%s", exc)
            return False
        self._registered_with = identity
        return True

    async def _register_all(self) -> None:
        target = f"unix://{self.socket_dir / KUBELET_SOCKET}"
        async with grpc.aio.insecure_channel(target) as channel:
            stub = pb_grpc.RegistrationStub(channel)
            for res in self.resources:
                request = pb.RegisterRequest(
                    version=API_VERSION,
                    endpoint=res.endpoint,
                    resource_name=res.name,
                    options=pb.DevicePluginOptions(
                        pre_start_required=self.pre_start_required, get_preferred_allocation_available=True
                    ),
                )
                try:
                    await stub.Register(request, timeout=5)
                except grpc.aio.AioRpcError as exc:
                    reraise_cancel()
                    raise RegistrationError(
                        f"registering {res.name} with the kubelet at {target} failed: {exc.details() or exc.code()}"
                    ) from None
                self.registrations.append(
                    Registered(resource=res.name, endpoint=res.endpoint, devices=len(res.devices), at=self._clock())
                )
                log.info("registered %s (%d devices) as %s", res.name, len(res.devices), res.endpoint)

    async def _watch_kubelet(self) -> None:
        """Re-serve and re-register when kubelet.sock is new, one of our sockets vanished or a
        re-serve failed; what is served is what fits the node now.

        It wakes when an entry of the socket directory changes (inotify, ``DirectoryChanges``),
        and looks every ``KUBELET_RESYNC_SECONDS`` as a safety net; it polls every
        ``watch_interval`` only while it cannot watch the directory or has a retry pending."""
        with DirectoryChanges(self.socket_dir) as changes:
            while True:
                pending = self._unserved or self._registered_with != self._kubelet_identity()
                await changes.wait(self.watch_interval if pending or not changes.watching else KUBELET_RESYNC_SECONDS)
                await self._check_kubelet()

    def _ours_gone(self) -> bool:
        return any(not s.path.exists() for s in self.servers.values())

    def _stale(self) -> bool:
        """A kubelet is there and what it knows of us is not what we serve."""
        identity = self._kubelet_identity()
        return identity is not None and (identity != self._registered_with or self._ours_gone() or self._unserved)

    async def _check_kubelet(self) -> None:
        if not self._stale():
            return
        async with self._lock:
            # Looked at again under the lock: a reload or re-map that held it took our sockets
            # away and has served and registered since; seen from before, its own un-serve read
            # as a vanished socket, and a second re-serve took the endpoint away from the kubelet
            # again (an Allocate then met no socket).
            if not self._stale():
                return
            if self._ours_gone() or self._unserved or self._registered_with is not None:
                if self._unserved:
                    log.info("serving again after a failed re-serve")
                else:
                    log.info("kubelet restarted (new %s): re-serving and re-registering", KUBELET_SOCKET)
                await self._unserve()
                await self._serve(fit=True)
            registered = await self._try_register()
        if not registered:  # back off outside the lock: a reload, a remap or stop() need not wait out the pause
            await asyncio.sleep(1.0)

    async def hand_to_dra(self, handed: bool) -> None:
        """Stop serving (the Node's GPUs now belong to the DRA driver) or serve again (they are back).

        Handed over, every endpoint announces an empty list, so the kubelet offers none of the node's GPUs;
        the DRA driver publishes them only once the Node's capacity shows none (``kube.allocator``).
        """
        if handed == self.handed_to_dra:
            return
        self.handed_to_dra = handed
        log.info(
            "the node's GPUs are the DRA driver's now: announcing none"
            if handed
            else "the node's GPUs are the device plugin's again: announcing them"
        )
        try:
            await self._remap()
        except OSError as exc:  # the kubelet watch serves again (``_unserved``)
            log.error("re-serving after the node's GPUs changed hands failed (%s); retrying", exc)

    # ---- health ---------------------------------------------------------------------------------

    def set_quarantined(self, gpu_uuids: frozenset[str]) -> None:
        """Withhold exactly these GPUs (their MIG devices and replicas too) for the repair loop; a
        GPU it gives back was repaired, so an XID seen before clears after the quiet period."""
        if self.health.quarantine(gpu_uuids, self._clock()):
            self._notify()
        self._kick.set()  # a recovery deadline may have started

    async def _on_stream_failure(self, exc: Exception) -> None:
        if self.health.fail_all([g.uuid for g in (self.inventory.gpus if self.inventory else ())]):
            self._notify()

    async def _on_subscribe(self) -> None:
        if self.health.stream_restored(self._clock()) and self.health.due(self._clock()):
            self._notify()
        self._kick.set()  # the stream marks' deadline is new

    async def _on_event(self, event: HealthEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)
        if self.health.apply(event, self._clock()):
            self._notify()
        if event.kind is EventKind.GPU_RECOVERED and (self.degraded is not None or event.gpu_uuid not in self._served):
            # The GPU was lost when the resources were last mapped (a kubelet restart or reload
            # while it was gone), or only part of the config fitted: map again so it is announced.
            try:
                await self._remap()
            except OSError as exc:
                log.error("re-serving after GPU %s came back failed (%s); retrying", event.gpu_uuid, exc)
        self._kick.set()

    async def _remap(self) -> None:
        """Map the running config again and re-serve what fits now (health state kept)."""
        async with self._lock:
            await self._unserve()
            await self._serve(fit=True)
            await self._try_register()

    async def _finish_recoveries(self) -> None:
        if self.health.due(self._clock()):
            self._notify()

    def _notify(self) -> None:
        for server in self.servers.values():
            server.servicer.notify()

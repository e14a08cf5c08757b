"""The running device plugin: one endpoint per resource, registration, health, kubelet restarts.

``DevicePlugin`` is the imperative shell around the pure parts. It

- maps the inventory to resources and serves each on ``<socket dir>/nvidia-<name>.sock``;
- registers each endpoint with ``<socket dir>/kubelet.sock`` (API version v1beta1);
- watches the socket directory: when the kubelet restarts it wipes the directory and creates a
  new ``kubelet.sock``; the plugin then re-serves and re-registers (within one poll interval);
- consumes the backend's health events and pushes a new device list on every change, and
  clears recovered GPUs after the quiet period; a broken event stream marks every device
  unhealthy until a new subscription (retried with a bounded backoff) has run for the quiet period;
- reloads its config on demand (SIGHUP in the CLI) without dropping health state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from gpuchain.deviceplugin.config import Config
from gpuchain.deviceplugin.resources import Resource, ResourceMappingError, map_resources
from gpuchain.deviceplugin.server import ResourceServer, ResourceServicer
from gpuchain.gpu.backend import GpuBackend
from gpuchain.gpu.health import HealthState, follow_events, run_recoveries
from gpuchain.gpu.model import EventKind, HealthEvent, Inventory
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2 as pb
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
DEFAULT_SOCKET_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET = "kubelet.sock"


class RegistrationError(RuntimeError):
    """The kubelet refused or did not answer a registration."""


@dataclass(frozen=True)
class Registered:
    """One successful registration, for logs and the demo transcript."""

    resource: str
    endpoint: str
    devices: int
    at: float


class DevicePlugin:
    """All of a node's device plugin endpoints, kept registered with the kubelet."""

    def __init__(
        self,
        backend: GpuBackend,
        config: Config | None = None,
        socket_dir: str | Path = DEFAULT_SOCKET_DIR,
        env: Mapping[str, str] | None = None,
        watch_interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        pre_start_required: bool = False,
        extra_handlers: Sequence[grpc.GenericRpcHandler[Any, Any]] = (),
    ) -> None:
        """``extra_handlers`` are served on every endpoint's socket too (the benchmark's bare baseline)."""
        self.backend = backend
        self.extra_handlers = tuple(extra_handlers)
        self.config = config or Config()
        self.socket_dir = Path(socket_dir)
        self.watch_interval = watch_interval
        self.pre_start_required = pre_start_required
        self._clock = clock
        self.health = HealthState(
            self.config.health.policy(env if env is not None else os.environ),
            self.config.health.recovery_quiet_seconds,
        )
        self.env = env
        self.inventory: Inventory | None = None
        self.resources: list[Resource] = []
        self.servers: dict[str, ResourceServer] = {}
        self.registrations: list[Registered] = []
        self.on_event: Callable[[HealthEvent], None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._kick = asyncio.Event()
        self._registered_with: tuple[int, int] | None = None
        self._lock = asyncio.Lock()

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
            asyncio.create_task(self._watch_kubelet(), name="dp-watch-kubelet"),
            asyncio.create_task(
                follow_events(self.backend.events, self._on_event, self._on_stream_failure, self._on_subscribe),
                name="dp-health-events",
            ),
            asyncio.create_task(
                run_recoveries(lambda: self.health.next_deadline(), self._kick, self._finish_recoveries, self._clock),
                name="dp-recoveries",
            ),
        ]

    async def stop(self) -> None:
        """Stop watching and serving; remove our sockets. Safe to call twice."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        async with self._lock:
            await self._unserve()

    async def reload(self, config: Config) -> None:
        """Apply a new config: re-map resources, re-serve and re-register. Health state is kept.

        All or nothing: a config whose health policy or resource mapping is invalid for this node
        raises (ValueError, ResourceMappingError) before anything is torn down, and a re-serve that
        fails puts the running config back, so the node never ends up announcing no GPUs.
        """
        async with self._lock:
            policy = config.health.policy(self.env if self.env is not None else os.environ)
            map_resources(self.backend.inventory(), config)
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

    def servicer(self, resource: str) -> ResourceServicer:
        return self.servers[resource].servicer

    # ---- serving and registration ---------------------------------------------------------------

    async def _serve(self) -> None:
        inventory = self.backend.inventory()
        resources = map_resources(inventory, self.config)
        servers = {}
        try:
            for res in resources:
                servicer = ResourceServicer(res, inventory, self.config, self.health, self.pre_start_required)
                server = ResourceServer(servicer, self.socket_dir, self.extra_handlers)
                await server.start()
                servers[res.name] = server
        except BaseException:
            for server in servers.values():
                await server.stop(0)
            raise
        self.inventory, self.resources, self.servers = inventory, resources, servers
        self._registered_with = None

    async def _unserve(self) -> None:
        for server in self.servers.values():
            await server.stop()
        self.servers = {}
        self._registered_with = None

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
                    raise RegistrationError(
                        f"registering {res.name} with the kubelet at {target} failed: {exc.details() or exc.code()}"
                    ) from None
                self.registrations.append(Registered(res.name, res.endpoint, len(res.devices), self._clock()))
                log.info("registered %s (%d devices) as %s", res.name, len(res.devices), res.endpoint)

    async def _watch_kubelet(self) -> None:
        """Re-serve and re-register when kubelet.sock is new or one of our sockets vanished."""
        while True:
            await asyncio.sleep(self.watch_interval)
            identity = self._kubelet_identity()
            if identity is None:
                continue
            ours_gone = any(not s.path.exists() for s in self.servers.values())
            if identity == self._registered_with and not ours_gone:
                continue
            async with self._lock:
                if ours_gone or self._registered_with is not None:
                    log.info("kubelet restarted (new %s): re-serving and re-registering", KUBELET_SOCKET)
                    await self._unserve()
                    await self._serve()
                if not await self._try_register():
                    await asyncio.sleep(1.0)

    # ---- health ---------------------------------------------------------------------------------

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
        if event.kind is EventKind.GPU_RECOVERED and not any(
            d.gpu_uuid == event.gpu_uuid for r in self.resources for d in r.devices
        ):
            # The GPU was lost when the resources were last mapped (a kubelet restart or reload
            # while it was gone): map again so it is announced once more.
            self._tasks.append(asyncio.create_task(self._remap(), name="dp-remap"))
        self._kick.set()

    async def _remap(self) -> None:
        try:
            await self.reload(self.config)
        except (ResourceMappingError, OSError) as exc:
            log.error("re-mapping resources after a GPU came back failed, keeping the old ones: %s", exc)

    async def _finish_recoveries(self) -> None:
        if self.health.due(self._clock()):
            self._notify()

    def _notify(self) -> None:
        for server in self.servers.values():
            server.servicer.notify()

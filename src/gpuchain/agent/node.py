"""What the roles of one process share: ``Node``.

Six separate agents on a GPU node each hold an NVML session with its own event watcher, a watch on
their Node, a pod-resources client and a metrics server. A node agent serving all of them holds one
of each:

- ``backend``: one GPU backend. After ``share(loop)`` its ``events()`` is one subscription fanned
  out to every role (``agent.fanout``): one NVML event set, one watcher thread, one set of probes.
  The object stays the backend itself (its class, its MIG and reset ports), so every role sees the
  same GPUs, and a reset by the repair loop releases the one NVML session the whole process holds:
  reset coordination is in-process, with no release board between roles (``in_process_reset``);
- ``cluster()``: one Kubernetes client, opened on first use; after ``share`` every watch of this
  Node (by field selector ``metadata.name``, as ``kube.follow.node_states`` asks) rides on one
  upstream watch;
- ``pods()``: one pod-resources client, opened on first use;
- ``metrics``: one ``MetricsHub``, served on ``NodeSettings.metrics_port`` by ``serve_metrics``;
- ``reloads``: what SIGHUP reloads (the device plugin's config).

A separate agent (``gpuchain device-plugin``) builds a ``Node`` of its own and never shares: it
has one role, so there is nothing to share with.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gpuchain.agent.fanout import Fanout
from gpuchain.agent.metrics import MetricsHub
from gpuchain.agent.settings import NodeSettings
from gpuchain.gpu.backend import GpuBackend
from gpuchain.kube.kinds import NODE, Kind
from gpuchain.kube.port import Cluster, WatchEvent

if TYPE_CHECKING:
    from gpuchain.exporter.podresources import PodResourcesClient
    from gpuchain.exporter.server import MetricsServer
    from gpuchain.gpu.model import HealthEvent

log = logging.getLogger(__name__)


class RoleError(Exception):
    """A role cannot start as configured (a bad config file, a missing Node name): one line for
    people, no traceback. A separate agent exits with ``code``; the node agent logs it and tries the
    role again later (the config may be fixed), while the other roles keep serving."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def open_gpus(
    kind: str, *, preset: str | None = None, topology: str | None = None, default_preset: str = ""
) -> GpuBackend:
    """The GPU backend ``kind`` names: ``nvml`` (this node's GPUs) or ``sim`` (``topology`` file,
    else ``preset``, else ``default_preset``). Raises ConfigFileError or GpuError with a clear message."""
    if kind == "nvml":
        from gpuchain.gpu.nvml import NvmlBackend

        return NvmlBackend()
    from gpuchain.gpu.sim import SimBackend  # a node with real GPUs never loads the simulator
    from gpuchain.gpu.topology import load_preset, load_topology

    return SimBackend(load_topology(topology) if topology else load_preset(preset or default_preset))


class Node:
    """The node's shared resources for the roles of one process (see the module docstring)."""

    def __init__(
        self,
        backend: GpuBackend,
        *,
        settings: NodeSettings | None = None,
        cluster: Callable[[], Cluster] | None = None,
    ) -> None:
        self.backend = backend
        self.settings = settings or NodeSettings()
        self._open_cluster = cluster
        self._cluster: Cluster | None = None
        self._pods: PodResourcesClient | None = None
        self._fanouts: list[Fanout[Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.metrics = MetricsHub()
        self.server: MetricsServer | None = None
        self._reloads: list[Callable[[str], Awaitable[None]]] = []
        self._reloading: set[asyncio.Task[None]] = set()
        self._early: list[str] = []
        """Reloads asked for before any role could reload (a SIGHUP while starting)."""
        self.in_process_reset = False
        """gpu-health's repair loop runs in this process: a reset releases the one shared backend,
        so no role follows the release board."""

    @property
    def name(self) -> str | None:
        return self.settings.node_name

    @property
    def simulated(self) -> bool:
        return self.backend.name == "sim"

    def name_or_own(self) -> str:
        """This Node's name; without one a simulated node's own name, else this host's name."""
        if self.name:
            return self.name
        if self.simulated:
            from gpuchain.gpu.sim import SimBackend

            if isinstance(self.backend, SimBackend):
                return self.backend.topology.node
        return socket.gethostname()

    def need_name(self, role: str) -> str:
        """This Node's name, or RoleError for a role that cannot run without it."""
        if not self.name:
            raise RoleError(f"{role} needs this Node's name: set NODE_NAME (the downward API's spec.nodeName)")
        return self.name

    # ---- sharing -------------------------------------------------------------------------------

    def share(self, loop: asyncio.AbstractEventLoop) -> None:
        """From now on the roles share one health event subscription and one watch of this Node,
        pumped on ``loop`` (the node agent's): see the module docstring."""
        self._loop = loop
        own = self.backend.events
        events: Fanout[HealthEvent] = Fanout("GPU health events", open=own, loop=loop)
        self._fanouts.append(events)
        # The backend object stays what it is (NvmlBackend, SimBackend): only its subscription is shared.
        setattr(self.backend, "events", events.subscribe)  # noqa: B010
        if self._cluster is not None:
            self._share_node_watch(self._cluster)

    def _share_node_watch(self, cluster: Cluster) -> None:
        if self._loop is None or not self.name:
            return
        selector = f"metadata.name={self.name}"
        own = cluster.watch

        def upstream() -> AsyncIterator[WatchEvent]:
            return own(NODE, field_selector=selector)

        def replay(last: WatchEvent) -> WatchEvent | None:
            """A new reader first sees the Node as last seen, as a fresh watch's ADDED event shows it."""
            return WatchEvent("ADDED", last.object) if last.type != "DELETED" else None

        fan: Fanout[WatchEvent] = Fanout(f"watch on Node {self.name}", open=upstream, loop=self._loop, replay=replay)
        self._fanouts.append(fan)

        def watch(
            kind: Kind,
            namespace: str | None = None,
            label_selector: str | None = None,
            resource_version: str | None = None,
            timeout: float | None = None,
            field_selector: str | None = None,
        ) -> AsyncIterator[WatchEvent]:
            if kind == NODE and field_selector == selector and not namespace and not label_selector:
                return _for(fan.subscribe(), timeout)
            return own(
                kind,
                namespace=namespace,
                label_selector=label_selector,
                resource_version=resource_version,
                timeout=timeout,
                field_selector=field_selector,
            )

        setattr(cluster, "watch", watch)  # noqa: B010

    @property
    def node_watches(self) -> int:
        """Upstream watches of this Node opened so far (one, and one per failure, when shared)."""
        return sum(f.opened for f in self._fanouts if f.name.startswith("watch on Node"))

    @property
    def event_subscriptions(self) -> int:
        """Upstream health event subscriptions opened so far (when shared)."""
        return sum(f.opened for f in self._fanouts if f.name == "GPU health events")

    # ---- what is opened on first use ----------------------------------------------------------

    def cluster(self) -> Cluster:
        """The one Kubernetes client of the process; RoleError when the agent was given none."""
        if self._cluster is None:
            if self._open_cluster is None:
                raise RoleError("no Kubernetes API for this agent")
            self._cluster = self._open_cluster()
            self._share_node_watch(self._cluster)
        return self._cluster

    @property
    def pods_socket(self) -> str:
        """The pod-resources socket the roles use ('' for none): see ``NodeSettings``."""
        socket = self.settings.pod_resources_socket
        if socket is None:
            from gpuchain.exporter.podresources import DEFAULT_SOCKET

            socket = DEFAULT_SOCKET if os.path.exists(DEFAULT_SOCKET) else ""
        return socket

    def pods(self) -> PodResourcesClient | None:
        """The one pod-resources client of the process, or None without a socket."""
        socket = self.pods_socket
        if self._pods is None and socket:
            from gpuchain.exporter.podresources import PodResourcesClient

            self._pods = PodResourcesClient(socket, timeout=self.settings.pod_resources_timeout)
        return self._pods

    def serve_metrics(self) -> MetricsServer | None:
        """Bind and serve the metrics endpoint (``NodeSettings.metrics_port``) on a thread of its
        own; OSError when the port cannot be bound. None without a port."""
        port = self.settings.metrics_port
        if port is None or self.server is not None:
            return self.server
        from gpuchain.exporter.server import MetricsServer

        self.server = MetricsServer(self.metrics, host=self.settings.metrics_address, port=port)
        self.server.start_background()
        return self.server

    # ---- SIGHUP ------------------------------------------------------------------------------

    def reload(self, trigger: str) -> None:
        """Ask every role that can reload to do so now (on the running loop). Asked before any
        role can, the reload is kept and served as soon as one can: a SIGHUP that comes while the
        device plugin registers is served once it runs, never lost."""
        if not self._reloads and trigger not in self._early:  # one reload serves any number asked for
            self._early.append(trigger)
        for reload in list(self._reloads):
            self._start(reload, trigger)

    def add_reload(self, reload: Callable[[str], Awaitable[None]]) -> None:
        """``reload(trigger)`` is called on every ``reload`` from now on (and for one asked before)."""
        self._reloads.append(reload)
        for trigger in self._early:
            self._start(reload, trigger)
        self._early.clear()

    async def remove_reload(self, reload: Callable[[str], Awaitable[None]]) -> None:
        """No more reloads of this role; waits for one in progress."""
        if reload in self._reloads:
            self._reloads.remove(reload)
        await asyncio.gather(*self._reloading, return_exceptions=True)

    def _start(self, reload: Callable[[str], Awaitable[None]], trigger: str) -> None:
        async def one() -> None:
            await reload(trigger)

        task = asyncio.get_running_loop().create_task(one())
        self._reloading.add(task)
        task.add_done_callback(self._reloading.discard)

    async def close(self) -> None:
        """Let go of everything shared: fan-outs, metrics server, clients, and the backend last."""
        for fan in self._fanouts:
            await fan.close()
        if self.server is not None:
            await asyncio.to_thread(self.server.shutdown)
            self.server.server_close()
        if self._pods is not None:
            self._pods.close()
        closing = getattr(self._cluster, "close", None)  # LiveCluster's connection pool; MemoryCluster has none
        if closing is not None:
            closing()
        self.backend.close()


async def _for(stream: AsyncIterator[WatchEvent], timeout: float | None) -> AsyncIterator[WatchEvent]:
    """``stream`` for ``timeout`` seconds at most (None: for ever), as a watch with that timeout ends."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    iterator = aiter(stream)
    try:
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    event = await anext(iterator)
            except (TimeoutError, StopAsyncIteration):
                return
            yield event
    finally:
        closing = getattr(iterator, "aclose", None)
        if closing is not None:
            await closing()

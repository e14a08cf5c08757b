"""A kubelet-side peer that behaves like the real kubelet's device manager, over real unix sockets.

It is the device plugin's test double and the simulator's engine, never used in production:

- serves ``Registration`` on ``<socket dir>/kubelet.sock``; on Register it checks the version,
  dials ``<socket dir>/<endpoint>``, asks GetDevicePluginOptions and keeps a ListAndWatch stream;
- keeps capacity (all announced ids) and allocatable (healthy ids) per resource; when a plugin's
  stream ends its devices turn unhealthy (capacity stays, allocatable drops), as the kubelet does;
- admits pods: for each container and resource, picks from free healthy ids (asking
  GetPreferredAllocation when the plugin offers it), calls Allocate, then PreStartContainer when
  the plugin asked for it, and remembers the assignment (the kubelet's checkpoint);
- restarts: stops serving, wipes the socket directory, serves a new ``kubelet.sock``;
- serves the pod-resources API v1 on its own socket (see ``podresources``).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from gpuchain.common.supervise import cancel_and_wait, reraise_cancel
from gpuchain.kubelet.podresources import serve_pod_resources
from gpuchain.kubelet.state import ContainerAssignment, DeviceInfo, PodAssignment
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2 as pb
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
Ctx = grpc.aio.ServicerContext[Any, Any]

SUPPORTED_VERSIONS = ("v1beta1",)
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"


class AdmissionError(RuntimeError):
    """A pod cannot start: not enough devices, or the plugin refused the allocation."""


@dataclass(kw_only=True)
class PluginEndpoint:
    """One registered plugin: its options, live stream and the devices it last announced."""

    resource: str
    endpoint: str
    options: pb.DevicePluginOptions
    channel: grpc.aio.Channel
    stub: pb_grpc.DevicePluginAsyncStub
    devices: dict[str, DeviceInfo] = field(default_factory=dict)
    stream_task: asyncio.Task[None] | None = None
    connected: bool = True
    updates: int = 0


@dataclass(frozen=True)
class ContainerRequest:
    """A container of a pod and its extended resource limits (``{"nvidia.com/gpu": 1}``)."""

    name: str
    resources: Mapping[str, int]


@dataclass(frozen=True, kw_only=True)
class DeviceUpdate:
    """One ListAndWatch message as the kubelet saw it, with when it arrived."""

    resource: str
    capacity: int
    allocatable: int
    at: float


class KubeletPeer:
    """The kubelet's device manager and pod-resources API, for one node."""

    def __init__(
        self,
        socket_dir: str | Path,
        *,
        pod_resources_socket: str | Path | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.socket_dir = Path(socket_dir)
        self.pod_resources_socket = Path(pod_resources_socket) if pod_resources_socket else None
        self.endpoints: dict[str, PluginEndpoint] = {}
        self.pods: dict[tuple[str, str], PodAssignment] = {}
        self.updates: list[DeviceUpdate] = []
        self.listeners: list[Callable[[DeviceUpdate], None]] = []
        self._clock = clock
        self._server: grpc.aio.Server | None = None
        self._pod_resources: grpc.aio.Server | None = None
        self._changed = asyncio.Condition()

    # ---- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Create the socket directory and serve Registration (and pod-resources, when configured)."""
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket_dir / KUBELET_SOCKET}")
        await server.start()
        self._server = server
        if self.pod_resources_socket is not None:
            self._pod_resources = await serve_pod_resources(self, self.pod_resources_socket)

    async def stop(self) -> None:
        """Stop serving and drop every plugin connection (assignments are kept, like a checkpoint)."""
        if self._server is not None:
            await self._server.stop(0)
            self._server = None
        if self._pod_resources is not None:
            await self._pod_resources.stop(0)
            self._pod_resources = None
        for ep in list(self.endpoints.values()):
            await self._disconnect(ep)

    async def restart(self) -> None:
        """What a kubelet restart does to plugins: sockets wiped, a new kubelet.sock to register with.

        Devices stay in capacity as unhealthy until their plugin registers again.
        """
        await self.stop()
        if self.socket_dir.exists():
            for entry in self.socket_dir.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        await self.start()

    # ---- registration and ListAndWatch ----------------------------------------------------------

    async def register(self, request: pb.RegisterRequest) -> None:
        """Handle a Register call; raises ValueError with the kubelet's reason on a bad request."""
        if request.version not in SUPPORTED_VERSIONS:
            raise ValueError(
                f"unsupported device plugin API version {request.version!r}; supported: {', '.join(SUPPORTED_VERSIONS)}"
            )
        if "/" not in request.resource_name:
            raise ValueError(f"invalid resource name {request.resource_name!r}: an extended resource needs a domain")
        path = self.socket_dir / request.endpoint
        if not path.exists():
            raise ValueError(f"endpoint {request.endpoint!r} does not exist in {self.socket_dir}")
        old = self.endpoints.get(request.resource_name)
        if old is not None:
            await self._disconnect(old)
        channel = grpc.aio.insecure_channel(f"unix://{path}")
        stub = pb_grpc.DevicePluginStub(channel)
        options = await stub.GetDevicePluginOptions(pb.Empty(), timeout=5)
        ep = PluginEndpoint(
            resource=request.resource_name, endpoint=request.endpoint, options=options, channel=channel, stub=stub
        )
        if old is not None:
            ep.devices = {i: DeviceInfo(i, False, d.numa_nodes) for i, d in old.devices.items()}
        self.endpoints[request.resource_name] = ep
        ep.stream_task = asyncio.create_task(self._list_and_watch(ep), name=f"kubelet-law-{request.resource_name}")

    async def _list_and_watch(self, ep: PluginEndpoint) -> None:
        try:
            async for response in ep.stub.ListAndWatch(pb.Empty()):
                ep.devices = {
                    d.ID: DeviceInfo(d.ID, d.health == HEALTHY, tuple(n.ID for n in d.topology.nodes))
                    for d in response.devices
                }
                ep.updates += 1
                await self._publish(ep)
        except grpc.aio.AioRpcError as exc:
            reraise_cancel()
            log.info("ListAndWatch for %s ended: %s", ep.resource, exc.code())
        ep.connected = False
        for d in ep.devices.values():
            d.healthy = False
        await self._publish(ep)

    async def _publish(self, ep: PluginEndpoint) -> None:
        update = DeviceUpdate(
            resource=ep.resource,
            capacity=len(ep.devices),
            allocatable=sum(d.healthy for d in ep.devices.values()),
            at=self._clock(),
        )
        self.updates.append(update)
        for listener in list(self.listeners):
            listener(update)
        async with self._changed:
            self._changed.notify_all()

    async def _disconnect(self, ep: PluginEndpoint) -> None:
        if ep.stream_task is not None:
            await cancel_and_wait(ep.stream_task)
        await ep.channel.close(None)
        ep.connected = False
        for d in ep.devices.values():
            d.healthy = False

    # ---- what the node reports ------------------------------------------------------------------

    def capacity(self) -> dict[str, int]:
        """Every announced id per resource (node.status.capacity)."""
        return {name: len(ep.devices) for name, ep in sorted(self.endpoints.items())}

    def allocatable(self) -> dict[str, int]:
        """Healthy ids per resource (node.status.allocatable)."""
        return {name: sum(d.healthy for d in ep.devices.values()) for name, ep in sorted(self.endpoints.items())}

    def allocated_ids(self, resource: str) -> set[str]:
        return {i for pod in self.pods.values() for c in pod.containers for i in c.devices.get(resource, ())}

    def free_ids(self, resource: str) -> list[str]:
        """Healthy ids of ``resource`` not assigned to any pod, in announcement order."""
        ep = self.endpoints.get(resource)
        if ep is None:
            return []
        used = self.allocated_ids(resource)
        return [i for i, d in ep.devices.items() if d.healthy and i not in used]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0) -> None:
        """Wait until ``predicate()`` holds after some device update; TimeoutError otherwise.

        The default is what a loaded 2-core CI machine may take to re-serve, register and list
        (a timeout only says how long to wait before calling it a failure, never how fast)."""
        async with self._changed, asyncio.timeout(timeout):  # not wait_for, which can swallow a cancel
            await self._changed.wait_for(predicate)

    # ---- admission ------------------------------------------------------------------------------

    async def admit(self, namespace: str, *, name: str, containers: Sequence[ContainerRequest]) -> PodAssignment:
        """Admit a pod: allocate every container's devices or none (raises AdmissionError)."""
        key = (namespace, name)
        if key in self.pods:
            raise AdmissionError(f"pod {namespace}/{name} is already running on this node")
        taken: dict[str, set[str]] = {}
        assigned: list[ContainerAssignment] = []
        for container in containers:
            devices: dict[str, tuple[str, ...]] = {}
            merged = pb.ContainerAllocateResponse()
            for resource, count in sorted(container.resources.items()):
                if count <= 0:
                    continue
                ids = await self._pick(resource, count, taken.setdefault(resource, set()), namespace, name)
                response = await self._allocate(resource, ids)
                merged.MergeFrom(response)
                devices[resource] = tuple(ids)
                taken[resource].update(ids)
            assigned.append(
                ContainerAssignment(
                    name=container.name,
                    devices=devices,
                    envs=dict(merged.envs),
                    mounts=tuple(merged.mounts),
                    device_specs=tuple(merged.devices),
                    annotations=dict(merged.annotations),
                    cdi_devices=tuple(d.name for d in merged.cdi_devices),
                )
            )
        pod = PodAssignment(namespace, name, tuple(assigned))
        self.pods[key] = pod
        return pod

    def remove_pod(self, namespace: str, name: str) -> None:
        """The pod ended: its devices are free again."""
        self.pods.pop((namespace, name), None)

    async def _pick(self, resource: str, count: int, taken: set[str], namespace: str, name: str) -> list[str]:
        ep = self.endpoints.get(resource)
        free = [i for i in self.free_ids(resource) if i not in taken]
        if ep is None or not ep.connected or len(free) < count:
            raise AdmissionError(
                f"pod {namespace}/{name}: Insufficient {resource} (requested {count}, {len(free)} free and healthy)"
            )
        if not ep.options.get_preferred_allocation_available:
            return free[:count]
        request = pb.PreferredAllocationRequest(
            container_requests=[pb.ContainerPreferredAllocationRequest(available_deviceIDs=free, allocation_size=count)]
        )
        try:
            response = await ep.stub.GetPreferredAllocation(request, timeout=5)
        except grpc.aio.AioRpcError as exc:
            reraise_cancel()
            log.warning("GetPreferredAllocation for %s failed (%s); using the first free ids", resource, exc.details())
            return free[:count]
        preferred = list(response.container_responses[0].deviceIDs) if response.container_responses else []
        if len(preferred) != count or not set(preferred) <= set(free):
            return free[:count]
        return preferred

    async def _allocate(self, resource: str, ids: list[str]) -> pb.ContainerAllocateResponse:
        ep = self.endpoints[resource]
        try:
            response = await ep.stub.Allocate(
                pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)]), timeout=5
            )
            if ep.options.pre_start_required:
                await ep.stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=ids), timeout=5)
        except grpc.aio.AioRpcError as exc:
            reraise_cancel()
            raise AdmissionError(f"{resource}: plugin refused allocation of {ids}: {exc.details()}") from None
        if len(response.container_responses) != 1:
            raise AdmissionError(f"{resource}: plugin answered {len(response.container_responses)} containers for 1")
        return response.container_responses[0]

    async def allocate_raw(self, resource: str, ids: Sequence[str]) -> pb.AllocateResponse:
        """Call Allocate with exactly ``ids`` (for tests of the plugin's checks); gRPC errors propagate."""
        ep = self.endpoints[resource]
        return await ep.stub.Allocate(
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=list(ids))]), timeout=5
        )


class _Registration(pb_grpc.RegistrationServicer):
    def __init__(self, peer: KubeletPeer) -> None:
        self.peer = peer

    async def Register(self, request: pb.RegisterRequest, context: Ctx) -> pb.Empty:
        try:
            await self.peer.register(request)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except grpc.aio.AioRpcError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot reach the plugin at {request.endpoint}: {exc}")
        return pb.Empty()

"""One resource's gRPC endpoint: the DevicePlugin service on ``<socket dir>/nvidia-<name>.sock``.

The servicer only translates: decisions come from ``allocate``, ``preferred`` and ``health``.
ListAndWatch sends the full list on connect and again whenever ``notify()`` says health changed,
joined from bytes serialized once per resource (``Frames``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from gpuchain.api.config.v1.config import Config
from gpuchain.deviceplugin.allocate import AllocationError, ContainerAllocation, allocate_container
from gpuchain.deviceplugin.preferred import PreferenceError, preferred_allocation
from gpuchain.deviceplugin.resources import Resource
from gpuchain.gpu.health import HealthState
from gpuchain.gpu.model import Inventory
from gpuchain.proto.deviceplugin.v1beta1 import api_pb2 as pb

log = logging.getLogger(__name__)
Ctx = grpc.aio.ServicerContext[Any, Any]

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


@dataclass(frozen=True)
class Frames:
    """A resource's ListAndWatch entries serialized once, in runs of consecutive ids on one unit.

    A unit is a GPU or a MIG device: its replicas are healthy or not together, so each run keeps
    the joined bytes of all its entries twice, healthy and unhealthy. Repeated fields concatenate
    on the wire, so the full list after a health change is the join of one chunk per unit (8 at
    8 x 256 replicas) instead of 2,048 messages built, parsed or serialized per change.
    """

    runs: tuple[tuple[str, str | None, bytes, bytes], ...]
    """(GPU UUID, MIG UUID or None, entries healthy, entries unhealthy) per run, in device order."""


def device_frames(resource: Resource) -> Frames:
    """Every device's ListAndWatch entry, serialized healthy and unhealthy, grouped into runs."""
    runs: list[tuple[str, str | None, list[bytes], list[bytes]]] = []
    for d in resource.devices:
        topology = pb.TopologyInfo(nodes=[pb.NUMANode(ID=d.numa_node)]) if d.numa_node is not None else None
        ok, bad = (
            pb.ListAndWatchResponse(devices=[pb.Device(ID=d.id, health=h, topology=topology)]).SerializeToString()
            for h in (HEALTHY, UNHEALTHY)
        )
        if not runs or runs[-1][:2] != (d.gpu_uuid, d.mig_uuid):
            runs.append((d.gpu_uuid, d.mig_uuid, [], []))
        runs[-1][2].append(ok)
        runs[-1][3].append(bad)
    return Frames(tuple((gpu, mig, b"".join(ok), b"".join(bad)) for gpu, mig, ok, bad in runs))


def device_list_bytes(frames: Frames, health: HealthState) -> bytes:
    """The full ListAndWatch message, serialized: every id with its health and NUMA node."""
    return b"".join(ok if health.healthy(gpu, mig) else bad for gpu, mig, ok, bad in frames.runs)


def _serialized(message: bytes) -> bytes:
    return message


def to_proto(alloc: ContainerAllocation) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=dict(alloc.envs),
        mounts=[
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in alloc.mounts
        ],
        devices=[
            pb.DeviceSpec(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
            for d in alloc.devices
        ],
        annotations=dict(alloc.annotations),
        cdi_devices=[pb.CDIDevice(name=n) for n in alloc.cdi_devices],
    )


class ResourceServicer:
    """The DevicePlugin service for one resource."""

    def __init__(
        self,
        resource: Resource,
        *,
        inventory: Inventory,
        config: Config,
        health: HealthState,
        pre_start_required: bool = False,
    ) -> None:
        self.resource = resource
        self._frames = device_frames(resource)
        self.inventory = inventory
        self.config = config
        self.health = health
        self.pre_start_required = pre_start_required
        self.allocations = 0
        self.prestarts = 0
        self._changed = asyncio.Event()
        self._closed = False
        self.held: str | None = None
        """Why every device of this resource is Unhealthy whatever the GPUs' health (its MPS
        control daemon does not answer), or None."""
        self.on_send: Callable[[pb.ListAndWatchResponse], None] | None = None
        self.listed = asyncio.Event()
        """Set once a ListAndWatch stream has had its first list: the kubelet knows the devices."""

    def notify(self) -> None:
        """Health may have changed: every open ListAndWatch stream re-sends the full list."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def close(self) -> None:
        """End every ListAndWatch stream (the plugin is stopping)."""
        self._closed = True
        self.notify()

    async def GetDevicePluginOptions(self, request: pb.Empty, context: Ctx) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(
            pre_start_required=self.pre_start_required, get_preferred_allocation_available=True
        )

    async def ListAndWatch(self, request: pb.Empty, context: Ctx) -> AsyncIterator[bytes]:
        """The full list, serialized (``ResourceServer`` sends these bytes as they are), on connect
        and after every change."""
        last: bytes | None = None
        while not self._closed:
            changed = self._changed
            current = (
                device_list_bytes(self._frames, self.health)
                if self.held is None
                else b"".join(bad for *_, bad in self._frames.runs)
            )
            if current != last:
                if self.on_send is not None:
                    self.on_send(pb.ListAndWatchResponse.FromString(current))
                yield current
                last = current
                self.listed.set()
            await changed.wait()

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: Ctx
    ) -> pb.PreferredAllocationResponse:
        responses = []
        for req in request.container_requests:
            try:
                ids = preferred_allocation(
                    self.resource,
                    inventory=self.inventory,
                    available=list(req.available_deviceIDs),
                    must_include=list(req.must_include_deviceIDs),
                    size=req.allocation_size,
                    policy=self.config.flags.plugin.shared_devices_allocation_policy,
                )
            except PreferenceError as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return pb.PreferredAllocationResponse(container_responses=responses)

    async def Allocate(self, request: pb.AllocateRequest, context: Ctx) -> pb.AllocateResponse:
        responses = []
        for req in request.container_requests:
            unhealthy = self._unhealthy(req.devices_ids)
            if unhealthy:
                # the kubelet filters these out itself; a plugin that vouched for them would hand a
                # dead GPU to a container if the kubelet's view lagged behind ours
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"{self.resource.name}: refusing unhealthy devices "
                    + "; ".join(f"{i} ({why})" for i, why in unhealthy)
                    + ": ListAndWatch reports them Unhealthy; request other devices",
                )
            try:
                alloc = allocate_container(
                    self.resource,
                    ids=list(req.devices_ids),
                    flags=self.config.flags.plugin,
                    dev_root=self.config.flags.dev_root,
                )
            except AllocationError as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            mps_root = self.config.flags.mps_root
            if self.resource.sharing == "mps" and mps_root:
                from gpuchain.deviceplugin.mps import with_mps  # only MPS-shared resources load it

                alloc = with_mps(alloc, resource=self.resource.name, host_root=mps_root)
            responses.append(to_proto(alloc))
        self.allocations += 1
        return pb.AllocateResponse(container_responses=responses)

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: Ctx
    ) -> pb.PreStartContainerResponse:
        unknown = [i for i in request.devices_ids if self.resource.device(i) is None]
        if unknown:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"unknown device ids {unknown} for {self.resource.name}"
            )
        self.prestarts += 1
        return pb.PreStartContainerResponse()

    def _unhealthy(self, ids: Sequence[str]) -> list[tuple[str, str]]:
        """(id, reason) for each requested id this plugin reports Unhealthy (unknown ids are
        ``allocate_container``'s to refuse)."""
        if self.held is not None:
            return [(device_id, self.held) for device_id in ids]
        out = []
        for device_id in ids:
            d = self.resource.device(device_id)
            if d is not None:
                why = self.health.reason(d.gpu_uuid, d.mig_uuid)
                if why is not None:
                    out.append((device_id, why))
        return out


def device_plugin_handler(servicer: ResourceServicer) -> grpc.GenericRpcHandler[Any, Any]:
    """The v1beta1.DevicePlugin service as the generated ``add_DevicePluginServicer_to_server``
    registers it, except that ListAndWatch's responses are already serialized."""

    def unary(method: Callable[..., Any], request: Any, response: Any) -> grpc.RpcMethodHandler[Any, Any]:
        return grpc.unary_unary_rpc_method_handler(
            method, request_deserializer=request.FromString, response_serializer=response.SerializeToString
        )

    return grpc.method_handlers_generic_handler(
        "v1beta1.DevicePlugin",
        {
            "GetDevicePluginOptions": unary(servicer.GetDevicePluginOptions, pb.Empty, pb.DevicePluginOptions),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                servicer.ListAndWatch, request_deserializer=pb.Empty.FromString, response_serializer=_serialized
            ),
            "GetPreferredAllocation": unary(
                servicer.GetPreferredAllocation, pb.PreferredAllocationRequest, pb.PreferredAllocationResponse
            ),
            "Allocate": unary(servicer.Allocate, pb.AllocateRequest, pb.AllocateResponse),
            "PreStartContainer": unary(
                servicer.PreStartContainer, pb.PreStartContainerRequest, pb.PreStartContainerResponse
            ),
        },
    )


def _unwritable(directory: Path) -> OSError | None:
    """Why no socket can be made in ``directory`` (read-only, full, missing), or None: a probe file
    gets the system's reason before gRPC tries, whose own error names none and logs a line of its own."""
    probe = directory / f".gpuchain-probe-{os.getpid()}"
    try:
        probe.touch()
    except OSError as exc:
        return OSError(exc.errno, exc.strerror, str(directory))
    probe.unlink()
    return None


class ResourceServer:
    """A gRPC server on the resource's unix socket, serving one ResourceServicer."""

    def __init__(
        self,
        servicer: ResourceServicer,
        *,
        socket_dir: Path,
        extra_handlers: Sequence[grpc.GenericRpcHandler[Any, Any]] = (),
    ) -> None:
        self.servicer = servicer
        self.path = socket_dir / servicer.resource.endpoint
        self.extra_handlers = tuple(extra_handlers)
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        """Listen on the socket (a stale file from a previous run is replaced)."""
        problem = _unwritable(self.path.parent)
        if problem is not None:
            raise problem
        if self.path.exists() or self.path.is_symlink():
            self.path.unlink()
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((device_plugin_handler(self.servicer),))
        if self.extra_handlers:
            server.add_generic_rpc_handlers(self.extra_handlers)
        try:
            server.add_insecure_port(f"unix://{self.path}")
        except RuntimeError:  # the probe passed, yet gRPC could not bind (a path too long for a socket)
            raise OSError(None, f"gRPC could not listen on {self.path}", str(self.path)) from None
        await server.start()
        self._server = server

    async def stop(self, grace: float = 0.2) -> None:
        """Close the streams, stop serving and remove the socket file."""
        self.servicer.close()
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

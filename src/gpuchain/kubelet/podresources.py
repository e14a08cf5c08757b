"""The kubelet's pod-resources API v1 (List, GetAllocatableResources, Get) over the peer's state.

Monitoring agents (the exporter) use it to attribute a GPU to the pod holding it; the answers
carry the device ids exactly as the plugin announced them (``<UUID>::<n>`` for replicas).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

from gpuchain.kubelet.state import DeviceManagerState, PodAssignment
from gpuchain.proto.podresources.v1 import api_pb2 as pr
from gpuchain.proto.podresources.v1 import api_pb2_grpc as pr_grpc

Ctx = grpc.aio.ServicerContext[Any, Any]


def _topology(state: DeviceManagerState, resource: str, ids: list[str]) -> pr.TopologyInfo | None:
    ep = state.endpoints.get(resource)
    if ep is None:
        return None
    nodes = sorted({n for i in ids if i in ep.devices for n in ep.devices[i].numa_nodes})
    return pr.TopologyInfo(nodes=[pr.NUMANode(ID=n) for n in nodes]) if nodes else None


def pod_resources(state: DeviceManagerState, pod: PodAssignment) -> pr.PodResources:
    """One pod as List and Get report it."""
    containers = []
    for c in pod.containers:
        devices = [
            pr.ContainerDevices(resource_name=res, device_ids=list(ids), topology=_topology(state, res, list(ids)))
            for res, ids in sorted(c.devices.items())
        ]
        containers.append(pr.ContainerResources(name=c.name, devices=devices))
    return pr.PodResources(name=pod.name, namespace=pod.namespace, containers=containers)


def allocatable_devices(state: DeviceManagerState) -> list[pr.ContainerDevices]:
    """Every healthy device, one entry per id, as GetAllocatableResources reports them."""
    out = []
    for name, ep in sorted(state.endpoints.items()):
        for d in ep.devices.values():
            if d.healthy:
                out.append(
                    pr.ContainerDevices(resource_name=name, device_ids=[d.id], topology=_topology(state, name, [d.id]))
                )
    return out


class PodResourcesServicer(pr_grpc.PodResourcesListerServicer):
    def __init__(self, state: DeviceManagerState) -> None:
        self.state = state

    async def List(self, request: pr.ListPodResourcesRequest, context: Ctx) -> pr.ListPodResourcesResponse:
        pods = [pod_resources(self.state, p) for _, p in sorted(self.state.pods.items())]
        return pr.ListPodResourcesResponse(pod_resources=pods)

    async def GetAllocatableResources(
        self, request: pr.AllocatableResourcesRequest, context: Ctx
    ) -> pr.AllocatableResourcesResponse:
        return pr.AllocatableResourcesResponse(devices=allocatable_devices(self.state))

    async def Get(self, request: pr.GetPodResourcesRequest, context: Ctx) -> pr.GetPodResourcesResponse:
        pod = self.state.pods.get((request.pod_namespace, request.pod_name))
        if pod is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"pod {request.pod_namespace}/{request.pod_name} not found on this node"
            )
        return pr.GetPodResourcesResponse(pod_resources=pod_resources(self.state, pod))


async def serve_pod_resources(state: DeviceManagerState, socket: Path) -> grpc.aio.Server:
    """Serve the API on ``socket`` (its directory is created; a stale socket file is replaced)."""
    socket.parent.mkdir(parents=True, exist_ok=True)
    if socket.exists():
        socket.unlink()
    server = grpc.aio.server()
    pr_grpc.add_PodResourcesListerServicer_to_server(PodResourcesServicer(state), server)
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    return server

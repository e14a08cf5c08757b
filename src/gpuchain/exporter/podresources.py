"""Which pod holds which GPU: a client of the kubelet pod-resources API, and the pure mapping.

The kubelet answers ``List`` with the device ids the device plugin handed out. Those ids come in
every form the plugin can produce: GPU UUIDs, MIG UUIDs, indexes (``3``, ``3:1`` for MIG device
1 on GPU 3) and time-slicing replicas (``<id>::<n>``). Devices a DRA driver prepared for a
container's claims come in the same answer (``dynamic_resources``), named as the driver publishes
them in its ResourceSlice: gpuchain's ``gpu-3`` and ``gpu-3-mig-1g10gb-9-0``. NVIDIA's driver names
a whole GPU ``gpu-<minor>`` too (the index on every node we know of), but its MIG device names
have changed across its releases (``gpu-<minor>-mig-<profile id>-<start>-<size>``, later with the
profile name): those are not mapped, and are left out like an id that names nothing.
``attribute`` reduces them all to the exporter's entities (a whole GPU or a MIG device, by UUID),
so series carry the pod that uses the device however it was handed out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import grpc

from gpuchain.api.config.v1.resources import RESOURCE_PREFIX
from gpuchain.deviceplugin.resources import REPLICA_SEPARATOR
from gpuchain.dra.kinds import DRIVER
from gpuchain.dra.slices import gpu_device_name, mig_device_name
from gpuchain.gpu.model import Inventory
from gpuchain.proto.podresources.v1 import api_pb2, api_pb2_grpc

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DRA_DRIVERS = frozenset({DRIVER, "gpu.nvidia.com"})
"""DRA drivers whose prepared devices are GPUs or MIG devices of this node (gpuchain's, NVIDIA's)."""
MAX_LIST_BYTES = 256 * 1024 * 1024
"""The largest List answer read. gRPC's default of 4 MiB refused a node's answer past about
20,000 pods, and the exporter then kept its old pod map; a kubelet answers for every pod on its
node, so the bound is only against a runaway peer."""


@dataclass(frozen=True, order=True)
class PodRef:
    """One container that holds a device."""

    namespace: str
    pod: str
    container: str


@dataclass(frozen=True)
class Assignment:
    """One device id the kubelet reports for one container."""

    resource: str
    device_id: str
    ref: PodRef


class PodResourcesError(RuntimeError):
    """The kubelet pod-resources socket did not answer; the message says where and why."""


class PodResourcesClient:
    """A blocking client of ``PodResourcesLister.List`` on a unix socket."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = 5.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel = grpc.insecure_channel(
            f"unix://{socket_path}", options=[("grpc.max_receive_message_length", MAX_LIST_BYTES)]
        )
        self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)

    def list(self) -> list[Assignment]:
        """Every device assignment on the node; raises PodResourcesError when the kubelet is unreachable."""
        try:
            response = self._stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            detail = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            raise PodResourcesError(
                f"pod-resources List on {self.socket_path} failed ({code.name if code else 'error'}: {detail}); "
                "is the kubelet running and the socket mounted into the exporter?"
            ) from None
        return assignments(response)

    def close(self) -> None:
        self._channel.close()


def assignments(response: api_pb2.ListPodResourcesResponse) -> list[Assignment]:
    """Flatten a List answer to one row per (container, GPU device id)."""
    rows: list[Assignment] = []
    for pod in response.pod_resources:
        for container in pod.containers:
            ref = PodRef(pod.namespace, pod.name, container.name)
            for devices in container.devices:
                # The device plugin's prefix: nvidia.com/gpu, nvidia.com/mig-*, renamed shares.
                if not devices.resource_name.startswith(RESOURCE_PREFIX):
                    continue
                rows.extend(Assignment(devices.resource_name, d, ref) for d in devices.device_ids)
            for claim in container.dynamic_resources:
                for device in claim.claim_resources:
                    if device.driver_name in DRA_DRIVERS:
                        rows.append(
                            Assignment(f"dra:{claim.claim_namespace}/{claim.claim_name}", device.device_name, ref)
                        )
    return rows


def attribute(rows: Iterable[Assignment], inventory: Inventory) -> dict[str, tuple[PodRef, ...]]:
    """Map each GPU or MIG device UUID to the containers holding it, sorted and without duplicates.

    Ids that name nothing on this node (a device that vanished since allocation) are left out.
    """
    by_key = _id_index(inventory)
    found: dict[str, set[PodRef]] = {}
    for row in rows:
        uuid = by_key.get(_strip_replica(row.device_id))
        if uuid is not None:
            found.setdefault(uuid, set()).add(row.ref)
    return {uuid: tuple(sorted(refs)) for uuid, refs in found.items()}


def _strip_replica(device_id: str) -> str:
    """``GPU-x::3`` -> ``GPU-x``: time-slicing replicas all run on their base device."""
    base, sep, _ = device_id.partition(REPLICA_SEPARATOR)
    return base if sep else device_id


def _id_index(inventory: Inventory) -> Mapping[str, str]:
    index: dict[str, str] = {}
    for gpu in inventory.gpus:
        index[gpu.uuid] = gpu.uuid
        index[str(gpu.index)] = gpu.uuid
        index[gpu_device_name(gpu)] = gpu.uuid
        for mig in gpu.mig_devices:
            index[mig.uuid] = mig.uuid
            index[f"{gpu.index}:{mig.index}"] = mig.uuid
            index[mig_device_name(mig)] = mig.uuid
    return index

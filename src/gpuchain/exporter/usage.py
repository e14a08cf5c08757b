"""Per-pod usage of a GPU from its processes: the pure mapping, no I/O.

Inputs are what the collector read: the processes NVML lists on each GPU or MIG device
(``gpu.processes``), the pod and container each process's cgroup names (``exporter.cgroups``),
the containers holding each device (pod-resources: device plugin ids, replicas included), and,
where the exporter has one, a directory from pod UID to namespace, name and container IDs (the
API server's Pod objects; the simulator's). A process is charged to:

1. the container its cgroup names, when the directory knows the pod UID (whether or not the
   pod was given the device: a pod using a GPU it did not ask for shows as such);
2. else, when its cgroup names *some* pod and a single container holds the device, that one
   (an exclusive GPU needs no directory);
3. else nobody: it is counted on the device as unattributed (a host daemon, the MPS server, a
   pod the exporter cannot name), never dropped and never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuchain.exporter.cgroups import ContainerCgroup
from gpuchain.exporter.podresources import PodRef
from gpuchain.gpu.processes import GpuProcess


@dataclass(frozen=True)
class PodIdentity:
    """A pod as the directory knows it: its name, and container ID -> container name."""

    namespace: str
    name: str
    containers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PodUsage:
    """What one container's processes use on one device. ``sm_percent`` is None where NVML gave
    no SM share for any of them (MIG)."""

    processes: int
    memory_mib: int
    sm_percent: int | None


@dataclass(frozen=True)
class DeviceUsage:
    """Usage on one GPU or MIG device: per container, and what maps to no pod."""

    pods: Mapping[PodRef, PodUsage]
    unattributed_processes: int = 0
    unattributed_memory_mib: int = 0


def pod_directory(pods: Iterable[Mapping[str, Any]]) -> dict[str, PodIdentity]:
    """Pod UID -> identity from Pod objects (the API server's, listed for this node): container IDs
    from ``status.containerStatuses[].containerID`` (``containerd://<id>``, ``cri-o://<id>``), init
    and ephemeral containers included, as any of them can run on a GPU."""
    out: dict[str, PodIdentity] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            continue
        status = pod.get("status") or {}
        containers: dict[str, str] = {}
        for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
            for c in status.get(key) or []:
                _, sep, cid = str(c.get("containerID") or "").partition("://")
                if sep and cid:
                    containers[cid] = c.get("name", "")
        out[uid] = PodIdentity(meta.get("namespace", ""), meta.get("name", ""), containers)
    return out


def attribute_processes(
    processes: Iterable[GpuProcess],
    *,
    holders: Mapping[str, tuple[PodRef, ...]],
    cgroups: Mapping[int, ContainerCgroup | None],
    directory: Mapping[str, PodIdentity],
) -> dict[str, DeviceUsage]:
    """Device UUID -> its usage, for every device with at least one process."""
    charged: dict[str, dict[PodRef, list[GpuProcess]]] = {}
    loose: dict[str, list[GpuProcess]] = {}
    for proc in processes:
        ref = _owner(proc, holders.get(proc.device_uuid, ()), cgroups.get(proc.pid), directory)
        charged.setdefault(proc.device_uuid, {})
        if ref is None:
            loose.setdefault(proc.device_uuid, []).append(proc)
        else:
            charged[proc.device_uuid].setdefault(ref, []).append(proc)
    out: dict[str, DeviceUsage] = {}
    for uuid, per_pod in charged.items():
        rest = loose.get(uuid, [])
        out[uuid] = DeviceUsage(
            {ref: _sum(procs) for ref, procs in sorted(per_pod.items())},
            len(rest),
            sum(p.used_memory_mib or 0 for p in rest),
        )
    return out


def _owner(
    proc: GpuProcess, holders: tuple[PodRef, ...], cgroup: ContainerCgroup | None, directory: Mapping[str, PodIdentity]
) -> PodRef | None:
    if cgroup is None:
        return None
    pod = directory.get(cgroup.pod_uid)
    if pod is not None:
        container = pod.containers.get(cgroup.container_id or "")
        if container is None:
            # The directory has the pod but not this container ID (restarted since): the pod's
            # holder of the device names it, when there is just one.
            mine = [r for r in holders if (r.namespace, r.pod) == (pod.namespace, pod.name)]
            container = mine[0].container if len(mine) == 1 else ""
        return PodRef(pod.namespace, pod.name, container)
    return holders[0] if len(holders) == 1 else None


def _sum(procs: list[GpuProcess]) -> PodUsage:
    shares = [p.sm_percent for p in procs if p.sm_percent is not None]
    return PodUsage(len(procs), sum(p.used_memory_mib or 0 for p in procs), min(100, sum(shares)) if shares else None)

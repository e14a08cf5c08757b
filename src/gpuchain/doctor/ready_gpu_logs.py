"""GPU pods that run ready: one log read per GPU node, because a GPU taken away from a running container shows nowhere
else.

runc's systemd cgroup driver (containerd's ``SystemdCgroup = true``, the default of kubeadm's kubelet since v1.22)
writes each container's device rules into its systemd scope; a later ``systemctl daemon-reload`` makes systemd
rewrite them from the unit's DeviceAllow list, which names devices by their /dev/char/<major>:<minor> path. The
NVIDIA device nodes have no such entry unless something creates it (``nvidia-ctk system create-dev-char-symlinks``,
NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk/system/create-dev-char-symlinks@v1.12.0; the GPU Operator's driver
validation from v22.9.2, NVIDIA/gpu-operator validator/main.go@v22.9.2 ``createDevCharSymlinks``), so the reload
drops them and the running container loses its GPUs (NVIDIA/nvidia-container-toolkit#48). The pod stays Running
and ready -- a process that loops over nvidia-smi or serves requests does not exit -- so neither its status nor
any Event says so: only its log ("Failed to initialize NVML: Unknown Error"). The gather step reads the other GPU
pods' logs only where they are not ready or restarted (`gpuchain.doctor.snapshot`), which misses exactly these; this
module picks one ready container of a running GPU pod on each GPU node, at most ``MAX_READY_LOGS`` nodes, so a
cluster of any size pays a few reads. The read is a probe for that one failure: a log kept only where it says the
GPU was lost, so what else a ready pod prints (other checks read the logs they ask for) changes no finding.

On a node whose GPUs the device plugin shares by time-slicing (`gpuchain.doctor.shared_gpu`), a tenant whose CUDA
allocation fails because a co-tenant holds the card's memory also runs on ready (a server that failed to load its
model keeps answering, with errors), so there every running GPU pod's log is read, for at most
``MAX_SHARED_NODES`` such nodes and ``MAX_TENANTS`` pods each, and kept only where it says CUDA ran out of memory.
"""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.shared_gpu import time_sliced
from gpuchain.doctor.structs import LogKey, Snapshot
from gpuchain.kube.gpu_resources import node_gpu_resources, pod_gpu_requests
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of

#: NVML's words once the container's device rules are gone (catalog.yaml).
NVML_LOST = "nvml.unknown-error-in-workload"
#: The most GPU nodes whose ready GPU pod's log is read (one container each).
MAX_READY_LOGS = 3
#: CUDA's words when an allocation finds too little free device memory (catalog.yaml).
OUT_OF_MEMORY = "cuda.out-of-memory"
#: A codec's words when it cannot load a driver library of a capability the runtime did not inject (catalog.yaml).
CAPABILITY_LIBRARY = ("ffmpeg.cannot-load-library",)
#: The most time-sliced GPU nodes whose tenants' logs are read, and the most tenants read on each.
MAX_SHARED_NODES = 3
MAX_TENANTS = 8


def ready_gpu_samples(pods: list[Obj], nodes: list[Obj], *, skip: tuple[str, ...]) -> list[tuple[LogKey, Obj]]:
    """The first (by namespace, name) running, ready container of a running pod that requests a GPU, on each node
    that announces GPUs, for up to ``MAX_READY_LOGS`` nodes in name order; pods of the namespaces in ``skip`` (the
    stack's own and kube-system, whose operands the gather step reads by other rules) are not users' GPU pods."""
    gpu_nodes = {str(name_of(n)) for n in nodes if any(v > 0 for v in node_gpu_resources(n).values())}
    first: dict[str, tuple[LogKey, Obj]] = {}
    for pod in pods:  # one pass, keeping each node's first pod by (namespace, name): no sort of every pod
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        status = pod.get("status") or {}
        where = str(namespace_of(pod) or "default")
        if node not in gpu_nodes or where in skip or status.get("phase") != "Running":
            continue
        key = (where, str(name_of(pod)))
        if node in first and first[node][0][:2] <= key:
            continue
        if not pod_gpu_requests(pod):
            continue
        ready = [
            cs
            for cs in status.get("containerStatuses") or []
            if (cs.get("state") or {}).get("running") and cs.get("ready")
        ]
        if ready:
            first[node] = ((*key, str(ready[0].get("name"))), ready[0])
    return [first[n] for n in sorted(first)[:MAX_READY_LOGS]]


def shared_gpu_tenants(
    pods: list[Obj], nodes: list[Obj], configs: dict[str, str], *, skip: tuple[str, ...]
) -> list[LogKey]:
    """The first container of each running GPU pod on the first ``MAX_SHARED_NODES`` nodes (by name) whose GPUs are
    time-sliced, ``MAX_TENANTS`` a node by (namespace, name); no pass over the pods where no node is time-sliced.
    ``configs`` is the device plugin's config data (every key of the stack namespace's ConfigMaps)."""
    shared = sorted(
        str(name_of(n))
        for n in nodes
        if any(v > 0 for v in node_gpu_resources(n).values()) and time_sliced(labels_of(n), configs)
    )[:MAX_SHARED_NODES]
    if not shared:
        return []
    tenants: dict[str, list[LogKey]] = {n: [] for n in shared}
    for pod in pods:
        on = tenants.get(str((pod.get("spec") or {}).get("nodeName") or ""))
        where = str(namespace_of(pod) or "default")
        if on is None or where in skip or (pod.get("status") or {}).get("phase") != "Running":
            continue
        containers = (pod.get("spec") or {}).get("containers") or []
        if containers and pod_gpu_requests(pod):
            on.append((where, str(name_of(pod)), str(containers[0].get("name"))))
    return [key for n in shared for key in sorted(tenants[n])[:MAX_TENANTS]]


def ready_gpu_probes(snapshot: Snapshot, namespace: str) -> list[LogKey]:
    """The containers `ready_gpu_samples` picks in ``snapshot``, then the tenants `shared_gpu_tenants` picks, the
    stack's ``namespace`` and kube-system left out."""
    skip = (namespace, "kube-system")
    picked = [key for key, _ in ready_gpu_samples(snapshot.pods, snapshot.nodes, skip=skip)]
    configs = {k: str(v) for cm in snapshot.configmaps for k, v in (cm.get("data") or {}).items()}
    shared = shared_gpu_tenants(snapshot.pods, snapshot.nodes, configs, skip=skip)
    return picked + [key for key in shared if key not in picked]


def lost_gpus_said(text: str) -> bool:
    """Whether a probed log says NVML lost the GPU."""
    return catalog.find(text, NVML_LOST) is not None


def probe_kept(text: str) -> bool:
    """Whether a probed log is kept: it says NVML lost the GPU, CUDA ran out of memory, or a codec could not load a
    driver library the runtime injects only for a capability the container did not ask for (the failures the probe
    reads for; a transcoder that fails a job keeps running ready)."""
    return catalog.find(text, NVML_LOST, OUT_OF_MEMORY, *CAPABILITY_LIBRARY) is not None

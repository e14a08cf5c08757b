"""The simulator's pods run processes: per-pod GPU usage on simulated nodes, as the exporter sees it.

Each placed pod of a workload with ``memoryMib``/``smPercent`` runs one process on each device it
was given (on its base GPU for a time-slicing or MPS replica; flagged MPS on a node whose device
plugin shares through MPS). The process gets a PID, a cgroup naming its pod UID and container ID
(as the kubelet and containerd would, systemd driver), and the pod directory names the pod: the
exporter's own collector then attributes it exactly as on a node, so ``gpuchain top --scenario``
and the tests show the numbers a user would get.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gpuchain.exporter.cgroups import ContainerCgroup
from gpuchain.exporter.collector import GpuMetricsCollector
from gpuchain.exporter.counters import load_collectors
from gpuchain.exporter.podresources import Assignment, PodRef
from gpuchain.exporter.usage import PodIdentity
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import POD
from gpuchain.sim.build import SimCluster
from gpuchain.sim.chain import backend_for, plugin_config

CONTAINER = "main"
"""The container every simulated workload pod runs (``workloads._workload_pod``)."""
MPS_SERVER_MIB = 300
"""Framebuffer the simulated MPS server holds on each GPU it serves (this simulator's figure)."""


@dataclass
class SimNodeUsage:
    """One simulated GPU node: its backend (with the pods' processes running) and an exporter collector over it."""

    node: str
    backend: SimBackend
    collector: GpuMetricsCollector


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def node_usage(sim: SimCluster) -> list[SimNodeUsage]:
    """Per GPU node with placed pods: the processes running and a collected exporter sample."""
    figures = {(w.namespace, w.name): w for w in sim.scenario.workloads}
    by_node: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {}
    for (ns, pod), (node, ids) in sorted(sim.placements.items()):
        by_node.setdefault(node, []).append((ns, pod, ids))
    out: list[SimNodeUsage] = []
    for plan in sim.plans:
        placed = by_node.get(plan.name)
        if not plan.gpu or not placed:
            continue
        group = plan.group
        layout = group.mig.config if group.mig is not None and group.mig.state.value == "success" else None
        backend = backend_for(group.preset, node=plan.name, driver_version=plan.driver_version, mig_layout=layout)
        config = plugin_config(sim.scenario, policy=sim.policy, key=plan.config_key)
        mps = config is not None and config.mps is not None
        rows: list[Assignment] = []
        cgroups: dict[int, ContainerCgroup | None] = {}
        directory: dict[str, PodIdentity] = {}
        pid = 1000
        served: set[str] = set()
        for ns, pod, ids in placed:
            obj = sim.cluster.get_or_none(POD, name=pod, namespace=ns)
            uid = obj["metadata"]["uid"] if obj else _digest(ns, pod)[:32]
            container_id = _digest(uid, CONTAINER)
            directory[uid] = PodIdentity(ns, pod, {container_id: CONTAINER})
            ref = PodRef(ns, pod, CONTAINER)
            workload = figures.get((ns, pod)) or figures.get((ns, pod.rsplit("-", 1)[0]))
            for device_id in ids:
                rows.append(Assignment("nvidia.com/gpu", device_id, ref))
                if workload is None or not (workload.memory_mib or workload.sm_percent):
                    continue
                base = device_id.split("::", 1)[0]
                device: int | str = int(base) if base.isdigit() else base
                if mps and base not in served:
                    # The MPS server NVML lists among the compute processes: a host daemon, in no pod.
                    pid += 1
                    backend.run_process(device, pid=pid, memory_mib=MPS_SERVER_MIB)
                    cgroups[pid] = None
                    served.add(base)
                pid += 1
                backend.run_process(
                    device, pid=pid, memory_mib=workload.memory_mib, sm_percent=workload.sm_percent, mps=mps
                )
                cgroups[pid] = ContainerCgroup(uid, container_id)
        collector = GpuMetricsCollector(
            backend,
            counters=load_collectors(),
            hostname=plan.name,
            pod_lister=rows.copy,
            processes=True,
            cgroup_of=cgroups.get,
            pod_directory=directory.copy,
        )
        collector.collect_once()
        out.append(SimNodeUsage(plan.name, backend, collector))
    return out

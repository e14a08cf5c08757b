"""Which syslog health monitor logs the gather step reads for links/probe_lost.py: NVSentinel's monitor on the nodes
that offer fewer GPUs than their peers (a GPU the kernel could not probe leaves no other sign in the node objects).
Kept apart from the finding so the snapshot can import it without the doctor's links."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import Obj, labels_of, name_of

#: What makes nodes peers: GFD's product label, else the cloud's instance type; nodes with neither are peers of each
#: other. Only a trigger for a log read (the finding rests on the kernel's lines), so a loose grouping costs a read.
PEER_LABELS = ("nvidia.com/gpu.product", "node.kubernetes.io/instance-type")
#: NVSentinel's syslog health monitor, by the name its chart gives its pods and by its image.
MONITOR_NAME, MONITOR_IMAGE = "syslog-health-monitor", "nvsentinel/syslog-health-monitor"
WHOLE = "nvidia.com/gpu"
#: Monitor logs read at most, however many nodes are short.
MAX_MONITOR_LOGS = 8

LogKey = tuple[str, str, str]


def short_nodes(nodes: list[Obj]) -> set[str]:
    """Nodes that offer fewer whole GPUs than the most any of their peers (`PEER_LABELS`) offers."""
    by_product: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for n in nodes:
        labels = labels_of(n)
        count = node_gpu_resources(n).get(WHOLE, 0)
        if count > 0:
            by_product[next((labels[k] for k in PEER_LABELS if labels.get(k)), "")].append((name_of(n), count))
    return {
        name
        for peers in by_product.values()
        if len(peers) > 1
        for name, count in peers
        if count < max(c for _, c in peers)
    }


def monitor_container(pod: Obj) -> str | None:
    """The container of NVSentinel's syslog health monitor in ``pod``, if it is one."""
    if labels_of(pod).get("app.kubernetes.io/name") == MONITOR_NAME:
        containers = (pod.get("spec") or {}).get("containers") or []
        return str(containers[0].get("name")) if containers else None
    for c in (pod.get("spec") or {}).get("containers") or []:
        if MONITOR_IMAGE in str(c.get("image", "")):
            return str(c.get("name"))
    return None


def monitor_log_candidates(pods: list[Obj], nodes: list[Obj]) -> list[tuple[LogKey, Obj]]:
    """The syslog health monitor's running container on each short node (`short_nodes`), for the gather step; no
    pass over the pods where no node is short."""
    short = short_nodes(nodes)
    if not short:
        return []
    out: list[tuple[LogKey, Obj]] = []
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") not in short or (container := monitor_container(pod)) is None:
            continue
        status: dict[str, Any] = next(
            (cs for cs in (pod.get("status") or {}).get("containerStatuses") or [] if cs.get("name") == container), {}
        )
        meta = pod.get("metadata") or {}
        out.append(((str(meta.get("namespace") or "default"), str(meta.get("name")), container), status))
    return sorted(out, key=lambda c: c[0])[:MAX_MONITOR_LOGS]

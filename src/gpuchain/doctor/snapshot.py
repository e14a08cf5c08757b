"""Gather what the doctor needs with a fixed handful of list calls, never one call per node.

Seven lists answer every check on any cluster size: ClusterPolicies (which also name the
operator's namespace), Nodes, Pods (all namespaces, not finished), the operator's DaemonSets and
ConfigMaps, RuntimeClasses and Warning Events. Container logs are read only for the few failing
operand pods whose last log lines are not already in ``lastState.terminated.message``
(at most ``MAX_LOGS``), so a thousand crash-looping nodes cost no more than five.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from gpuchain.kube import CLUSTER_POLICY, CONFIGMAP, DAEMONSET, EVENT, NODE, POD, RUNTIME_CLASS, Cluster
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import DEVICE_PLUGIN
from gpuchain.operator.reconcile import DEFAULT_NAMESPACE

MAX_LOGS = 5
LogKey = tuple[str, str, str]  #: (namespace, pod, container)


class LogReader(Protocol):
    """Reads a container's log (``kubectl logs --tail``); None when it cannot."""

    def __call__(self, namespace: str, pod: str, container: str) -> str | None: ...


@dataclass(frozen=True)
class Snapshot:
    """The cluster as the doctor saw it; every check is a pure function of this."""

    namespace: str
    policies: list[Obj]
    nodes: list[Obj]
    pods: list[Obj]
    daemonsets: list[Obj]
    configmaps: list[Obj]
    runtime_classes: list[Obj]
    events: list[Obj]
    logs: dict[LogKey, str] = field(default_factory=dict)


#: The list calls, in order, with what each is for (also the progress bar's steps).
STEPS = ("clusterpolicies", "nodes", "pods", "daemonsets", "configmaps", "runtimeclasses", "events")


def gather(
    cluster: Cluster,
    namespace: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Snapshot:
    """List everything once. ``namespace`` defaults to the ClusterPolicy's status, then gpu-operator."""
    step = progress or (lambda _name: None)
    policies = cluster.list(CLUSTER_POLICY)
    step("clusterpolicies")
    if namespace is None:
        namespace = next(
            (str(p.get("status", {}).get("namespace")) for p in policies if p.get("status", {}).get("namespace")),
            DEFAULT_NAMESPACE,
        )
    nodes = cluster.list(NODE)
    step("nodes")
    pods = cluster.list(POD, field_selector="status.phase!=Succeeded,status.phase!=Failed")
    step("pods")
    daemonsets = cluster.list(DAEMONSET, namespace)
    step("daemonsets")
    configmaps = cluster.list(CONFIGMAP, namespace)
    step("configmaps")
    runtime_classes = cluster.list(RUNTIME_CLASS)
    step("runtimeclasses")
    events = cluster.list(EVENT, field_selector="type=Warning")
    step("events")
    return Snapshot(namespace, policies, nodes, pods, daemonsets, configmaps, runtime_classes, events)


def needs_logs(snapshot: Snapshot, limit: int = MAX_LOGS) -> list[LogKey]:
    """The containers worth a log call: failing operand containers with no last log lines in their
    status, and running device plugins on nodes whose capacity has no GPU resource (their log
    says whether they registered)."""
    unregistered = {str(n.get("metadata", {}).get("name")) for n in snapshot.nodes if not node_gpu_resources(n)}
    wanted: list[LogKey] = []
    for pod in snapshot.pods:
        meta = pod.get("metadata", {})
        if meta.get("namespace") != snapshot.namespace:
            continue
        plugin = (meta.get("labels") or {}).get("app") == DEVICE_PLUGIN.name
        for cs in pod.get("status", {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            message = ((cs.get("lastState") or {}).get("terminated") or {}).get("message")
            running = bool((cs.get("state") or {}).get("running"))
            silent = plugin and running and (pod.get("spec") or {}).get("nodeName") in unregistered
            if (waiting.get("reason") == "CrashLoopBackOff" and not message) or silent:
                wanted.append((snapshot.namespace, str(meta.get("name")), str(cs.get("name"))))
    return sorted(wanted)[:limit]


def with_logs(snapshot: Snapshot, reader: LogReader | None, limit: int = MAX_LOGS) -> tuple[Snapshot, int]:
    """The snapshot plus the logs of up to ``limit`` failing containers; also how many reads it made."""
    if reader is None:
        return snapshot, 0
    keys = needs_logs(snapshot, limit)
    logs = dict(snapshot.logs)
    for key in keys:
        text = reader(*key)
        if text:
            logs[key] = text
    return Snapshot(**{**snapshot.__dict__, "logs": logs}), len(keys)


def timed_gather(
    cluster: Cluster,
    namespace: str | None = None,
    reader: LogReader | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Snapshot, dict[str, int], float]:
    """gather() + with_logs(), with the API calls made (per verb, ``logs`` included) and the seconds."""
    before = cluster.calls.snapshot()
    started = time.perf_counter()
    snap = gather(cluster, namespace, progress)
    snap, log_reads = with_logs(snap, reader)
    after = cluster.calls.snapshot()
    calls = {
        verb: after.get(verb, 0) - before.get(verb, 0) for verb in after if after.get(verb, 0) != before.get(verb, 0)
    }
    if log_reads:
        calls["logs"] = log_reads
    return snap, calls, time.perf_counter() - started

"""Driver upgrades node by node: gpu-operator's state machine on ``nvidia.com/gpu-driver-upgrade-state``.

The driver DaemonSet uses ``OnDelete``, so changing ``driver.version`` restarts nothing by itself.
Each reconcile moves every node at most one step:

    (outdated) upgrade-required -> cordon-required -> wait-for-jobs-required -> pod-deletion-required
    -> pod-restart-required -> validation-required -> uncordon-required -> upgrade-done

Two budgets decide when a node may start:

- ``maxParallelUpgrades`` (0: no limit) caps the nodes in flight (cordon-required .. uncordon-required);
- ``maxUnavailable`` caps the GPU nodes that are unavailable: in flight, cordoned (by anyone),
  NotReady, or ``upgrade-failed``. A node that is already unavailable (an admin cordoned it, it
  is NotReady) may start without using more of this budget, since upgrading it takes nothing
  more away.

A node that cannot finish (a PodDisruptionBudget blocks eviction, the new driver never
validates) becomes ``upgrade-failed`` after the policy's timeout with the reason in the
``gpuchain.io/driver-upgrade-message`` annotation. It stays cordoned for a person to look at
and frees its ``maxParallelUpgrades`` slot, so the rest go on as long as ``maxUnavailable``
leaves room for it; it keeps counting against ``maxUnavailable``, because it is unavailable,
and the budget is a promise about capacity. So with 3 nodes and 25% (one node) a failed node
holds the others until it is fixed (its driver validates, or someone removes its state label to
retry); with a budget of two the others go on one by one. The status's ``driverUpgrades.waiting``
says when nodes wait for the budget.

The upgrade uncordons only nodes it cordoned itself (``gpuchain.io/driver-upgrade-cordoned``):
a node cordoned by an admin or by remediation before the upgrade stays cordoned.
Waiting for jobs is not implemented: that state passes straight on. `next_step` is pure;
`advance_upgrades` is the shell that performs it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuchain.kube import NODE, POD, Cluster, EvictionBlockedError, NotFoundError, labels_of, name_of
from gpuchain.kube.gpu_resources import uses_gpus
from gpuchain.kube.objects import annotations_of
from gpuchain.operator.operands import DRIVER
from gpuchain.operator.policy import ClusterPolicySpec

STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
SINCE_ANNOTATION = "gpuchain.io/driver-upgrade-since"
MESSAGE_ANNOTATION = "gpuchain.io/driver-upgrade-message"
#: Set when the upgrade cordons a node, so it uncordons only nodes it cordoned. A key of its own,
#: not remediation's ``gpuchain.io/cordoned-by``, so neither can mistake the other's cordon for
#: its own and put workloads back on a node in the middle of its driver restart.
CORDONED_ANNOTATION = "gpuchain.io/driver-upgrade-cordoned"

UPGRADE_REQUIRED = "upgrade-required"
CORDON_REQUIRED = "cordon-required"
WAIT_FOR_JOBS = "wait-for-jobs-required"
POD_DELETION = "pod-deletion-required"
DRAIN_REQUIRED = "drain-required"
POD_RESTART = "pod-restart-required"
VALIDATION = "validation-required"
UNCORDON = "uncordon-required"
DONE = "upgrade-done"
FAILED = "upgrade-failed"

#: States that hold an upgrade slot.
IN_FLIGHT = (CORDON_REQUIRED, WAIT_FOR_JOBS, POD_DELETION, DRAIN_REQUIRED, POD_RESTART, VALIDATION, UNCORDON)


@dataclass(frozen=True, kw_only=True)
class NodeView:
    """What the state machine needs to know about one GPU node."""

    name: str
    state: str
    since: float
    driver_image: str | None  #: image of the driver pod on the node, None if none
    driver_ready: bool
    gpu_pods: tuple[tuple[str, str], ...] = ()  #: (namespace, name) of pods using GPUs
    cordoned: bool = False  #: spec.unschedulable, whoever set it
    not_ready: bool = False  #: the node's Ready condition is not True
    cordoned_by_upgrade: bool = False  #: carries CORDONED_ANNOTATION

    @property
    def unavailable(self) -> bool:
        """Does this node already count against ``maxUnavailable``?"""
        return self.cordoned or self.not_ready or self.state in IN_FLIGHT or self.state == FAILED


@dataclass(frozen=True)
class Step:
    """Where a node goes next and what must happen for it (empty actions: just relabel)."""

    state: str
    actions: tuple[str, ...] = ()  #: cordon | uncordon | evict | restart-driver
    message: str = ""


def max_unavailable(policy: ClusterPolicySpec, gpu_nodes: int) -> int:
    """``maxUnavailable`` as a node count (percentages round up, as in Kubernetes; at least 1)."""
    mu = policy.driver.upgrade_policy.max_unavailable
    limit = math.ceil(int(mu[:-1]) * gpu_nodes / 100) if isinstance(mu, str) and mu.endswith("%") else int(mu)
    return max(1, limit)


def slots(policy: ClusterPolicySpec, *, gpu_nodes: int, in_flight: int, unavailable: int | None = None) -> int:
    """How many more available nodes may start upgrading now.

    ``unavailable`` counts every unavailable GPU node, in-flight ones included (default: only
    the in-flight ones); ``maxParallelUpgrades`` caps the in-flight ones alone.
    """
    free = max_unavailable(policy, gpu_nodes) - (in_flight if unavailable is None else unavailable)
    parallel = policy.driver.upgrade_policy.max_parallel_upgrades
    if parallel > 0:
        free = min(free, parallel - in_flight)
    return max(0, free)


def next_step(node: NodeView, *, target: str, policy: ClusterPolicySpec, now: float, may_start: bool) -> Step | None:
    """The node's next state (None: stay). Pure."""
    timeout = policy.driver.upgrade_policy.pod_deletion.timeout_seconds
    outdated = node.driver_image is not None and node.driver_image != target
    overdue = now - node.since > timeout
    state = node.state
    if state in ("", DONE):
        return Step(UPGRADE_REQUIRED) if outdated else None
    if state == UPGRADE_REQUIRED:
        if not outdated:
            return Step(DONE)
        return Step(CORDON_REQUIRED) if may_start else None
    if state == CORDON_REQUIRED:
        return Step(WAIT_FOR_JOBS, ("cordon",))
    if state == WAIT_FOR_JOBS:
        return Step(POD_DELETION)
    if state in (POD_DELETION, DRAIN_REQUIRED):
        if not node.gpu_pods:
            return Step(POD_RESTART)
        if overdue:
            return Step(FAILED, ("evict",), f"GPU pods not evicted within {timeout}s")
        return Step(state, ("evict",))
    if state == POD_RESTART:
        return Step(VALIDATION, ("restart-driver",) if outdated else ())
    if state == VALIDATION:
        if not outdated and node.driver_ready:
            return Step(UNCORDON)
        if overdue:
            return Step(FAILED, message=f"new driver not ready within {timeout}s")
        return None
    if state == UNCORDON:
        return Step(DONE, ("uncordon",))
    if state == FAILED:
        return Step(UNCORDON) if not outdated and node.driver_ready else None
    return Step(UPGRADE_REQUIRED if outdated else DONE, message=f"unknown state {state!r} reset")


@dataclass
class UpgradeReport:
    """Writes made and the per-state node counts for the ClusterPolicy status."""

    writes: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def _image_of(ds: dict[str, Any]) -> str:
    return str(ds["spec"]["template"]["spec"]["containers"][0]["image"])


def _label_counts(gpu_nodes: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in gpu_nodes:
        state = labels_of(node).get(STATE_LABEL, "")
        if state:
            counts[state] = counts.get(state, 0) + 1
    return counts


def upgrade_pending(driver_ds: dict[str, Any], gpu_nodes: list[dict[str, Any]]) -> bool:
    """Is any driver pod (possibly) outdated or any node mid-upgrade? Otherwise no pods need reading."""
    st = driver_ds.get("status") or {}
    if int(st.get("observedGeneration") or 0) < int(driver_ds["metadata"].get("generation") or 0):
        return True
    if int(st.get("updatedNumberScheduled") or 0) < int(st.get("desiredNumberScheduled") or 0):
        return True
    return any(labels_of(n).get(STATE_LABEL, "") not in ("", DONE, FAILED) for n in gpu_nodes)


def _driver_pods(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        str(p.get("spec", {}).get("nodeName")): p
        for p in pods
        if p.get("metadata", {}).get("labels", {}).get("app") == DRIVER.name
    }


def _pod_ready(pod: dict[str, Any]) -> bool:
    st = pod.get("status") or {}
    statuses = st.get("containerStatuses") or []
    return st.get("phase") == "Running" and bool(statuses) and all(c.get("ready") for c in statuses)


def advance_upgrades(
    cluster: Cluster,
    *,
    policy: ClusterPolicySpec,
    gpu_nodes: list[dict[str, Any]],
    daemonsets: dict[str, dict[str, Any]],
    operand_pods: Callable[[], list[dict[str, Any]]],
    namespace: str,
    now: float | None = None,
) -> UpgradeReport:
    """Move every GPU node one step through the upgrade state machine; returns what it wrote.

    ``operand_pods`` is called (one list request) only when an upgrade may be under way.
    """
    report = UpgradeReport()
    ds = daemonsets.get(DRIVER.name)
    if not policy.driver.enabled or ds is None or not policy.driver.upgrade_policy.auto_upgrade:
        return report
    if not upgrade_pending(ds, gpu_nodes):
        settled = _label_counts(gpu_nodes)
        if settled:
            report.summary = {"target": _image_of(ds), "nodes": settled}
        return report
    now = time.time() if now is None else now
    target = _image_of(ds)
    drivers = _driver_pods(operand_pods())
    views = []
    for node in sorted(gpu_nodes, key=name_of):
        name = name_of(node)
        pod = drivers.get(name)
        state = labels_of(node).get(STATE_LABEL, "")
        since = float(annotations_of(node).get(SINCE_ANNOTATION) or now)
        image = pod["spec"]["containers"][0]["image"] if pod else None
        gpu_pods: tuple[tuple[str, str], ...] = ()
        if state in (POD_DELETION, DRAIN_REQUIRED):
            on_node = cluster.list(POD, field_selector=f"spec.nodeName={name}")
            gpu_pods = tuple(
                (str(p["metadata"]["namespace"]), name_of(p))
                for p in on_node
                if p["metadata"].get("namespace") != namespace and uses_gpus(p)
            )
        views.append(
            NodeView(
                name=name,
                state=state,
                since=since,
                driver_image=image,
                driver_ready=pod is not None and _pod_ready(pod),
                gpu_pods=gpu_pods,
                cordoned=bool(node.get("spec", {}).get("unschedulable")),
                not_ready=not _node_ready(node),
                cordoned_by_upgrade=CORDONED_ANNOTATION in annotations_of(node),
            )
        )
    in_flight = sum(1 for v in views if v.state in IN_FLIGHT)
    unavailable = sum(1 for v in views if v.unavailable)
    parallel = policy.driver.upgrade_policy.max_parallel_upgrades
    parallel_free = parallel - in_flight if parallel > 0 else len(views)
    budget_free = max_unavailable(policy, len(views)) - unavailable
    counts: dict[str, int] = {}
    held = 0
    for v in views:
        may_start = parallel_free > 0 and (v.unavailable or budget_free > 0)
        step = next_step(v, target=target, policy=policy, now=now, may_start=may_start)
        if step is not None and step.state == CORDON_REQUIRED:
            parallel_free -= 1
            budget_free -= 0 if v.unavailable else 1
        elif step is None and v.state == UPGRADE_REQUIRED and parallel_free > 0:
            held += 1
        new_state, message = v.state, ""
        if step is not None:
            message = _perform(cluster, v, step, drivers.get(v.name), namespace, report)
            new_state = step.state
            if new_state == FAILED and "evict" in step.actions:
                if message:
                    message = f"{step.message}: {message}"
                else:  # the last try went through after all
                    new_state = POD_RESTART
            if new_state != v.state or message:
                _label(cluster, v, new_state, message or step.message, now, report)
        if new_state:
            counts[new_state] = counts.get(new_state, 0) + 1
    if counts:
        report.summary = {"target": target, "nodes": counts}
    if held:
        report.summary["waiting"] = (
            f"{held} node(s) wait: {unavailable} of {len(views)} GPU nodes unavailable, "
            f"maxUnavailable allows {max_unavailable(policy, len(views))}"
        )
    return report


def _node_ready(node: dict[str, Any]) -> bool:
    """Ready condition True; a node without conditions (not reported yet) counts as ready."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    return ready is None or ready.get("status") == "True"


def _perform(
    cluster: Cluster, v: NodeView, step: Step, driver_pod: dict[str, Any] | None, namespace: str, report: UpgradeReport
) -> str:
    """Carry out a step's actions; returns a message when something blocked."""
    blocked = ""
    for action in step.actions:
        if action == "cordon" and not v.cordoned:
            patch = {"spec": {"unschedulable": True}, "metadata": {"annotations": {CORDONED_ANNOTATION: "true"}}}
            cluster.patch(NODE, name=v.name, patch=patch)
            report.writes.append(f"node/{v.name} (cordon)")
        elif action == "uncordon" and v.cordoned_by_upgrade:
            patch = {"spec": {"unschedulable": None}, "metadata": {"annotations": {CORDONED_ANNOTATION: None}}}
            cluster.patch(NODE, name=v.name, patch=patch)
            report.writes.append(f"node/{v.name} (uncordon)")
        elif action == "evict":
            for ns, pod in v.gpu_pods:
                try:
                    cluster.evict(pod, ns)
                    report.writes.append(f"pod/{ns}/{pod} (evicted)")
                except EvictionBlockedError as exc:
                    blocked = str(exc)
                except NotFoundError:
                    continue
        elif action == "restart-driver" and driver_pod is not None:
            try:
                cluster.delete(POD, name=name_of(driver_pod), namespace=namespace)
                report.writes.append(f"pod/{namespace}/{name_of(driver_pod)} (driver restart)")
            except NotFoundError:
                continue
    return blocked


def _label(cluster: Cluster, v: NodeView, state: str, message: str, now: float, report: UpgradeReport) -> None:
    since = str(now) if state != v.state else None
    annotations: dict[str, Any] = {MESSAGE_ANNOTATION: message or None}
    if since is not None:
        annotations[SINCE_ANNOTATION] = since
    node = cluster.patch(
        NODE, name=v.name, patch={"metadata": {"labels": {STATE_LABEL: state}, "annotations": annotations}}
    )
    report.writes.append(f"node/{v.name} ({STATE_LABEL}={state})")
    if state == FAILED and v.state != FAILED:
        cluster.record_event(
            node, reason="DriverUpgradeFailed", message=message, type="Warning", component="gpuchain-operator"
        )

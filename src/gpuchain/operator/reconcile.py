"""The reconcile loop's imperative shell: read the cluster, call the pure parts, write the difference.

One pass reads a fixed number of lists (policies, nodes, DaemonSets, ServiceAccounts, Services, pods) plus a get per
cluster-wide singleton, applies only what differs, advances driver upgrades, and patches the
status only when it changed. With nothing to do it makes zero writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuchain.dra.kinds import DEVICE_CLASS
from gpuchain.kube import (
    CLUSTER_POLICY,
    CONFIGMAP,
    DAEMONSET,
    DEPLOYMENT,
    NODE,
    POD,
    SERVICE,
    SERVICE_ACCOUNT,
    Cluster,
    NotFoundError,
    labels_of,
    name_of,
)
from gpuchain.kube.objects import diff_patch
from gpuchain.kube.port import now_rfc3339
from gpuchain.operator.desired import desired
from gpuchain.operator.dra import dra_problems
from gpuchain.operator.drivertag import driver_os
from gpuchain.operator.manifests import manifest_problems
from gpuchain.operator.migrate import (
    NVIDIA_CLUSTER_POLICY,
    NVIDIA_OPERATOR_COMPONENT,
    Collision,
    nvidia_collision,
    runtime_of,
)
from gpuchain.operator.operands import (
    DCGM_EXPORTER,
    MANAGED_BY,
    MANAGED_SELECTOR,
    OPERANDS,
    Facts,
    config_uses_mps,
    enabled,
    has_nfd_labels,
    is_gpu_node,
    served_by,
)
from gpuchain.operator.policy import ClusterPolicySpec, Problem, parse_policy
from gpuchain.operator.status import (
    StatusAndConditions,
    aside_status,
    chain_status,
    ignored_status,
    invalid_status,
    own_status,
    policy_status,
    with_transition_times,
)
from gpuchain.operator.upgrade import UpgradeReport, advance_upgrades

DEFAULT_NAMESPACE = "gpu-operator"


@dataclass(kw_only=True)
class ReconcileResult:
    """What one pass did; ``changed`` lists the objects it wrote."""

    policy: str
    state: str
    changed: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    upgrades: UpgradeReport | None = None


def _managed(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep our objects only (a server may ignore the label selector, as kmock does)."""
    return [o for o in objs if all(labels_of(o).get(k) == v for k, v in MANAGED_BY.items())]


def _write_status(cluster: Cluster, policy: dict[str, Any], computed: StatusAndConditions) -> bool:
    """Patch the status if it differs, and record an Event when Ready or Error changes."""
    status, conditions = computed
    old = policy.get("status") or {}
    old_conditions = old.get("conditions") or []
    status = {**status, "conditions": with_transition_times(conditions, old=old_conditions, now=now_rfc3339())}
    patch = diff_patch(old, status)
    if not patch:
        return False
    cluster.patch_status(CLUSTER_POLICY, name=name_of(policy), status=patch)
    before = {c.get("type"): _gist(c) for c in old_conditions}
    for cond in conditions:
        if before.get(cond["type"]) == _gist(cond):
            continue
        bad = (cond["type"] == "Ready") != (cond["status"] == "True")
        if cond["type"] == "Error" and not bad and cond["type"] not in before:
            continue  # "no error" on a fresh policy is not news
        text = cond["message"] or f"{cond['type']}={cond['status']}"
        kind: Literal["Normal", "Warning"] = "Warning" if bad else "Normal"
        cluster.record_event(policy, reason=cond["reason"], message=text, type=kind, component="gpuchain-operator")
    return True


def _gist(cond: dict[str, Any]) -> tuple[str, str, str]:
    """What makes a condition change news: status, reason, and the broken link with its reason."""
    head = ":".join(str(cond.get("message", "")).split(":")[:2])
    return str(cond.get("status")), str(cond.get("reason")), head


def _nvidia_policies(cluster: Cluster) -> list[dict[str, Any]]:
    """NVIDIA's ClusterPolicies; none when its CRD is not installed."""
    try:
        return cluster.list(NVIDIA_CLUSTER_POLICY)
    except NotFoundError:
        return []


def _device_classes(cluster: Cluster) -> list[dict[str, Any]]:
    """The cluster's DRA DeviceClasses; none before Kubernetes 1.34 (no resource.k8s.io/v1)."""
    try:
        return cluster.list(DEVICE_CLASS)
    except NotFoundError:
        return []


def _nvidia_operator_deployments(cluster: Cluster) -> list[dict[str, Any]]:
    """Deployments that may be NVIDIA's operator (all namespaces); one list, read only beside an nvidia.com policy."""
    key, value = NVIDIA_OPERATOR_COMPONENT
    return cluster.list(DEPLOYMENT, label_selector=f"{key}={value}")


def _remove_colliding(
    cluster: Cluster,
    collision: Collision,
    daemonsets: list[dict[str, Any]],
    namespace: str,
    runs_in: Mapping[str, str],
) -> list[str]:
    """Delete gpuchain's own DaemonSets for the operands NVIDIA's operator also runs.

    Two device plugins, GFDs, MIG managers or drivers on one node fight over the same GPUs,
    labels and kernel module; NVIDIA's stay, gpuchain's go (the node agent with them, where it
    serves one: ``runs_in``, `operands.served_by`). The others are left as they are.
    """
    colliding = [op for op in OPERANDS if op.state in collision.operands]
    names = {op.name for op in colliding} | {runs_in[op.state] for op in colliding if op.state in runs_in}
    removed: list[str] = []
    for ds in _managed(daemonsets):
        ds_name = name_of(ds)
        if ds["metadata"].get("namespace") == namespace and ds_name in names:
            cluster.delete(DAEMONSET, name=ds_name, namespace=namespace)
            removed.append(f"daemonset/{ds_name} (deleted)")
    if DCGM_EXPORTER.state in collision.operands:
        # The exporter's Service would be left selecting no pod (NVIDIA's own Service serves its exporter).
        for svc in _managed(cluster.list(SERVICE, namespace=namespace, label_selector=MANAGED_SELECTOR)):
            cluster.delete(SERVICE, name=name_of(svc), namespace=namespace)
            removed.append(f"service/{name_of(svc)} (deleted)")
    return sorted(removed)


def active_policy(policies: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ClusterPolicy that is honoured: the oldest (then by name), as gpu-operator picks one."""
    if not policies:
        return None
    return min(policies, key=lambda p: (str(p["metadata"].get("creationTimestamp", "")), name_of(p)))


def _plugin_uses_mps(cluster: Cluster, policy: ClusterPolicySpec, namespace: str) -> bool:
    """Whether the device plugin's ConfigMap (``devicePlugin.config.name``, in the operands'
    namespace) shares a resource with MPS, so its DaemonSet needs the MPS mounts: one read per
    pass, and only with a ConfigMap named. A ConfigMap edited later is seen on the next pass (the
    resync at the latest)."""
    config = policy.device_plugin
    if not (config.enabled and config.config.name):
        return False
    found = cluster.get_or_none(CONFIGMAP, name=config.config.name, namespace=namespace)
    return found is not None and config_uses_mps(found.get("data") or {})


def reconcile(cluster: Cluster, *, name: str, namespace: str = DEFAULT_NAMESPACE) -> ReconcileResult:
    """Bring the cluster in line with ClusterPolicy ``name``; safe to call any number of times."""
    policies = cluster.list(CLUSTER_POLICY)
    policy = next((p for p in policies if name_of(p) == name), None)
    if policy is None:
        return ReconcileResult(policy=name, state="absent")
    generation = int(policy["metadata"].get("generation") or 0)
    active = active_policy(policies)
    if active is not None and name_of(active) != name:
        wrote = _write_status(cluster, policy, ignored_status(name_of(active), generation))
        return ReconcileResult(policy=name, state="ignored", changed=[f"clusterpolicy/{name}/status"] if wrote else [])
    parsed = parse_policy(policy.get("spec"))
    if isinstance(parsed, list):
        wrote = _write_status(cluster, policy, invalid_status(parsed, namespace=namespace, generation=generation))
        return ReconcileResult(
            policy=name, state="notReady", changed=[f"clusterpolicy/{name}/status"] if wrote else [], problems=parsed
        )

    daemonsets = cluster.list(DAEMONSET)
    both = dra_problems(
        parsed, daemonsets=daemonsets, device_classes=_device_classes(cluster) if parsed.device_plugin.enabled else []
    )
    if both:  # the device plugin and the DRA plugin would serve the same GPUs: deploy neither change
        wrote = _write_status(cluster, policy, invalid_status(both, namespace=namespace, generation=generation))
        return ReconcileResult(
            policy=name, state="notReady", changed=[f"clusterpolicy/{name}/status"] if wrote else [], problems=both
        )

    nvidia = _nvidia_policies(cluster)
    if nvidia:
        collision = nvidia_collision(
            nvidia, daemonsets=daemonsets, deployments=_nvidia_operator_deployments(cluster), ours=parsed
        )
        if collision is not None:
            removed = _remove_colliding(cluster, collision, daemonsets, namespace, served_by(parsed))
            if _write_status(
                cluster, policy, aside_status(collision.message(), namespace=namespace, generation=generation)
            ):
                removed.append(f"clusterpolicy/{name}/status")
            return ReconcileResult(policy=name, state="standingAside", changed=removed)
    # NVIDIA's RuntimeClass (beside its operator): used as it is, never re-owned.
    theirs = {str(((p.get("spec") or {}).get("operator") or {}).get("runtimeClass") or "nvidia") for p in nvidia}

    nodes = cluster.list(NODE)
    # NVIDIA's operator ignores the deprecated operator.defaultRuntime and asks the nodes; so does gpuchain.
    os_tag = driver_os((name_of(n), labels_of(n)) for n in nodes if is_gpu_node(labels_of(n)))
    uid = str(policy["metadata"].get("uid") or "")
    mps = _plugin_uses_mps(cluster, parsed, namespace)
    facts = Facts(
        namespace=namespace,
        policy_name=name,
        policy_uid=uid,
        runtime=runtime_of(nodes) or "containerd",
        driver_os=os_tag,
        mps=mps,
    )
    live_ds = {
        name_of(d): d for d in _managed(cluster.list(DAEMONSET, namespace=namespace, label_selector=MANAGED_SELECTOR))
    }
    # One list for the per-operand ServiceAccounts instead of a get each.
    live_sa = {
        name_of(a): a
        for a in _managed(cluster.list(SERVICE_ACCOUNT, namespace=namespace, label_selector=MANAGED_SELECTOR))
    }
    # And one for the exporter's Service, which goes when the exporter is switched off.
    live_svc = {
        name_of(s): s for s in _managed(cluster.list(SERVICE, namespace=namespace, label_selector=MANAGED_SELECTOR))
    }
    changed: list[str] = []
    wanted = desired(parsed, facts)
    refused = manifest_problems(wanted)
    if refused:
        # Nothing is half-applied: the API server would take some objects and refuse these.
        wrote = _write_status(cluster, policy, invalid_status(refused, namespace=namespace, generation=generation))
        return ReconcileResult(policy=name, state="notReady", changed=[f"clusterpolicy/{name}/status"] if wrote else [])
    for obj in wanted:
        if obj["kind"] == "RuntimeClass" and name_of(obj) in theirs:
            continue
        if obj["kind"] == "DaemonSet":
            result = cluster.apply(obj, live=live_ds.get(name_of(obj)), known_live=True)
            live_ds[name_of(obj)] = result.object
        elif obj["kind"] == "ServiceAccount":
            result = cluster.apply(obj, live=live_sa.get(name_of(obj)), known_live=True)
        elif obj["kind"] == "Service":
            result = cluster.apply(obj, live=live_svc.get(name_of(obj)), known_live=True)
        else:
            result = cluster.apply(obj)
        if result.changed:
            changed.append(f"{obj['kind'].lower()}/{name_of(obj)}")
    wanted_names = {name_of(o) for o in wanted if o["kind"] == "DaemonSet"}
    for stale in sorted(set(live_ds) - wanted_names):
        cluster.delete(DAEMONSET, name=stale, namespace=namespace)
        del live_ds[stale]
        changed.append(f"daemonset/{stale} (deleted)")
    for stale in sorted(set(live_svc) - {name_of(o) for o in wanted if o["kind"] == "Service"}):
        cluster.delete(SERVICE, name=stale, namespace=namespace)
        changed.append(f"service/{stale} (deleted)")

    pods: list[dict[str, Any]] | None = None

    def operand_pods() -> list[dict[str, Any]]:
        # Pods are read only when something is not ready or an upgrade is due: a steady
        # cluster's reconcile then costs a few small requests however many nodes it has.
        nonlocal pods
        if pods is None:
            pods = _managed(cluster.list(POD, namespace=namespace, label_selector=MANAGED_SELECTOR))
        return pods

    gpu_nodes = [n for n in nodes if is_gpu_node(labels_of(n))]
    upgrades = advance_upgrades(
        cluster, policy=parsed, gpu_nodes=gpu_nodes, daemonsets=live_ds, operand_pods=operand_pods, namespace=namespace
    )
    changed += upgrades.writes
    switched = {op.state: enabled(parsed, op) for op in OPERANDS}
    runs_in = served_by(parsed)
    all_ready = all(own_status(live_ds.get(ds), []).state == "ready" for ds in set(runs_in.values()))
    operands = chain_status(switched, daemonsets=live_ds, pods=[] if all_ready else operand_pods(), served_by=runs_in)
    nfd_seen = any(has_nfd_labels(labels_of(n)) for n in nodes)
    computed = policy_status(
        operands, gpu_nodes=len(gpu_nodes), nfd_seen=nfd_seen, namespace=namespace, generation=generation
    )
    if upgrades.summary:
        computed[0]["driverUpgrades"] = upgrades.summary
    if _write_status(cluster, policy, computed):
        changed.append(f"clusterpolicy/{name}/status")
    return ReconcileResult(policy=name, state=computed[0]["state"], changed=changed, upgrades=upgrades)

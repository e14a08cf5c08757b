"""gpuchain's own chart: a ``gpuchain.io/v1`` ClusterPolicy and the operands its operator deploys."""

from __future__ import annotations

from gpuchain.doctor.structs import CHARTS, Snapshot, Stack
from gpuchain.kube.objects import labels_of
from gpuchain.operator.operands import MANAGED_BY, OPERANDS
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy
from gpuchain.operator.reconcile import DEFAULT_NAMESPACE, active_policy

POLICY_GROUP = "gpuchain.io"
MANAGED = next(iter(MANAGED_BY.items()))


def detect(snapshot: Snapshot) -> Stack | None:
    """A gpuchain.io ClusterPolicy, or DaemonSets labelled as managed by gpuchain's operator."""
    policies = [p for p in snapshot.policies if str(p.get("apiVersion", "")).startswith(POLICY_GROUP + "/")]
    managed = [d for d in snapshot.daemonsets if labels_of(d).get(MANAGED[0]) == MANAGED[1]]
    if not policies and not managed:
        return None
    obj = active_policy(policies)
    parsed = parse_policy((obj or {}).get("spec"))
    problems = tuple(str(p) for p in parsed) if isinstance(parsed, list) else ()
    spec = parsed if isinstance(parsed, ClusterPolicySpec) else ClusterPolicySpec()
    status_ns = str((obj or {}).get("status", {}).get("namespace") or "")
    ds_ns = str((managed[0].get("metadata") or {}).get("namespace") or "") if managed else ""
    namespace = snapshot.namespace or status_ns or ds_ns or DEFAULT_NAMESPACE
    containers = {o.state: o.name.removeprefix("nvidia-").removesuffix("-daemonset") for o in OPERANDS}
    containers |= {"driver": "nvidia-driver-ctr", "container-toolkit": "nvidia-container-toolkit-ctr"}
    return Stack(
        "gpuchain",
        "gpuchain (its chart and operator)",
        namespace,
        {o.state: o.name for o in OPERANDS},
        containers,
        spec,
        policy_obj=obj,
        policy_resource=f"clusterpolicies.{POLICY_GROUP}",
        policy_problems=problems,
        chart=CHARTS["gpuchain"],
        gfd_via_nfd=False,
    )

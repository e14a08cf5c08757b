"""gpuchain's own chart: a ``gpuchain.io/v1`` ClusterPolicy and the operands its operator deploys.

Two layouts (`gpuchain.operator.operands`): by default (``spec.nodeAgent.enabled``) the validator,
device plugin, exporter, GFD and MIG manager are roles of one ``gpuchain-node-agent`` DaemonSet
(container ``node-agent``, whose init containers validate driver, toolkit and CUDA), taken off a
node by ``nvidia.com/gpu.deploy.node-agent=false``; with it off, each has its own DaemonSet. The
adapter maps each link to whichever DaemonSet serves it (`served_by`, the operator's own answer),
so a crash-looping agent reads as every link it serves down together.
"""

from __future__ import annotations

from gpuchain.doctor.structs import CHARTS, Snapshot, Stack
from gpuchain.kube.objects import Obj, labels_of, name_of
from gpuchain.operator.operands import MANAGED_BY, NODE_AGENT, OPERANDS, deploy_label, served_by
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy
from gpuchain.operator.reconcile import DEFAULT_NAMESPACE, active_policy

POLICY_GROUP = "gpuchain.io"
#: The logger each node agent role writes its lines under (``gpuchain.agent.roles``; the doctor does
#: not import the agent, its tests check these against it), by the operand state the role serves.
ROLE_LOGGERS = {
    "operator-validation": "gpuchain.validator",
    "device-plugin": "gpuchain.deviceplugin",
    "dcgm-exporter": "gpuchain.exporter",
    "gpu-feature-discovery": "gpuchain.discovery",
    "mig-manager": "gpuchain.mig",
}
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
    if obj is None:
        spec = _layout_from(managed, spec)
    status_ns = str((obj or {}).get("status", {}).get("namespace") or "")
    ds_ns = str((managed[0].get("metadata") or {}).get("namespace") or "") if managed else ""
    namespace = snapshot.namespace or status_ns or ds_ns or DEFAULT_NAMESPACE
    containers = {o.state: o.name.removeprefix("nvidia-").removesuffix("-daemonset") for o in OPERANDS}
    containers |= {"driver": "nvidia-driver-ctr", "container-toolkit": "nvidia-container-toolkit-ctr"}
    # Every operand keeps its own name where the policy switches it off (the checks name what is absent).
    daemonsets = {o.state: o.name for o in OPERANDS} | served_by(spec)
    agent = [state for state, name in daemonsets.items() if name == NODE_AGENT.name]
    containers |= {state: NODE_AGENT.deploy for state in agent}
    return Stack(
        id="gpuchain",
        title="gpuchain (its chart and operator)",
        namespace=namespace,
        daemonsets=daemonsets,
        containers=containers,
        policy=spec,
        policy_obj=obj,
        policy_resource=f"clusterpolicies.{POLICY_GROUP}",
        policy_problems=problems,
        chart=CHARTS["gpuchain"],
        gfd_via_nfd=False,
        deploy_labels={state: deploy_label(NODE_AGENT) for state in agent},
        loggers={state: ROLE_LOGGERS[state] for state in agent},
        notes=(f"node agent layout: {', '.join(agent)} served by DaemonSet {NODE_AGENT.name}",) if agent else (),
    )


def _layout_from(managed: list[Obj], spec: ClusterPolicySpec) -> ClusterPolicySpec:
    """Without a policy to read, the layout its DaemonSets show: the node agent's where the operator
    made one, else one DaemonSet per operand (an install from before the node agent)."""
    agent = any(name_of(d) == NODE_AGENT.name for d in managed)
    return spec.model_copy(update={"node_agent": spec.node_agent.model_copy(update={"enabled": agent})})

"""The simulated ClusterPolicy and the GPU Operator's own pod.

gpuchain's policy carries the status its operator's own functions compute; NVIDIA's carries only
the state and conditions NVIDIA's operator writes. The operator pod is rendered when a scenario
gives it a nodeSelector (Running, or Pending as kube-scheduler reports it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import (
    OPERANDS,
    enabled,
    served_by,
)
from gpuchain.operator.policy import ClusterPolicySpec
from gpuchain.operator.status import chain_status, policy_status
from gpuchain.sim.chain import NodePlan
from gpuchain.sim.scenario import Scenario
from gpuchain.sim.shapes import STAMP, pod_status, running_container, unschedulable, warning_event

#: The GPU Operator's Deployment pod (chart nvidia/gpu-operator, Deployment gpu-operator) and its image.
OPERATOR_POD = "gpu-operator-7d6d75f67c-jsrbx"

OPERATOR_IMAGE = "nvcr.io/nvidia/gpu-operator:v24.9.0"


def operator_pod(namespace: str, *, scenario: Scenario, nodes: int, events: list[Obj]) -> Obj:
    """The GPU Operator's pod with the scenario's nodeSelector: Running on the first node that has the
    labels, else Pending as kube-scheduler reports a nodeSelector no node matches (its PodScheduled
    condition and a FailedScheduling Event, in the words of NVIDIA/gpu-operator#371)."""
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": OPERATOR_POD,
            "namespace": namespace,
            # No ownerReferences: the simulator renders no Deployment or ReplicaSet for them to name.
            "labels": {"app": "gpu-operator", "app.kubernetes.io/component": "gpu-operator"},
        },
        "spec": {
            "containers": [{"name": "gpu-operator", "image": OPERATOR_IMAGE}],
            "nodeSelector": dict(scenario.operator_node_selector),
            "tolerations": [
                {"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "effect": "NoSchedule"}
            ],
        },
    }
    if scenario.operator_node is not None:
        pod["spec"]["nodeName"] = scenario.operator_node
        pod["status"] = pod_status("Running", inits=[], mains=[running_container("gpu-operator")], node_ip="10.0.0.2")
        return pod
    said = (
        f"0/{nodes} nodes are available: {nodes} node(s) didn't match Pod's node affinity/selector. "
        f"preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling."
    )
    pod["status"] = unschedulable(said)
    events.append(
        warning_event(
            namespace,
            involved=pod,
            reason="FailedScheduling",
            message=said,
            component="default-scheduler",
            n=len(events),
        )
    )
    return pod


#: NVIDIA's operand states in the order its operator steps through them (the assets/ directory
#: names of NVIDIA/gpu-operator), by gpuchain operand state.
_NVIDIA_STATES = {
    "driver": "state-driver",
    "container-toolkit": "state-container-toolkit",
    "operator-validation": "state-operator-validation",
    "device-plugin": "state-device-plugin",
    "dcgm-exporter": "state-dcgm-exporter",
    "gpu-feature-discovery": "gpu-feature-discovery",
    "mig-manager": "state-mig-manager",
}


def nvidia_policy_status(
    policy: ClusterPolicySpec, *, daemonsets: dict[str, Obj], pods: list[Obj], plans: list[NodePlan], namespace: str
) -> dict[str, Any]:
    """The status NVIDIA's operator writes on its ClusterPolicy: only ``state``, ``namespace`` and
    the Ready/Error conditions (api/nvidia/v1 ClusterPolicyStatus), with the reasons and messages
    of controllers/clusterpolicy_controller.go: operand states not ready first, then no NFD label
    on any node, then no GPU node, else reconciled."""
    operands = chain_status({op.state: enabled(policy, op) for op in OPERANDS}, daemonsets=daemonsets, pods=pods)
    not_ready = [_NVIDIA_STATES[s] for s in _NVIDIA_STATES if operands[s].state == "notReady"]
    labelled = [p for p in plans if p.gpu and p.group.nfd]
    if not_ready:
        message = f"ClusterPolicy is not ready; states not ready: [{' '.join(not_ready)}]"
        conditions = [("Ready", "False", "Error", ""), ("Error", "True", "OperandNotReady", message)]
    elif not labelled:
        conditions = [("Ready", "True", "NFDLabelsMissing", "No NFD labels found"), ("Error", "False", "Ready", "")]
    else:
        message = "ClusterPolicy is ready as all resources have been successfully reconciled"
        conditions = [("Ready", "True", "Reconciled", message), ("Error", "False", "Ready", "")]
    return {
        "state": "notReady" if not_ready else "ready",
        "namespace": namespace,
        "conditions": [
            {"type": t, "status": st, "reason": r, "message": m, "lastTransitionTime": STAMP}
            for t, st, r, m in conditions
        ],
    }


def without_empty(value: Any) -> Any:
    """NVIDIA's ClusterPolicy CRD refuses an empty image name where gpuchain's model keeps "" for
    "the operator's default"; NVIDIA's chart leaves such keys out, so the simulated policy does too."""
    if isinstance(value, dict):
        return {k: without_empty(v) for k, v in value.items() if v != ""}
    if isinstance(value, list):
        return [without_empty(v) for v in value]
    return value


def policy_object(
    scenario: Scenario,
    *,
    policy: ClusterPolicySpec,
    daemonsets: dict[str, Obj],
    pods: Iterable[Obj],
    plans: list[NodePlan],
) -> Obj:
    """The ClusterPolicy with the status the operator's own status functions compute."""
    switched = {op.state: enabled(policy, op) for op in OPERANDS}
    operands = chain_status(switched, daemonsets=daemonsets, pods=list(pods), served_by=served_by(policy))
    status, conditions = policy_status(
        operands, gpu_nodes=sum(p.gpu for p in plans), nfd_seen=True, namespace=scenario.namespace, generation=1
    )
    spec = policy.model_dump(mode="json", by_alias=True)
    return {
        "apiVersion": "gpuchain.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": scenario.policy_name},
        "spec": spec,
        "status": {**status, "conditions": [{**c, "lastTransitionTime": STAMP} for c in conditions]},
    }

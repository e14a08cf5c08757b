"""The simulated Node objects: labels, taints, conditions, nodeInfo, capacity and allocatable, and what
``gpuchain gpu-health`` publishes on a Node.

Kept apart from the pod rendering (`sim.render`): a Node's shape comes from the node's facts and
the distribution it runs, not from any operand.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuchain.common.labels import (
    DEPLOY_PREFIX,
    DEVICE_PLUGIN_CONFIG,
    GPU_PRESENT,
    MIG_CONFIG,
    MIG_CONFIG_STATE,
    MIG_CONFIG_STATE_REASON,
    PAUSED_FOR_MIG_CHANGE,
)
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import NFD_GPU_LABELS
from gpuchain.remediation.model import (
    CONDITION_TYPE,
    FAULTS_ANNOTATION,
    PODS_ANNOTATION,
    Fault,
    condition_for,
    encode_faults,
    encode_pods,
)
from gpuchain.sim.chain import NodePlan
from gpuchain.sim.sandbox import vm_capacity, vm_labels
from gpuchain.sim.shapes import STAMP
from gpuchain.sim.stacks import node_extras


def _node_labels(plan: NodePlan) -> dict[str, str]:
    g = plan.group
    labels = {"kubernetes.io/hostname": plan.name, "kubernetes.io/os": "linux", **g.labels}
    if not plan.gpu:
        return labels
    if g.nfd:
        labels[NFD_GPU_LABELS[0]] = "true"
        labels[GPU_PRESENT] = "true"
    labels.update(plan.labels)
    for suffix in sorted(plan.opted_out):
        labels[DEPLOY_PREFIX + suffix] = "false"
    for suffix in sorted(plan.paused):
        labels[DEPLOY_PREFIX + suffix] = PAUSED_FOR_MIG_CHANGE
    if g.device_plugin_config:
        labels[DEVICE_PLUGIN_CONFIG] = g.device_plugin_config
    if g.mig is not None:
        labels[MIG_CONFIG] = g.mig.config
        labels[MIG_CONFIG_STATE] = g.mig.state.value
    return vm_labels(g, labels)


def node_object(plan: NodePlan, stack: str = "gpuchain") -> Obj:
    """The Node: labels, kernel and runtime in nodeInfo, GPU resources in capacity/allocatable."""
    g = plan.group
    base = {"cpu": "96", "memory": "2113373748Ki", "pods": "110", "ephemeral-storage": "3750000000Ki"}
    vm = {k: str(v) for k, v in vm_capacity(g).items()}  # what a VM node's sandbox device plugin announces
    capacity = {**base, **{k: str(v) for k, v in plan.capacity.items()}, **vm}
    allocatable = {**base, **{k: str(v) for k, v in plan.allocatable.items()}, **vm}
    labels = _node_labels(plan)
    spec: dict[str, Any] = {}
    if plan.gpu:
        extra, provider, taints = node_extras(stack, plan.name, g.preset)
        if stack in ("eks", "aks", "gke"):
            # Managed node images run no NFD: no PCI feature labels, no nvidia.com/gpu.present.
            labels = {k: v for k, v in labels.items() if k not in (NFD_GPU_LABELS[0], GPU_PRESENT)}
        labels = {**extra, **labels}  # the scenario's own labels (its instance type, accelerator) win
        if provider:
            spec["providerID"] = provider
        taints = [*taints, *(dict(t) for t in g.taints)]
        if taints:
            spec["taints"] = taints
    conditions, problem_taints = node_conditions(g.node_problems)
    if problem_taints:
        spec["taints"] = [*spec.get("taints", []), *problem_taints]
    meta: dict[str, Any] = {"name": plan.name, "labels": labels}
    if g.mig is not None and g.mig.reason:
        meta["annotations"] = {MIG_CONFIG_STATE_REASON: g.mig.reason}
    kubelet = NODE_VERSIONS[g.distribution][1]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": conditions,
            "nodeInfo": {
                "kernelVersion": g.kernel,
                "osImage": g.os_image,
                "containerRuntimeVersion": runtime_version(plan),
                "kubeletVersion": kubelet,
                "operatingSystem": "linux",
                # the kubelet's GOARCH: an arm64 node (a Jetson, Grace) says so in the label it also sets
                "architecture": g.labels.get("kubernetes.io/arch", "amd64"),
            },
        },
    }


def runtime_version(plan: NodePlan) -> str:
    """The node's ``containerRuntimeVersion``: the scenario's, else its distribution's."""
    return plan.group.container_runtime or NODE_VERSIONS[plan.group.distribution][0]


#: (containerRuntimeVersion, kubeletVersion) each distribution reports: k3s and RKE2 ship their
#: own containerd build and mark both versions (``+k3s1``, ``+rke2r1``).
NODE_VERSIONS = {
    "kubeadm": ("containerd://1.7.13", "v1.36.0"),
    "k3s": ("containerd://1.7.20-k3s1", "v1.36.0+k3s1"),
    "rke2": ("containerd://1.7.20-k3s1", "v1.36.0+rke2r1"),
}

#: What the kubelet writes for each problem (kubernetes/kubernetes pkg/kubelet/nodestatus/setters.go;
#: the node lifecycle controller's NodeStatusUnknown; the cloud route controller's NoRouteCreated),
#: and the taint TaintNodesByCondition adds for it (k8s.io/api/core/v1 well_known_taints.go).
PROBLEM_CONDITIONS: dict[str, tuple[dict[str, str], list[dict[str, str]]]] = {
    "kubelet-stopped": (
        {
            "type": "Ready",
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
        },
        [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
        ],
    ),
    "memory-pressure": (
        {
            "type": "MemoryPressure",
            "status": "True",
            "reason": "KubeletHasInsufficientMemory",
            "message": "kubelet has insufficient memory available",
        },
        [{"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}],
    ),
    "disk-pressure": (
        {
            "type": "DiskPressure",
            "status": "True",
            "reason": "KubeletHasDiskPressure",
            "message": "kubelet has disk pressure",
        },
        [{"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}],
    ),
    "pid-pressure": (
        {
            "type": "PIDPressure",
            "status": "True",
            "reason": "KubeletHasInsufficientPID",
            "message": "kubelet has insufficient PID available",
        },
        [{"key": "node.kubernetes.io/pid-pressure", "effect": "NoSchedule"}],
    ),
    "network-unavailable": (
        {
            "type": "NetworkUnavailable",
            "status": "True",
            "reason": "NoRouteCreated",
            "message": "RouteController failed to create a route",
        },
        [{"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}],
    ),
}


def node_conditions(problems: Iterable[str]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The node's conditions (Ready first) and the taints its problems add."""
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
    conditions = [ready]
    taints: list[dict[str, str]] = []
    for problem in problems:
        condition, added = PROBLEM_CONDITIONS[problem]
        if condition["type"] == "Ready":
            conditions[0] = dict(condition)
        else:
            conditions.append(dict(condition))
        taints += [dict(t) for t in added]
    return conditions, taints


def publish_health(
    node: Obj, *, plan: NodePlan, placements: dict[tuple[str, str], tuple[str, tuple[str, ...]]]
) -> None:
    """What ``gpuchain gpu-health`` publishes on the Node: GPUHealthy, the faults and who holds each GPU."""
    devices = {d.id: d for r in plan.resources for d in r.devices}
    faults: dict[str, Fault] = {}
    for d in devices.values():
        if d.gpu_index in plan.lost and d.gpu_uuid not in faults:
            faults[d.gpu_uuid] = Fault(uuid=d.gpu_uuid, gpu=d.gpu_uuid, xids=(79,), lost=True, covers=(d.gpu_uuid,))
    holders: dict[str, list[str]] = {}
    for (ns, pod), (where, ids) in sorted(placements.items()):
        if where == plan.name:
            for i in ids:
                holders.setdefault(devices[i].unit_uuid, []).append(f"{ns}/{pod}/main")
    status, reason, message = condition_for(faults)
    node["status"]["conditions"].append(
        {"type": CONDITION_TYPE, "status": status, "reason": reason, "message": message, "lastTransitionTime": STAMP}
    )
    annotations = node["metadata"].setdefault("annotations", {})
    annotations[FAULTS_ANNOTATION] = encode_faults(faults)
    annotations[PODS_ANNOTATION] = encode_pods({k: tuple(v) for k, v in holders.items()})

"""The scenario's workload pods, scheduled first-fit on the simulated nodes' GPU capacity.

Pods that fit are bound and Running (not Ready on a lost GPU or lost device rules); pods that do
not fit are Pending with kube-scheduler's message; a node with stale allocations refuses them as
the kubelet's admission does. Kept apart from the operand pods (`sim.render`), whose state comes
from the chain, not from scheduling.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuchain.kube.objects import Obj
from gpuchain.sim.chain import NodePlan
from gpuchain.sim.nodes import PROBLEM_CONDITIONS
from gpuchain.sim.scenario import Scenario
from gpuchain.sim.shapes import Rendered, pod_status, running_container, unschedulable, warning_event


def _workload_pod(namespace: str, name: str, resource: str, gpus: int, visible: str | None = None) -> Obj:
    container: dict[str, Any] = {"name": "main", "image": "nvcr.io/nvidia/cuda:12.6.0-base-ubuntu22.04"}
    if gpus:
        container["resources"] = {"limits": {resource: str(gpus)}}
    if visible is not None:
        container["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": visible}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name.rsplit("-", 1)[0]}},
        "spec": {
            "restartPolicy": "Always",
            "containers": [container],
        },
    }


def place_workloads(scenario: Scenario, *, plans: list[NodePlan], out: Rendered) -> list[Obj]:
    """First-fit scheduling on capacity as it was before any GPU fell off the bus."""
    # A node whose kubelet dropped the plugin offers nothing; one under a problem taint takes no new pod.
    free: dict[str, dict[str, list[str]]] = {
        p.name: {r.name: [d.id for d in r.devices] for r in p.resources}
        if p.registered and not p.group.node_problems
        else {}
        for p in plans
    }
    tainted = {
        p.name: PROBLEM_CONDITIONS[p.group.node_problems[0]][1][0]["key"] for p in plans if p.group.node_problems
    }
    gpu_of = {p.name: {d.id: d.gpu_index for r in p.resources for d in r.devices} for p in plans}
    lost = {p.name: p.lost for p in plans}
    rules_lost = {p.name for p in plans if p.group.lost_device_rules}
    stale = {p.name for p in plans if p.group.stale_allocations}
    pods: list[Obj] = []
    for w in scenario.workloads:
        for i in range(w.count):
            name = f"{w.name}-{i}" if w.count > 1 else w.name
            pod = _workload_pod(w.namespace, name, w.resource, w.gpus, w.visible_devices)
            if w.gpus == 0:
                where = w.node or next((p.name for p in plans if p.gpu), plans[0].name)
                pod["spec"]["nodeName"] = where
                pod["status"] = pod_status("Running", inits=[], mains=[running_container("main")], node_ip="10.0.0.1")
                pods.append(pod)
                continue
            candidates = [w.node] if w.node else [p.name for p in plans]
            node = next((n for n in candidates if len(free[n].get(w.resource, [])) >= w.gpus), None)
            if node is None:
                # The scheduler's message: untolerated taints first, then the resource (k8s scheduler's
                # "0/N nodes are available: ..." with its reasons counted).
                reasons = Counter(
                    f"node(s) had untolerated taint {{{tainted[p.name]}: }}"
                    if p.name in tainted
                    else f"Insufficient {w.resource}"
                    for p in plans
                    if p.name in tainted or len(free[p.name].get(w.resource, [])) < w.gpus
                )
                detail = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items()))
                pod["status"] = unschedulable(f"0/{len(plans)} nodes are available: {detail}.")
            elif node in stale:
                # The scheduler placed it; the kubelet's admission refuses it (kubernetes/kubernetes#130145).
                pod["spec"]["nodeName"] = node
                message = (
                    f"Allocate failed due to requested number of devices unavailable for {w.resource}. "
                    f"Requested: {w.gpus}, Available: 0, which is unexpected"
                )
                pod["status"] = {"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": f"Pod {message}"}
                event = warning_event(
                    w.namespace,
                    involved=pod,
                    reason="UnexpectedAdmissionError",
                    message=message,
                    component="kubelet",
                    n=len(out.objects) + i,
                )
                event["source"]["host"] = node
                out.objects.append(event)
            else:
                ids = tuple(free[node][w.resource][: w.gpus])
                del free[node][w.resource][: w.gpus]
                pod["spec"]["nodeName"] = node
                hung = any(gpu_of[node][d] in lost[node] for d in ids)
                detached = node in rules_lost
                pod["status"] = pod_status(
                    "Running",
                    inits=[],
                    mains=[running_container("main", ready=not (hung or detached), restarts=3 if detached else 0)],
                    node_ip="10.0.0.1",
                )
                if detached:
                    # What the CUDA image's nvidia-smi prints once the device rules are gone
                    # (NVIDIA/nvidia-container-toolkit#48, NVIDIA/gpu-operator#485).
                    out.logs[(w.namespace, name, "main")] = "Failed to initialize NVML: Unknown Error"
                out.placements[(w.namespace, name)] = (node, ids)
            pods.append(pod)
    return pods

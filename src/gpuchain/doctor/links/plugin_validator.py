"""The GPU Operator's device-plugin validation refused at admission because the node's workloads hold every GPU.

Facts from NVIDIA/gpu-operator (cmd/nvidia-validator/main.go@a22dbf6): plugin validation first checks that the node
advertises GPUs (``validateGPUResource``) and then, while ``--with-workload`` (env ``WITH_WORKLOAD``, default true)
is on, runs a workload pod labelled ``app=nvidia-device-plugin-validator`` (validator/manifests/
plugin-workload-validation.yaml) that requests one GPU. Where pods already hold all the node's GPUs, the kubelet
rejects that pod at admission (UnexpectedAdmissionError, "Requested: 1, Available: 0") and the operator-validator
waits in plugin-validation for good: the plugin works, the validation asks for a GPU the cluster gave away. The
ClusterPolicy's ``spec.validator.plugin.env`` (Helm ``validator.plugin.env``) sets ``WITH_WORKLOAD=false``, so the
validation passes on the advertised GPUs alone."""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.model import Finding, Fix, FixOp, Severity
from gpuchain.kube.gpu_resources import node_gpu_resources, pod_gpu_requests
from gpuchain.kube.objects import Obj, name_of

#: The label and generateName prefix of the plugin validation's workload pod (cmd/nvidia-validator/main.go
#: pluginValidatorLabelValue; validator/manifests/plugin-workload-validation.yaml).
VALIDATOR_WORKLOAD = "nvidia-device-plugin-validator"
#: The env that turns its workload off (cmd/nvidia-validator/main.go, flag with-workload).
WITH_WORKLOAD = "WITH_WORKLOAD"
DONE = ("Succeeded", "Failed")


def _on_node(view: NodeView) -> tuple[Obj, ...]:
    """Every pod bound to the node, operand or not, once."""
    return tuple({id(p): p for p in (*view.pods, *view.workloads)}.values())


def _held(view: NodeView, resource: str) -> tuple[int, list[str]]:
    """How many of ``resource`` the node's live pods other than the validation's hold, and which pods."""
    count, holders = 0, []
    for pod in _on_node(view):
        if name_of(pod).startswith(f"{VALIDATOR_WORKLOAD}-") or (pod.get("status") or {}).get("phase") in DONE:
            continue
        if want := pod_gpu_requests(pod).get(resource, 0):
            count += want
            holders.append(f"{(pod.get('metadata') or {}).get('namespace')}/{name_of(pod)} ({want})")
    return count, holders


def validation_outbid(ctx: Context, view: NodeView, refused: list[Obj]) -> Finding | None:
    """The plugin validation's workload pod refused at admission on a node whose other pods hold all its GPUs; None
    where no such pod was refused, or a GPU was left free (the kubelet's count is then the fault)."""
    pod = next(
        (
            str((e.get("involvedObject") or {}).get("name", ""))
            for e in refused
            if str((e.get("involvedObject") or {}).get("name", "")).startswith(f"{VALIDATOR_WORKLOAD}-")
        ),
        "",
    )
    if not pod or ctx.policy_obj is None:
        return None
    allocatable = node_gpu_resources(view.node, "allocatable")
    # the validation asks for one of the resource the plugin advertises (its manifest's limits: 1)
    resource = next((r for r, n in allocatable.items() if n), "")
    held, holders = _held(view, resource)
    if not resource or held < allocatable[resource]:
        return None
    env = [
        e
        for e in (((ctx.policy_obj.get("spec") or {}).get("validator") or {}).get("plugin") or {}).get("env") or []
        if e.get("name") != WITH_WORKLOAD
    ]
    action = Fix(
        FixOp.PATCH_POLICY,
        ctx.policy_name,
        {"spec": {"validator": {"plugin": {"env": [*env, {"name": WITH_WORKLOAD, "value": "false"}]}}}},
    )
    return node_finding(
        view,
        fid="device-plugin.validation-outbid",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=f"the GPU Operator's device-plugin validation runs a workload pod ({pod}) that needs a free "
        f"{resource}, and the node's pods hold all {allocatable[resource]}: the kubelet refuses it at admission and "
        "plugin validation never completes, although the plugin advertises the GPUs.",
        evidence=[
            f"pod {pod} (app={VALIDATOR_WORKLOAD}) refused: UnexpectedAdmissionError",
            f"status.allocatable {resource}: {allocatable[resource]}; held by {', '.join(holders[:5])}",
        ],
        fix=ctx.stack.render(action) + f"   # validator.plugin.env {WITH_WORKLOAD}=false: plugin validation checks "
        "that the GPUs are advertised and runs no workload; the failed validator pod is replaced",
        action=action,
    )

"""A GPU node left without any device plugin because the stack's policy switched its own off.

The GPU Operator renders the nvidia-device-plugin DaemonSet only while ClusterPolicy spec.devicePlugin.enabled is
true; patched to false, it deletes the DaemonSet, and the kubelet keeps the resource its plugin had registered at 0
(``nvidia.com/gpu: 0`` in capacity and allocatable) while every other operand, and the policy's ready state, stay as
they were. Where no other device plugin runs on the node and its node image announces none, nothing offers its GPUs:
a GPU pod waits on "Insufficient nvidia.com/gpu" although the driver, toolkit, GFD and exporter all work. The repair
is the policy's switch (and the Helm value that sets it, so an upgrade keeps it), not capacity.
"""

from __future__ import annotations

from typing import cast

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding, opted_out
from gpuchain.doctor.links.dra_plugin import dra_served
from gpuchain.doctor.model import Fix, FixOp, LinkState, Severity
from gpuchain.doctor.pods import unschedulable_message
from gpuchain.kube.gpu_resources import node_gpu_resources, pod_gpu_requests
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN, enabled


def _waiting(ctx: Context) -> list[str]:
    """The Pending GPU pods the scheduler keeps off for want of a GPU resource (``namespace/name``), listed once per
    diagnosis (`Context.memo`): every GPU node without a plugin asks."""
    if "waiting_for_gpus" not in ctx.memo:
        ctx.memo["waiting_for_gpus"] = [
            f"{namespace_of(p)}/{name_of(p)}"
            for p in ctx.pending
            if "Insufficient nvidia.com/" in (unschedulable_message(p) or "") and pod_gpu_requests(p)
        ]
    return list(cast("list[str]", ctx.memo["waiting_for_gpus"]))


def disabled_in_policy(ctx: Context, view: NodeView) -> Result | None:
    """``view``'s node offers no GPU, runs no device plugin, and the stack's policy has its device plugin switched
    off (not opted out by the node's own label): an error where GPU pods wait for GPUs, a warning otherwise; the DRA
    kubelet plugin's link where that plugin serves the node's GPUs instead (`dra_served`). None where any of that is
    not so."""
    if ctx.policy_obj is None or enabled(ctx.policy, DEVICE_PLUGIN) or opted_out(view, DEVICE_PLUGIN):
        return None
    if view.pod(DEVICE_PLUGIN) is not None:
        return None
    capacity = node_gpu_resources(view.node)
    if any(count > 0 for count in capacity.values()):
        return None  # another plugin (the node image's, a chart of its own) announces the GPUs
    served = dra_served(ctx, view, DEVICE_PLUGIN)
    if served is not None:
        return served
    waiting = _waiting(ctx)
    key = DEVICE_PLUGIN.spec_key
    action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {key: {"enabled": True}}})
    shown = ", ".join(f"{k}: {v}" for k, v in sorted(capacity.items())) or "none"
    finding = node_finding(
        view,
        fid="device-plugin.disabled-in-policy",
        sev=Severity.ERROR if waiting else Severity.WARNING,
        link="device-plugin",
        cause=f"{ctx.policy_ref} switches the device plugin off (spec.{key}.enabled: false), so the operator runs no "
        "device plugin DaemonSet and no other plugin runs on this GPU node: its GPUs are offered to no pod, although "
        "the layers below and beside the plugin work.",
        evidence=[
            f"{ctx.policy_ref}: spec.{key}.enabled false",
            f"no device plugin pod on {view.name}; GPU resources in capacity: {shown}",
            f"pods waiting for GPUs: {', '.join(waiting[:5])}" if waiting else "",
        ],
        fix=ctx.stack.render(action) + f"   # enable the device plugin again ({key}.enabled=true in the Helm values "
        "of the operator's release too, so an upgrade keeps it); the operator recreates its DaemonSet",
        action=action,
    )
    state = LinkState.BROKEN if waiting else LinkState.DEGRADED
    return Result(state, "device plugin switched off in the policy", (finding,))

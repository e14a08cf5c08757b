"""MIG left on a node after the MIG manager was switched off (NVIDIA/gpu-operator#701).

Switching the MIG manager off (``migManager.enabled: false``) changes nothing on the GPUs: MIG mode and the carved
instances stay, so the device plugin keeps announcing ``nvidia.com/mig-*`` devices and no whole ``nvidia.com/gpu``.
The maintainers' answer in #701: "To disable MIG you can set this label to `all-disabled` and
`nvidia.com/mig.config.state` will indicate the result" - which only a running MIG manager acts on; switch it off
afterwards if wanted. The fault shows where pods that ask for whole GPUs and select the node wait on Insufficient
``nvidia.com/gpu``: without them a node kept in MIG on purpose looks the same and is healthy.
"""

from __future__ import annotations

from gpuchain.common.labels import MIG_CONFIG
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.model import Finding, Fix, FixOp, Severity
from gpuchain.doctor.pods import unschedulable_message
from gpuchain.kube.gpu_resources import node_gpu_resources, pod_gpu_requests
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import MIG_MANAGER

WHOLE = "nvidia.com/gpu"
#: The layout name under which the MIG manager takes every GPU out of MIG mode.
ALL_DISABLED = "all-disabled"


def _selects(pod: Obj, view: NodeView) -> bool:
    """Does the pod ask for this node: by name, or by a node selector the node's labels meet?"""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return bool(spec["nodeName"] == view.name)
    selector = spec.get("nodeSelector") or {}
    return bool(selector) and all(view.labels.get(k) == v for k, v in selector.items())


def mig_left_on(ctx: Context, view: NodeView) -> Finding | None:
    """The node keeps a MIG layout (announces MIG devices, no whole GPU) while the policy has the MIG manager off,
    and pods that select it wait for whole GPUs: the layout is left from before the manager was switched off, and
    only the manager, run again with ``all-disabled``, takes it back."""
    wanted = view.labels.get(MIG_CONFIG)
    # Where the source has no ClusterPolicy, the operator's own doing says the switch: it deletes the DaemonSet of a
    # state the policy disables (NVIDIA/gpu-operator controllers/object_controls.go@v25.3.4 DaemonSet, which
    # deletes the object and returns Disabled where the state is not enabled), so no MIG manager DaemonSet is it off.
    if ctx.deploys(MIG_MANAGER) or not wanted or wanted == ALL_DISABLED:
        return None
    announced = {k: v for k, v in node_gpu_resources(view.node).items() if v > 0}
    if announced.get(WHOLE) or not any(k.startswith("nvidia.com/mig-") for k in announced):
        return None
    waiting = [
        p
        for p in ctx.pending
        if WHOLE in pod_gpu_requests(p)
        and f"Insufficient {WHOLE}" in (unschedulable_message(p) or "")
        and _selects(p, view)
    ]
    if not waiting:
        return None
    relabel = Fix(FixOp.LABEL_NODE, view.name, {MIG_CONFIG: ALL_DISABLED})
    manager = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"migManager": {"enabled": True}}})
    return node_finding(
        view,
        fid="mig.left-on",
        sev=Severity.ERROR,
        link="mig",
        cause=(
            f"the MIG manager is switched off in the policy, but the node's GPUs keep the {wanted} layout: switching "
            "the manager off leaves MIG mode and its instances on the GPUs, so the node announces MIG devices and no "
            f"whole GPU, and the pods that ask it for {WHOLE} wait."
        ),
        evidence=[
            f"{MIG_CONFIG}={wanted}; "
            + (
                f"no {ctx.ds(MIG_MANAGER)} DaemonSet (the operator deletes it where migManager.enabled is false)"
                if ctx.policy_unknown or ctx.stack.policy_inferred
                else "migManager.enabled false"
            ),
            "node capacity: " + ", ".join(f"{k}: {v}" for k, v in sorted(announced.items())),
            "Pending on Insufficient nvidia.com/gpu: "
            + ", ".join(f"{p['metadata'].get('namespace')}/{p['metadata']['name']}" for p in waiting[:4]),
        ],
        fix=ctx.stack.render(manager)
        + " && "
        + ctx.stack.render(relabel)
        + "   # the MIG manager takes the GPUs out of MIG; wait for nvidia.com/mig.config.state=success, then switch "
        "it off again if wanted",
        action=relabel,
    )

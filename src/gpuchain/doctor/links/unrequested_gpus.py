"""Pods that ask for no GPU and still get the node's GPUs from the NVIDIA runtime.

The NVIDIA runtime hook injects the GPUs NVIDIA_VISIBLE_DEVICES names into any container that sets it, whether or
not the device plugin allocated them: CUDA base images set it to ``all``, so a pod with no ``nvidia.com/gpu`` (or a
request of "0") sees and uses every GPU of the node, including those the plugin gave other pods. The toolkit closes
it with ``accept-nvidia-visible-devices-envvar-when-unprivileged = false`` in its config.toml (unprivileged
containers' NVIDIA_VISIBLE_DEVICES ignored; NVIDIA/nvidia-container-toolkit internal/config/config.go
AcceptEnvvarUnprivileged, the GPU Operator's toolkit env ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED),
which needs the plugin to hand GPU pods their list another way: ``deviceListStrategy`` volume-mounts with
``accept-nvidia-visible-devices-as-volume-mounts = true`` (k8s-device-plugin README "deviceListStrategy"), or CDI.
Per pod, NVIDIA_VISIBLE_DEVICES=void (or none) in a pod that requests no GPU keeps the runtime from injecting any.
"""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.links.kai_sharing import kai_share, reserved_groups
from gpuchain.doctor.links.unallocated_gpu import limit_ops
from gpuchain.doctor.links.unprivileged_envvar import ignores_envvar
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.pods import pod_state
from gpuchain.doctor.scheduling import owner_of, resources_fix
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj

ACCEPT_ENVVAR = "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED"
#: The toolkit's config.toml key the env above writes, and the one that lets the runtime read a volume-mount list.
ACCEPT_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
AS_MOUNTS_ENV, AS_MOUNTS_KEY = (
    "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS",
    "accept-nvidia-visible-devices-as-volume-mounts",
)
#: NVIDIA_VISIBLE_DEVICES values with which the runtime injects no GPU.
NO_GPU = (None, "", "void", "none")


def visible_devices(pod: Obj) -> str | None:
    """The NVIDIA_VISIBLE_DEVICES a pod's containers set (the first), None where none sets it."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        for env in c.get("env") or []:
            if env.get("name") == "NVIDIA_VISIBLE_DEVICES":
                return str(env.get("value", ""))
    return None


def _setting(pod: Obj) -> set[str]:
    """The containers of ``pod`` that set NVIDIA_VISIBLE_DEVICES (the ones the runtime gives GPUs)."""
    return {
        str(c.get("name"))
        for c in (pod.get("spec") or {}).get("containers") or []
        if any(e.get("name") == "NVIDIA_VISIBLE_DEVICES" for e in c.get("env") or [])
    }


def _ref(pod: Obj) -> str:
    return f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"


def _fix(ctx: Context, view: NodeView) -> Fix:
    """The toolkit's setting where the runtime is set: the ClusterPolicy's toolkit env (with the plugin's volume-mounts
    list, so GPU pods keep theirs), else the node's config.toml."""
    if ctx.policy_obj is not None:
        env = [
            *(
                {"name": e.name, "value": e.value}
                for e in ctx.policy.toolkit.env
                if e.name not in (ACCEPT_ENVVAR, AS_MOUNTS_ENV)
            ),
            {"name": ACCEPT_ENVVAR, "value": "false"},
            {"name": AS_MOUNTS_ENV, "value": "true"},
        ]
        plugin = [
            *(
                {"name": e.name, "value": e.value}
                for e in ctx.policy.device_plugin.env
                if e.name != "DEVICE_LIST_STRATEGY"
            ),
            {"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"},
        ]
        return Fix(
            FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"toolkit": {"env": env}, "devicePlugin": {"env": plugin}}}
        )
    return Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"set {ACCEPT_KEY} = false and {AS_MOUNTS_KEY} = true in "
            "/etc/nvidia-container-runtime/config.toml, and the device plugin's deviceListStrategy to "
            "volume-mounts (DEVICE_LIST_STRATEGY=volume-mounts), so only the GPUs the plugin allocates reach a "
            "container; until then set NVIDIA_VISIBLE_DEVICES=void in the pods that request no nvidia.com/gpu; "
            "then recreate those pods",
            "drain": False,
            NOT_SIMULATED: "the node's container runtime config is not a scenario fact",
        },
    )


def gpus_without_request(ctx: Context, view: NodeView, apps: list[Obj]) -> Finding | None:
    """Pods on the node that request no GPU and set NVIDIA_VISIBLE_DEVICES, under a runtime that honours it: an error
    where the plugin has given the node's GPUs to other running pods (those pods' GPUs are shared with pods the
    scheduler and the plugin do not count), a warning where none holds one yet."""
    if ctx.policy_unknown or ignores_envvar(ctx, view):
        return None
    # KAI's fraction pods see the GPU its reservation pod on this node requests and holds for them: counted, shared.
    groups = reserved_groups(view.workloads)
    seeing = [
        p
        for p in apps
        if not pod_gpu_requests(p) and visible_devices(p) not in NO_GPU and not (groups and kai_share(p, groups))
    ]
    if not seeing:
        return None
    holders = [_ref(p) for p in apps if pod_gpu_requests(p) and pod_state(p).status.startswith("Running")]
    if not holders and len(seeing) > 1:
        return _contending(ctx, view, seeing)
    action = _fix(ctx, view)
    shared = (
        f"; the device plugin has given this node's GPUs to {', '.join(holders[:3])}, so those GPUs are used by pods "
        "nothing counts"
        if holders
        else ""
    )
    fix = ctx.stack.render(action)
    if action.op is FixOp.PATCH_POLICY:
        fix += (
            f"   # the toolkit writes {ACCEPT_KEY} = false and {AS_MOUNTS_KEY} = true into its config.toml; until "
            "then set NVIDIA_VISIBLE_DEVICES=void in the pods that request no nvidia.com/gpu"
        )
    return node_finding(
        view,
        fid="workload.gpu-without-request",
        sev=Severity.ERROR if holders else Severity.WARNING,
        link="toolkit",
        cause="pods that ask for no GPU set NVIDIA_VISIBLE_DEVICES, and the NVIDIA runtime honours it in unprivileged "
        f"containers ({ACCEPT_KEY} is not false), so it gives them GPUs the scheduler and the device plugin do not "
        f"know are in use (CUDA base images set it to all){shared}.",
        evidence=[
            "pods requesting no nvidia.com/gpu: "
            + ", ".join(f"{_ref(p)} (NVIDIA_VISIBLE_DEVICES={visible_devices(p)})" for p in seeing[:5]),
            *([f"GPU pods running on the node: {', '.join(holders[:5])}"] if holders else []),
            f"{ACCEPT_ENVVAR} is not false in the toolkit's env",
        ],
        fix=fix,
        action=action,
    )


def _contending(ctx: Context, view: NodeView, seeing: list[Obj]) -> Finding:
    """Several pods that request no GPU see the node's GPUs, and no pod holds one from the device plugin: the GPUs
    are used only outside the plugin, every such pod on the same GPUs, with nothing (scheduler, plugin) keeping them
    apart. The toolkit's setting would take the GPUs from the only pods that use them; the repair is in the pods:
    each asks the plugin for its GPU (``nvidia.com/gpu`` in its limits), so the plugin hands each its own device
    and the scheduler counts them."""
    owners = {owner_of(p).ref: p for p in seeing}
    fixes = [resources_fix(owner_of(p), limit_ops(p, owner_of(p).kind, _setting(p))) for p in owners.values()]
    return node_finding(
        view,
        fid="workload.gpu-without-request",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=(
            f"{len(seeing)} pods that request no nvidia.com/gpu set NVIDIA_VISIBLE_DEVICES to GPUs the runtime gives "
            "them, and none holds a GPU from the device plugin: they all use the same GPUs, which the scheduler and "
            "the plugin count as free, so they contend for the GPUs' memory and compute."
        ),
        evidence=[
            "pods requesting no nvidia.com/gpu: "
            + ", ".join(f"{_ref(p)} (NVIDIA_VISIBLE_DEVICES={visible_devices(p)})" for p in seeing[:5]),
            "no pod on the node holds a GPU from the device plugin",
        ],
        fix=ctx.stack.render(fixes[0])
        + "   # nvidia.com/gpu: 1 in the limits of each container that sets NVIDIA_VISIBLE_DEVICES, so the device "
        "plugin gives each pod a GPU of its own"
        + (f"; the same for {', '.join(f.target for f in fixes[1:4])}" if len(fixes) > 1 else ""),
        action=fixes[0],
    )

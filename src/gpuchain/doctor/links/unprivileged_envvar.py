"""A GPU component that finds no GPU because the node's NVIDIA runtime ignores NVIDIA_VISIBLE_DEVICES in an
unprivileged container. Monitoring operands (dcgm-exporter) ask for no nvidia.com/gpu and see the node's GPUs through
NVIDIA_VISIBLE_DEVICES=all; a runtime with accept-nvidia-visible-devices-envvar-when-unprivileged = false
(Bottlerocket's NVIDIA variants by default since 1.19.2, or a toolkit configured so) injects no GPU into a container
that is neither privileged nor holds CAP_SYS_ADMIN, so NVML finds nothing and the component exits. The repair is the
container's capability (or the runtime's setting), not the driver or the toolkit's install."""

from __future__ import annotations

import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp
from gpuchain.doctor.node import node_info
from gpuchain.doctor.owners import owner_ds
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj, namespace_of

#: Bottlerocket's NVIDIA variants as their osImage names them; GPUs are injected as volume mounts, and the envvar of
#: an unprivileged container ignored, from 1.19.2 ("Enable NVIDIA GPU isolation using volume mounts",
#: bottlerocket-os/bottlerocket CHANGELOG.md@v1.19.5, #3718).
BOTTLEROCKET_NVIDIA = re.compile(r"^Bottlerocket OS (\d+)\.(\d+)\.(\d+) \([^)]*-nvidia\)")
FIRST_ISOLATING = (1, 19, 2)
#: The toolkit's own switch for it, where the GPU Operator's toolkit sets it (NVIDIA/nvidia-container-toolkit
#: cmd/nvidia-ctk-installer/toolkit/toolkit.go: the env of accept-nvidia-visible-devices-envvar-when-unprivileged).
TOOLKIT_ENV = "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED"
#: What a component says when NVML finds no GPU or cannot start (the catalog's entries).
NO_NVML = (
    "dcgm.init-error",
    "dcgm-exporter.nvml-init",
    "dcgm-exporter.nvml-init-3x",
    "dcgm-exporter.collector-no-gpu",
    "k8s-device-plugin.nvml-init-failed",
    "k8s-device-plugin.nvml-init-failed-exit",
    "nvml.library-not-found",
    "go-nvlib.nvml-not-loaded",
)


def ignores_envvar(ctx: Context, view: NodeView) -> str:
    """Why this node's runtime ignores NVIDIA_VISIBLE_DEVICES in unprivileged containers ("" when it does not)."""
    image = node_info(view.node).get("osImage", "")
    found = BOTTLEROCKET_NVIDIA.match(image)
    if found and tuple(int(g) for g in found.groups()) >= FIRST_ISOLATING:
        return f"osImage {image}"
    env = ((ctx.policy_obj or {}).get("spec") or {}).get("toolkit", {}).get("env") or []
    if any(e.get("name") == TOOLKIT_ENV and str(e.get("value")).lower() == "false" for e in env):
        return f"ClusterPolicy spec.toolkit.env {TOOLKIT_ENV}=false"
    return ""


def _privileged(container: Obj) -> bool:
    security = container.get("securityContext") or {}
    return bool(security.get("privileged")) or "SYS_ADMIN" in ((security.get("capabilities") or {}).get("add") or [])


def unprivileged_gpu(ctx: Context, *, view: NodeView, pod: Obj, log: str) -> Known | None:
    """``pod``'s container that asks for no GPU, is neither privileged nor holds SYS_ADMIN, and says NVML found
    nothing, on a node whose runtime ignores NVIDIA_VISIBLE_DEVICES for such a container; None otherwise."""
    found = catalog.find(log, *NO_NVML)
    why = ignores_envvar(ctx, view) if found is not None else ""
    containers = (pod.get("spec") or {}).get("containers") or []
    if found is None or not why or not containers or pod_gpu_requests(pod):
        return None
    container = containers[0]
    if _privileged(container):
        return None
    name = str(container.get("name", ""))
    cause = (
        f"the {name} container asks for no nvidia.com/gpu and relies on NVIDIA_VISIBLE_DEVICES to see the node's GPUs, "
        "but this node's NVIDIA runtime ignores that variable in a container that is neither privileged nor holds "
        "CAP_SYS_ADMIN, so no GPU is injected and NVML finds none."
    )
    bottlerocket = why.startswith("osImage")
    if namespace_of(pod) == ctx.namespace and ctx.policy_obj is not None:
        # The operator renders this container and restores a patched DaemonSet: the runtime's setting is the repair.
        if bottlerocket:
            action = Fix(
                FixOp.NODE,
                view.name,
                {
                    "action": "apiclient set nvidia-container-runtime.visible-devices-envvar-when-unprivileged=true "
                    "(from the admin container; for new nodes, visible-devices-envvar-when-unprivileged = true under "
                    "[settings.nvidia-container-runtime] in the node group's user data)",
                    NOT_SIMULATED: "a Bottlerocket setting of the node",
                    "drain": False,
                },
            )
        else:
            env = [
                {**e, "value": "true"} if e.get("name") == TOOLKIT_ENV else e
                for e in (ctx.policy_obj.get("spec") or {}).get("toolkit", {}).get("env") or []
            ]
            action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"toolkit": {"env": env}}})
        return Known(cause=cause, evidence=(why, *found.evidence()), action=action, fix=ctx.stack.render(action))
    security = container.get("securityContext") or {}
    added = [*((security.get("capabilities") or {}).get("add") or []), "SYS_ADMIN"]
    grant = {"name": name, "securityContext": {"capabilities": {"add": added}}}
    action = Fix(
        FixOp.PATCH_DAEMONSET,
        f"{namespace_of(pod) or ctx.namespace}/{owner_ds(pod)}",
        {"spec": {"template": {"spec": {"containers": [grant]}}}},
    )
    setting = (
        "   # or let unprivileged containers use the variable again on the node: apiclient set "
        "nvidia-container-runtime.visible-devices-envvar-when-unprivileged=true"
        if bottlerocket
        else f"   # or set {TOOLKIT_ENV}=true in ClusterPolicy spec.toolkit.env"
    )
    return Known(
        cause=cause,
        evidence=(why, *found.evidence()),
        action=action,
        fix=ctx.stack.render(action) + setting + " (and securityContext.capabilities.add in its Helm values)",
    )

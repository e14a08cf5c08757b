"""A device plugin DaemonSet of the user's on nodes whose OS runs NVIDIA's device plugin itself.

Bottlerocket's NVIDIA variants (``aws-k8s-<version>-nvidia``; osImage "Bottlerocket OS <release>
(aws-k8s-<version>-nvidia)") ship the driver, the NVIDIA runtime and NVIDIA's k8s-device-plugin as a host service of
the OS, configured through its settings (settings.kubelet-device-plugins.nvidia; bottlerocket-os/bottlerocket
packages/nvidia-k8s-device-plugin). The node announces its GPUs through that service; a plugin DaemonSet installed
beside it (a chart's, a blueprint's) is a second plugin for the same GPUs: its container does not get the host's
libraries and crash-loops, while the node's GPUs stay announced (awslabs/ai-on-eks#78, repaired by not scheduling
the chart's plugin there, awslabs/ai-on-eks#324). The repair is the DaemonSet kept off those nodes, never the driver.
"""

from __future__ import annotations

import re

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.links.device_plugin import check_device_plugin
from gpuchain.doctor.links.gsp_xid import check_driver_and_gsp
from gpuchain.doctor.model import Fix, FixOp, LinkState, Severity
from gpuchain.doctor.node import node_info
from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.pods import pod_state
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN

#: The osImage of a Bottlerocket NVIDIA variant, whose OS runs NVIDIA's device plugin as a host service.
HOST_PLUGIN_OS = re.compile(r"^Bottlerocket OS .*\(aws-k8s-[\d.]+-nvidia\)", re.IGNORECASE)
#: Node labels that name a node's pool on EKS (Karpenter's, managed node groups', eksctl's), for an affinity.
POOL_LABELS = ("karpenter.sh/nodepool", "eks.amazonaws.com/nodegroup", "alpha.eksctl.io/nodegroup-name")


def host_plugin(node: Obj) -> bool:
    """Whether ``node``'s OS runs NVIDIA's device plugin itself and it announces GPUs."""
    return bool(HOST_PLUGIN_OS.search(node_info(node).get("osImage", ""))) and any(node_gpu_resources(node).values())


def check_driver_under_host_plugin(ctx: Context, view: NodeView) -> Result:
    """The driver link, answered by the OS's own plugin where it announces the node's GPUs."""
    if host_plugin(view.node):
        return Result(
            LinkState.OK,
            f"the node image's driver ({node_info(view.node).get('osImage')}: its own plugin announces the GPUs)",
        )
    return check_driver_and_gsp(ctx, view)


def _affinity(ctx: Context, view: NodeView) -> tuple[str, list[str]] | None:
    """A pool label of this node and its values on every node whose OS runs its own plugin; None where none has one."""
    key = next((k for k in POOL_LABELS if k in labels_of(view.node)), None)
    if key is None:
        return None
    values = sorted({labels_of(n)[key] for n in ctx.snapshot.nodes if host_plugin(n) and key in labels_of(n)})
    return key, values


def check_plugin_beside_host_plugin(ctx: Context, view: NodeView) -> Result:
    """The device plugin link: a failing plugin DaemonSet pod on a node whose OS runs its own plugin is a second
    plugin there, kept off such nodes; the plugin's own check everywhere else."""
    pod = view.pod(DEVICE_PLUGIN)
    if pod is None or not host_plugin(view.node) or not pod_state(pod).failing:
        return check_device_plugin(ctx, view)
    ns, ds = namespace_of(pod) or ctx.namespace, owner_ds(pod) or ctx.ds(DEVICE_PLUGIN)
    pool = _affinity(ctx, view)
    action = None
    if pool is not None:
        term = {"matchExpressions": [{"key": pool[0], "operator": "NotIn", "values": pool[1]}]}
        required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        action = Fix(
            FixOp.PATCH_DAEMONSET,
            f"{ns}/{ds}",
            {"spec": {"template": {"spec": {"affinity": {"nodeAffinity": required}}}}},
        )
    keep_off = (
        ctx.stack.render(action) + "   # keeps the DaemonSet off the Bottlerocket nodes (add the term to the "
        "affinity its chart renders, in the Helm release's values)"
        if action is not None
        else f"# exclude the Bottlerocket GPU nodes from DaemonSet {ns}/{ds} with a node affinity or nodeSelector on "
        "a label only they (or only the others) carry"
    )
    fix = keep_off + "; or uninstall the chart's device plugin where every GPU node runs Bottlerocket"
    finding = node_finding(
        view,
        fid="device-plugin.beside-host-plugin",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=f"this node's OS ({node_info(view.node).get('osImage')}) runs NVIDIA's device plugin itself, which "
        f"announces its GPUs; DaemonSet {ns}/{ds} runs a second plugin here, which fails beside it.",
        evidence=[
            f"osImage {node_info(view.node).get('osImage')}: Bottlerocket's NVIDIA variant, device plugin built in",
            f"node capacity: {', '.join(f'{k}={v}' for k, v in node_gpu_resources(view.node).items())}",
            f"pod {name_of(pod)}: {pod_state(pod).describe()}",
        ],
        fix=fix,
        action=action,
    )
    return Result(LinkState.BROKEN, "a second device plugin beside the OS's own", (finding,))

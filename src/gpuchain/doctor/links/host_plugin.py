"""The driver link on nodes whose OS runs NVIDIA's device plugin itself (Bottlerocket's NVIDIA variants, see
doctor/bottlerocket.py) and announces their GPUs: the node image's driver answers there, through the OS's own plugin,
so no driver container or host install is looked for, and a plugin DaemonSet failing beside it is never read as the
driver missing from the node image (awslabs/ai-on-eks#78)."""

from __future__ import annotations

from gpuchain.doctor.bottlerocket import host_plugin_node
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result
from gpuchain.doctor.links.xid_events import check_driver_and_kernel
from gpuchain.doctor.model import LinkState
from gpuchain.doctor.node import node_info
from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.pods import pod_state
from gpuchain.doctor.stacks.base import runs_nvidia_plugin
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import Obj


def plugin_beside(view: NodeView) -> bool:
    """Does a ready pod of NVIDIA's device plugin that no DaemonSet owns run on the node while the node announces
    allocatable GPUs? K2s' gpu-node addon ran its plugin as a Deployment before its move to CDI (Siemens-Healthineers/
    K2s#1862, addons/gpu-node/manifests/nvidia-device-plugin.yaml): a plugin serves the node, no stack is missing."""
    if not any(n > 0 for n in node_gpu_resources(view.node, "allocatable").values()):
        return False
    return any(runs_nvidia_plugin(p) and not owner_ds(p) and pod_state(p).ready for p in view.workloads)


def announcing_host_plugin(node: Obj) -> bool:
    """Whether ``node``'s OS runs NVIDIA's device plugin itself and it announces GPUs."""
    return host_plugin_node(node) and any(node_gpu_resources(node).values())


def check_driver_under_host_plugin(ctx: Context, view: NodeView) -> Result:
    """The driver link, answered by the OS's own plugin where it announces the node's GPUs."""
    if announcing_host_plugin(view.node):
        return Result(
            LinkState.OK,
            f"the node image's driver ({node_info(view.node).get('osImage')}: its own plugin announces the GPUs)",
        )
    return check_driver_and_kernel(ctx, view)

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
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import Obj


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

"""Bottlerocket's NVIDIA variants (``aws-k8s-<version>-nvidia``): the node image runs NVIDIA's device plugin itself,
as the host service ``nvidia-k8s-device-plugin`` (bottlerocket-os/bottlerocket-core-kit packages/
nvidia-k8s-device-plugin, configured by the ``settings.kubelet-device-plugins`` API), so the cluster needs no plugin
DaemonSet for these nodes, and a DaemonSet's plugin on them registers the same resource beside the host's.

Such a node that announces no GPU is the host service not registered with the kubelet, not a GPU stack missing from
the cluster: its repair is on the node (restart the service from the admin container, replace the node) and in the
node group's Bottlerocket release, which carries the service's fixes (its start order against the kubelet's socket,
bottlerocket-core-kit#228)."""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import gpus_present
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.node import node_info
from gpuchain.doctor.node_image import EKS_POOL
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import labels_of

SERVICE = "nvidia-k8s-device-plugin"


def host_plugin(view: NodeView) -> bool:
    """Does the node's image run the device plugin itself (a Bottlerocket NVIDIA variant)?"""
    image = str(node_info(view.node).get("osImage", ""))
    return image.startswith("Bottlerocket OS") and "nvidia" in image.lower()


def unregistered(ctx: Context, views: list[NodeView]) -> list[Finding]:
    """For each node whose Bottlerocket image runs the plugin and whose capacity announces no GPU: the host service
    not registered, with the node's repair and the node group's update."""
    out = []
    for view in views:
        if not host_plugin(view) or any(n > 0 for n in node_gpu_resources(view.node).values()):
            continue
        image = str(node_info(view.node).get("osImage", ""))
        group = labels_of(view.node).get(EKS_POOL) or "<node group>"
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": f"restart the image's device plugin service: from the node's admin container (sudo "
                f"sheltie) systemctl restart {SERVICE}.service, or replace the node; then update node group {group} "
                "to the newest Bottlerocket release (aws eks update-nodegroup-version --cluster-name <cluster> "
                f"--nodegroup-name {group}), whose plugin service carries its fixes",
                "drain": False,
                NOT_SIMULATED: "a host service of the node image is not simulated",
            },
        )
        present = gpus_present(view)
        out.append(
            Finding(
                id="device-plugin.not-registered",
                severity=Severity.ERROR,
                link="device-plugin",
                node=view.name,
                cause=f"the node runs {image}, whose image runs NVIDIA's device plugin itself (the host service "
                f"{SERVICE}, no DaemonSet), and its capacity announces no GPU: that service is not registered with "
                "the kubelet (as when it starts before the kubelet's device-plugin socket and misses it); no GPU stack "
                "is missing from the cluster.",
                evidence=tuple(
                    e
                    for e in (
                        f"osImage {image}",
                        "capacity: no nvidia.com/gpu (or 0)",
                        f"GPUs present: {present}" if present else "",
                        "no device plugin DaemonSet in the cluster",
                    )
                    if e
                ),
                fix=ctx.stack.render(action),
                root=True,
                action=action,
            )
        )
    return out

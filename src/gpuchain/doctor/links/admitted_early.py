"""A GPU pod running without its GPU on a node whose runtime does inject the driver: the kubelet admitted it without
the device plugin's allocation.

The kubelet's device manager hands a container its devices at admission, from the plugin's Allocate answer (the
environment, mounts and device nodes the NVIDIA runtime acts on), and remembers them in its checkpoint
(/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint). A pod the kubelet admits again while no plugin for
the resource is registered -- after a reboot or a kubelet restart that lost that checkpoint, before the plugin's pod
is back -- starts with no allocation, and the kubelet does not allocate again for a container that runs
(kubernetes/kubernetes pkg/kubelet/cm/devicemanager/manager.go@v1.34.4, allocateContainerResources and the
checkpoint it restores at start). Such a container has no GPU and no driver library, and what tells it from a
runtime that injects nothing is the device plugin's own pod beside it: asking for no RuntimeClass, it found NVML and
registered (its own log says so: "Registered device plugin for '%s' with Kubelet", NVIDIA/k8s-device-plugin
internal/plugin/server.go@v0.17.1), so the node's default runtime injects the driver where a container is given a
GPU. A plugin pod that is merely ready proves less: it may get the driver some other way (host mounts). Deleting the
pod has its controller create it again, and the kubelet admits the new one through the registered plugin.
"""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding, operand_log
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, Severity
from gpuchain.doctor.pods import pod_state
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN

#: The plugin's own line once the kubelet took its registration (catalog.yaml): it found NVML, so its container got
#: the driver from the node's runtime.
REGISTERED = "k8s-device-plugin.registered"


def admitted_without_device(ctx: Context, *, view: NodeView, hit: list[Obj], said: catalog.Match) -> Finding | None:
    """The finding for GPU pods ``hit`` that say they have no driver (``said``) where the device plugin's pod on the
    same node runs ready with no RuntimeClass and the node offers GPUs: the default runtime gives containers the
    driver, so these were started without the plugin's allocation. None where the plugin asks for a RuntimeClass
    (the operator's), is not ready, its log does not show its registration, or the node offers no GPU: then the
    runtime is what the pods lack."""
    plugin = view.pod(DEVICE_PLUGIN)
    if plugin is None or (plugin.get("spec") or {}).get("runtimeClassName") or not pod_state(plugin).ready:
        return None
    offered = {k: v for k, v in node_gpu_resources(view.node, "allocatable").items() if v > 0}
    state = pod_state(plugin)
    registered = catalog.find(
        operand_log(ctx, view=view, operand=DEVICE_PLUGIN, container=state.container, last=""), REGISTERED
    )
    if not offered or registered is None:
        return None
    refs = [f"{namespace_of(p) or 'default'}/{name_of(p)}" for p in hit]
    first = hit[0]
    why = {NOT_SIMULATED: "a pod's device allocation is not simulated"}
    action = Fix.delete_pod(namespace_of(first) or "default", name_of(first), **why)
    more = f"; the same for {', '.join(refs[1:5])}" if len(refs) > 1 else ""
    return node_finding(
        view,
        fid="node.pod-admitted-without-device",
        sev=Severity.ERROR,
        link="node",
        cause=f"GPU pod(s) {', '.join(refs[:5])} run without their GPU and the driver library, on a node whose device "
        f"plugin, asking for no RuntimeClass, found NVML and registered: the node's default runtime injects the "
        "driver, so the kubelet started these containers without the plugin's allocation -- it admitted them while "
        "no plugin was registered (a reboot or kubelet restart that lost its device checkpoint, kubelet_internal_"
        "checkpoint, before the plugin's pod was back) and does not allocate again for a running container.",
        evidence=[
            *said.evidence("pod says"),
            f"device plugin pod {name_of(plugin)}: ready, no runtimeClassName",
            *registered.evidence("plugin log"),
            f"node {view.name} offers {', '.join(f'{k} {v}' for k, v in sorted(offered.items()))}",
        ],
        fix=f"{ctx.stack.render(action)}   # delete the affected pods so the kubelet admits them again through the "
        f"registered plugin and their controller starts them with the GPU{more}",
        action=action,
    )

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
from gpuchain.doctor.links.kubelet_defects import FINDING as KUBELET_DEFECT
from gpuchain.doctor.links.kubelet_defects import (
    gpu_failed,
    kubelet_defect,
    kubelet_fix,
    kubelet_upgrade,
    recreate_pods,
)
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, Severity
from gpuchain.doctor.node import node_info
from gpuchain.doctor.owners import runtime_class_of
from gpuchain.doctor.pods import pod_state
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN

#: The plugin's own line once the kubelet took its registration (catalog.yaml): it found NVML, so its container got
#: the driver from the node's runtime.
REGISTERED = "k8s-device-plugin.registered"


def admitted_without_device(ctx: Context, *, view: NodeView, hit: list[Obj], said: catalog.Match) -> Finding | None:
    """The finding for GPU pods ``hit`` that say they have no driver (``said``) where the device plugin's pod on the
    same node runs ready with no RuntimeClass (neither its pod nor its DaemonSet names one) and the node offers GPUs:
    the default runtime gives containers the driver, so these were started without the plugin's allocation. None where
    the plugin asks for a RuntimeClass (the operator's), is not ready, its log does not show its registration, or the
    node offers no GPU: then the runtime is what the pods lack."""
    plugin = view.pod(DEVICE_PLUGIN)
    if plugin is None or runtime_class_of(ctx, plugin) or not pod_state(plugin).ready:
        return None  # a plugin (or its DaemonSet) that asks for a RuntimeClass: the default runtime is not proven
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


#: What the kubelet's status of a container reads where containerd never saw it exit -- the container went with its
#: node or its runtime (a reboot): containerd's CRI reports it terminated with reason "Unknown" and exit code 255
#: (containerd/containerd internal/cri/server/helpers.go@v2.1.0, unknownExitReason, unknownExitCode).
UNKNOWN_EXIT = ("Unknown", 255)


def _restarted_with_node(plugin: Obj) -> str:
    """The plugin pod's container whose last run ended with its node or runtime (terminated Unknown, exit code 255)
    and that runs again: the device plugin came back, and registered, after the kubelet restarted. "" where none."""
    for cs in (plugin.get("status") or {}).get("containerStatuses") or []:
        last = (cs.get("lastState") or {}).get("terminated") or {}
        if (cs.get("state") or {}).get("running") and (last.get("reason"), last.get("exitCode")) == UNKNOWN_EXIT:
            return str(cs.get("name"))
    return ""


def recovered_before_registration(
    ctx: Context, *, view: NodeView, hit: list[Obj], said: catalog.Match
) -> Finding | None:
    """The finding for GPU pods ``hit`` whose CUDA finds no GPU (``said``) on a node whose kubelet release admits pods
    from its device checkpoint before the device plugin registers again after a restart (kubelet_defects.yaml,
    symptom admitted-before-registration), where the plugin's own pod shows that restart -- its last run ended with
    the node (terminated Unknown, exit 255) and it registered again since -- the node offers its GPUs and no GPU
    failure is on record. The pods were started without the plugin's allocation: recreating them repairs them now,
    the kubelet release with the fix for good. None where any of that does not hold (then the driver is read)."""
    known = kubelet_defect(view.node, "admitted-before-registration")
    plugin = view.pod(DEVICE_PLUGIN)
    if known is None or plugin is None or not pod_state(plugin).ready:
        return None
    container = _restarted_with_node(plugin)
    log = ctx.log(plugin, container) if container else ""
    registered = catalog.find(log, REGISTERED)
    offered = {k: v for k, v in node_gpu_resources(view.node, "allocatable").items() if v > 0}
    if registered is None or not offered or gpu_failed(view, log):
        return None
    found, fixed = known
    version = node_info(view.node).get("kubeletVersion")
    refs = [(namespace_of(p) or "default", name_of(p)) for p in hit]
    action = kubelet_fix(
        view,
        found,
        fixed,
        action=kubelet_upgrade(view, found, fixed),
        why="a kubelet's release and its device checkpoint are facts of the node no scenario names",
    )
    recreate = recreate_pods(refs)
    return node_finding(
        view,
        fid=KUBELET_DEFECT,
        sev=Severity.ERROR,
        link="node",
        cause=f"GPU pod(s) {', '.join(f'{ns}/{n}' for ns, n in refs[:5])} run without a usable GPU on a node whose "
        f"device plugin came back with the node and registered again, and the node's kubelet ({version}) has a known "
        f"defect: {found.cause} The GPUs have not failed: the node offers them and no Xid, lost GPU or published "
        "fault is on record.",
        evidence=[
            *said.evidence("pod says"),
            f"device plugin pod {name_of(plugin)}: container {container} restarted with the node (last run "
            f"terminated {UNKNOWN_EXIT[0]}, exit code {UNKNOWN_EXIT[1]}) and runs ready",
            *registered.evidence("plugin log"),
            f"node {view.name} offers {', '.join(f'{k} {v}' for k, v in sorted(offered.items()))}",
            f"status.nodeInfo.kubeletVersion: {version} (fixed in {fixed})",
            found.cite(),
            f"release note: {found.line}",
            f"until then: {found.workaround}",
        ],
        fix=f"{recreate}   # now that the plugin has registered, so the kubelet admits them again with their GPUs; "
        "then " + ctx.stack.render(action).removeprefix("# "),
        action=action,
    )

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
GPU. A plugin pod that is merely ready proves less: it may get the driver some other way, and one that mounts the
driver's library from the host (a hostPath of libnvidia-ml, or of a directory its LD_LIBRARY_PATH names) did. Nor is a
pod the kubelet admitted after the plugin's current run began one admitted without it: the plugin registers within
its first seconds, so such a pod got its allocation, and what it lacks is the runtime's injection of it. Deleting the
pod has its controller create it again, and the kubelet admits the new one through the registered plugin.
"""

from __future__ import annotations

from dataclasses import dataclass

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
from gpuchain.doctor.owners import runtime_class_of, volumes_spec
from gpuchain.doctor.pods import pod_state, running_since
from gpuchain.kube.gpu_resources import offered_gpus
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN

#: The plugin's own line once the kubelet took its registration (catalog.yaml): it found NVML, so its container got
#: the driver from the node's runtime.
REGISTERED = "k8s-device-plugin.registered"


@dataclass(frozen=True)
class DefaultRuntime:
    """What proves a node's default runtime injects the driver: the device plugin's pod that found NVML with no
    RuntimeClass and no library of its own, its registration line, and the GPUs the node offers."""

    plugin: Obj
    registered: catalog.Match
    offered: dict[str, int]

    def evidence(self, view: NodeView) -> list[str]:
        """The lines that show it, for either finding that rests on it."""
        return [
            f"device plugin pod {name_of(self.plugin)}: ready, no runtimeClassName, no NVML library mounted from the "
            "host",
            *self.registered.evidence("plugin log"),
            f"node {view.name} offers {', '.join(f'{k} {v}' for k, v in sorted(self.offered.items()))}",
        ]


def default_runtime_injects(ctx: Context, view: NodeView) -> DefaultRuntime | None:
    """The proof that the node's default runtime gives containers the driver, where its device plugin's pod runs ready
    with no RuntimeClass (neither its pod nor its DaemonSet names one) and no NVML mounted from the host, its log shows
    its registration, and the node offers GPUs; None where any of that does not hold (the operator's plugin asks for
    a RuntimeClass, a plugin may mount the library itself)."""
    plugin = view.pod(DEVICE_PLUGIN)
    if plugin is None or runtime_class_of(ctx, plugin) or not pod_state(plugin).ready or library_from_host(ctx, plugin):
        return None
    offered = offered_gpus(view.node)
    log = operand_log(ctx, view=view, operand=DEVICE_PLUGIN, container=pod_state(plugin).container, last="")
    registered = catalog.find(log, REGISTERED)
    if not offered or registered is None:
        return None
    return DefaultRuntime(plugin, registered, offered)


def admitted_through(proof: DefaultRuntime, hit: list[Obj]) -> bool:
    """Were all of ``hit`` taken on by the kubelet after the plugin's current run began (so through its registration,
    with their allocation)? False where a pod's or the plugin's times are not shown."""
    started = _running_since(proof.plugin)
    return bool(started) and all(_admitted_at(pod) > started for pod in hit)


def admitted_without_device(
    ctx: Context, *, view: NodeView, hit: list[Obj], said: catalog.Match, proof: DefaultRuntime
) -> Finding:
    """The finding for GPU pods ``hit`` that say they have no driver (``said``) where the node's default runtime
    gives containers the driver (``proof``, `default_runtime_injects`) and the pods were not taken on after the
    plugin's run began (`admitted_through`): these were started without the plugin's allocation."""
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
        evidence=[*said.evidence("pod says"), *proof.evidence(view)],
        fix=f"{ctx.stack.render(action)}   # delete the affected pods so the kubelet admits them again through the "
        f"registered plugin and their controller starts them with the GPU{more}",
        action=action,
    )


#: The NVML library's file name (NVIDIA/go-nvml pkg/nvml/lib.go: libnvidia-ml.so.1, the driver's versioned file
#: beside it).
NVML_LIBRARY = "libnvidia-ml.so"


def library_from_host(ctx: Context, pod: Obj) -> bool:
    """Does ``pod`` mount NVML from the host itself: a hostPath volume of the library's file, or of a directory one of
    its containers mounts where its LD_LIBRARY_PATH looks? Then its finding NVML says nothing of the node's runtime."""
    spec = volumes_spec(ctx, pod)
    host = {str(v.get("name")): str((v.get("hostPath") or {}).get("path") or "") for v in spec.get("volumes") or []}
    if any(NVML_LIBRARY in path for path in host.values()):
        return True
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        env = {str(e.get("name")): str(e.get("value") or "") for e in c.get("env") or []}
        dirs = [d.rstrip("/") for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
        for m in c.get("volumeMounts") or []:
            at = str(m.get("mountPath") or "").rstrip("/")
            if host.get(str(m.get("name"))) and any(d == at or d.startswith(at + "/") for d in dirs):
                return True
    return False


def _running_since(pod: Obj) -> str:
    """When the pod's containers last started running (RFC 3339, the latest of them); "" where none runs."""
    return max((running_since(cs) for cs in (pod.get("status") or {}).get("containerStatuses") or []), default="")


def _admitted_at(pod: Obj) -> str:
    """The earliest time ``pod``'s containers show, a bound on when the kubelet took it on (a start, or the end of a
    run that never started, whose startedAt is the zero time); "" where it shows none. Not status.startTime, which the
    live read leaves out (`Cluster.list_readonly`)."""
    status = pod.get("status") or {}
    times = []
    for cs in status.get("containerStatuses") or []:
        for state in ((cs.get("state") or {}), (cs.get("lastState") or {})):
            for run in state.values():
                times += [str(t) for k in ("startedAt", "finishedAt") if (t := (run or {}).get(k)) and t[:4] != "1970"]
    return min(times, default="")


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
    offered = offered_gpus(view.node)
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

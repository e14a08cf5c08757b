"""A GPU node that serves VMs through NVIDIA's KubeVirt GPU device plugin deployed on its own (no GPU Operator).

NVIDIA/kubevirt-gpu-device-plugin (README) announces GPUs bound to vfio-pci (passthrough) and vGPU devices to KubeVirt;
such a node has no NVIDIA driver in use and needs no NVIDIA container runtime, so no "GPU stack" is missing there. What
does break it is that runtime made the node's default: the plugin's image is a CUDA image that asks for GPUs
(NVIDIA_VISIBLE_DEVICES), the NVIDIA runtime's prestart hook runs for it, and nvidia-container-cli finds no GPU the
NVIDIA driver owns ("nvidia-container-cli: initialization error: %s", NVIDIA/libnvidia-container src/cli/configure.c),
so the runtime refuses to start the container. NVIDIA's operator gives its own sandbox plugin's init containers
NVIDIA_VISIBLE_DEVICES=void for that reason (NVIDIA/gpu-operator assets/state-sandbox-device-plugin @v26.7.0).
"""

from __future__ import annotations

import dataclasses
import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.evidence import runtime_events
from gpuchain.doctor.links.common import node_finding, said_in
from gpuchain.doctor.links.vm_resources import passthrough_finding
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Link, LinkState, NodeChain, Severity
from gpuchain.doctor.node import runtime_scheme
from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.pods import pod_state, start_refused
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN

#: The plugin's image name (nvcr.io/nvidia/kubevirt-gpu-device-plugin).
IMAGE = "kubevirt-gpu-device-plugin"
#: A start the NVIDIA runtime's hook refused (the OCI runtime's error quotes the hook and nvidia-container-cli).
NVIDIA_HOOK = re.compile(r"nvidia-container-cli|nvidia-container-runtime|nvidia-container-runtime-hook")
#: How each runtime's default goes back to runc (Docker: daemon.json's "default-runtime"; containerd: the CRI
#: plugin's default_runtime_name; CRI-O: crio.runtime's default_runtime).
RUNC_DEFAULT = {
    "docker": 'remove "default-runtime": "nvidia" from /etc/docker/daemon.json (runc is then the default) and '
    "restart docker",
    "containerd": 'set default_runtime_name = "runc" in /etc/containerd/config.toml (the CRI plugin\'s containerd '
    "section) and restart containerd",
    "cri-o": 'set default_runtime = "runc" (or "crun") in the [crio.runtime] table of /etc/crio/crio.conf and restart '
    "crio",
}


def kubevirt_plugin(view: NodeView) -> Obj | None:
    """The KubeVirt GPU device plugin's pod on the node, where no container device plugin of a stack runs there."""
    if view.pod(DEVICE_PLUGIN) is not None:
        return None
    for pod in view.workloads:
        containers = (pod.get("spec") or {}).get("containers") or ()
        if any(IMAGE in str(c.get("image", "")) for c in containers):
            return pod
    return None


def _refusal(view: NodeView, pod: Obj) -> str:
    """What the runtime said when it refused the plugin's container: its status, else the kubelet's Event."""
    return start_refused(pod) or (runtime_events(view, pod) or [""])[0]


def _finding(ctx: Context, view: NodeView, pod: Obj) -> Finding | None:
    st = pod_state(pod)
    if not st.failing:
        return None
    refused = _refusal(view, pod)
    ns = namespace_of(pod) or "default"
    hook = NVIDIA_HOOK.search(refused)
    if hook is not None:
        runtime = runtime_scheme(view.node)
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": RUNC_DEFAULT.get(runtime, RUNC_DEFAULT["containerd"]),
                NOT_SIMULATED: "a node's default runtime is not simulated",
            },
        )
        known = catalog.known_error(refused)
        return node_finding(
            view,
            fid="vm.nvidia-runtime-default",
            sev=Severity.ERROR,
            link="toolkit",
            cause="the NVIDIA container runtime is this node's default runtime, so its hook runs for the KubeVirt GPU "
            "device plugin, whose image asks for GPUs; the GPUs are bound to vfio-pci for VMs, nvidia-container-cli "
            "finds none the NVIDIA driver owns, and the plugin's container is never started.",
            evidence=[
                st.describe(),
                f"node runtime: {runtime or 'not reported'}",
                f"refused: {refused[hook.start() :][:300]}",
                *(known.evidence()[1:] if known else ()),
            ],
            fix=ctx.stack.render(action) + "   # the VM node needs no NVIDIA runtime; or give the plugin's container "
            "NVIDIA_VISIBLE_DEVICES=void, as NVIDIA's operator does for its sandbox plugin",
            action=action,
        )
    restart = Fix.delete_pod(ns, name_of(pod), **{NOT_SIMULATED: "the KubeVirt plugin is not simulated"})
    log = st.last_log or ctx.log(pod, st.container)
    said = said_in(log) or [f"message: {refused}"]
    known = catalog.known_error(log, "device-plugin")
    if known is not None:
        # Its own line names the cause the catalog knows (the loader refusing its binary, ...): a new pod of the
        # same image fails the same way, so the entry's repair is the fix, not a restart.
        return node_finding(
            view,
            fid="vm.plugin-failing",
            sev=Severity.ERROR,
            link="device-plugin",
            cause=f"the KubeVirt GPU device plugin fails on this node ({st.status}), so its VMs get no GPU: "
            f"{known.entry.cause}",
            evidence=[st.describe(), *known.evidence()],
            fix=known.entry.repair(view.name, namespace=ns, pod=name_of(pod), daemonset=owner_ds(pod)),
        )
    return node_finding(
        view,
        fid="vm.plugin-failing",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=f"the KubeVirt GPU device plugin fails on this node ({st.status}), so its VMs get no GPU.",
        evidence=[st.describe(), *said],
        fix=ctx.stack.render(restart) + f"   # once its log is acted on: kubectl -n {ns} logs {st.name}",
        action=restart,
    )


def vm_plugin_walk(ctx: Context, view: NodeView, *, under: list[Finding], root: Finding | None) -> NodeChain | None:
    """A node served by a KubeVirt GPU device plugin of its own (None for any other node): the driver and the
    container runtime's NVIDIA setup are not used there, and the plugin's start is what is judged."""
    pod = kubevirt_plugin(view)
    if pod is None:
        return None
    unused = [Link(name, LinkState.SKIPPED, "not used by VMs") for name in ("gfd", "exporter", "mig")]
    driver = Link("driver", LinkState.SKIPPED, "GPUs bound to vfio-pci for VMs")
    if root is not None:
        links = [
            driver,
            *(Link(n, LinkState.NOT_REACHED, "waiting for the node") for n in ("toolkit", "device-plugin")),
        ]
        return NodeChain(view.name, (*links, *unused), tuple(under))
    st = pod_state(pod)
    found = _finding(ctx, view, pod) or (passthrough_finding(ctx, view, pod) if st.ready else None)
    if found is None:
        links = [
            driver,
            Link("toolkit", LinkState.SKIPPED, "not used by VMs"),
            Link("device-plugin", LinkState.OK, st.status),
        ]
        return NodeChain(view.name, (*links, *unused), tuple(under))
    toolkit = Link("toolkit", LinkState.BROKEN if found.link == "toolkit" else LinkState.SKIPPED, found.cause[:80])
    plugin_state = LinkState.NOT_REACHED if found.link == "toolkit" else LinkState.BROKEN
    plugin = Link("device-plugin", plugin_state, st.status)
    consequences = (f"device-plugin: pod {st.name} {st.status}",)
    return NodeChain(
        view.name,
        (driver, toolkit, plugin, *unused),
        (dataclasses.replace(found, root=True, consequences=consequences), *under),
    )

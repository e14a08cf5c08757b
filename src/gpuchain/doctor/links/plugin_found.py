"""A device plugin that registered fewer GPUs than the node has because it looked for them once, at its start.

Google's GPU device plugin finds the node's GPUs by listing the device files /dev/nvidia<N> when it starts, logs each
one ("Found Nvidia GPU %q") and announces those to the kubelet (GoogleCloudPlatform/container-engine-accelerators
pkg/gpu/nvidia/manager.go discoverGPUs). Until GoogleCloudPlatform/container-engine-accelerators#110 it never looked
again, so a plugin that started while the driver installer was still creating the device files registered only the
GPUs present then (kubernetes/kubernetes#77035 moved GKE to the plugin that looks again every 10 s and, finding more,
logs "Found %v GPUs, while only %v are registered" and registers again). Where the plugin's own log names exactly the
GPUs the node advertises, it has not restarted since, it never logged finding more, and nothing says a GPU failed,
the GPUs missing from capacity are ones it did not look for: a new plugin pod finds them all. The node's hardware or
kernel is the repair only where a new plugin finds no more (`gpu_count.missing_gpus`).
"""

from __future__ import annotations

import re

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.links.kubelet_defects import gpu_failed
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, Severity
from gpuchain.doctor.node import node_info
from gpuchain.doctor.node_image import node_image
from gpuchain.doctor.pods import pod_state
from gpuchain.doctor.releases import image_version, release_of
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import DEVICE_PLUGIN

#: Each GPU device file Google's plugin found at its start (manager.go discoverGPUs: glog "Found Nvidia GPU %q").
FOUND = re.compile(r'Found Nvidia GPU "(nvidia\d+)"')
#: Its releases since GoogleCloudPlatform/container-engine-accelerators#110, finding more GPUs than it registered
#: (manager.go hasAdditionalGPUsInstalled: "Found %v GPUs, while only %v are registered. Stopping device-plugin
#: server."): such a plugin registers them itself.
LOOKED_AGAIN = re.compile(r"Found \d+ GPUs, while only \d+ are registered")
#: The change that made GKE's plugin look for GPUs again, and the one that rolled it out (the GPU device plugin addon
#: of kubernetes/kubernetes cluster/addons/device-plugins/nvidia-gpu/daemonset.yaml, from 1.15).
RESCAN_CHANGE = "GoogleCloudPlatform/container-engine-accelerators#110"
ROLLOUT = "kubernetes/kubernetes#77035"
LOOKS_AGAIN_FROM = (1, 15)
#: The name of Google's GPU device plugin image (k8s.gcr.io/nvidia-gpu-device-plugin, gke.gcr.io/...).
GOOGLE_PLUGIN = "nvidia-gpu-device-plugin"


def _looked_once(view: NodeView, plugin: Obj) -> str:
    """Why the node's plugin is one that looked for GPUs only at its start where its log is not read: Google's plugin
    image on a kubelet before 1.15, whose GPU device plugin addon (cluster/addons/device-plugins/nvidia-gpu) ran the
    plugin from before the change ("" where it is not that)."""
    containers = (plugin.get("spec") or {}).get("containers") or []
    google = [str(c.get("image")) for c in containers if image_version(str(c.get("image", "")))[0] == GOOGLE_PLUGIN]
    version = str(node_info(view.node).get("kubeletVersion", ""))
    release = release_of(version)
    if not google or release is None or release.numbers[:2] >= LOOKS_AGAIN_FROM:
        return ""
    return (
        f"image {google[0]} on kubelet {version}: Google's GPU device plugin as the Kubernetes addon ran it before "
        f"1.15, before {ROLLOUT}, listing the device files once at its start"
    )


def registered_at_start(ctx: Context, view: NodeView, *, advertised: int, has: int, source: str) -> Finding | None:
    """The device plugin finding where the node advertises ``advertised`` of its ``has`` GPUs (``source`` says how
    many it has) because the plugin registered what it found at its start: its log names exactly those GPUs, or
    (its log not read) it is Google's plugin of before the change that looks again. None where the node shows
    otherwise: a plugin that looks again or restarted since (a new start found no more), a GPU failure on record."""
    plugin = view.pod(DEVICE_PLUGIN)
    if plugin is None or not 0 < advertised < has:
        return None
    statuses = (plugin.get("status") or {}).get("containerStatuses") or []
    log = ctx.log(plugin, ctx.container(DEVICE_PLUGIN))
    found = sorted(set(FOUND.findall(log)))
    why = (
        f"its log names {len(found)} GPU(s) found at start ({', '.join(found)}) and no later look for more"
        if found
        else _looked_once(view, plugin)
    )
    if (
        not why
        or (found and len(found) != advertised)
        or any(int(s.get("restartCount") or 0) for s in statuses)
        or LOOKED_AGAIN.search(log)
        or gpu_failed(view, log)
    ):
        return None
    state = pod_state(plugin)
    restart = Fix.delete_pod(
        state.restart_in(ctx.namespace),
        state.name,
        **{NOT_SIMULATED: "the device files present when a plugin started are not a scenario fact"},
    )
    image = node_image(view.node)
    upgrade = f" ({image.upgrade})" if image is not None and image.upgrade else ""
    seen = f"found only {', '.join(found)} then" if found else f"found {advertised} then"
    return node_finding(
        view,
        fid="device-plugin.registered-at-start",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=f"the device plugin announced {advertised} of the node's {has} GPUs: it lists the GPU device files once, "
        f"when it starts, and {seen} (it started before the driver installer had created the others), and its "
        "release does not look again, so the rest were never registered with the kubelet. Nothing says a GPU "
        "failed: no Xid, lost GPU or published fault is on record.",
        evidence=[
            f"capacity nvidia.com/gpu {advertised}",
            source,
            f"{state.describe()}, never restarted: {why}",
            "GoogleCloudPlatform/container-engine-accelerators pkg/gpu/nvidia/manager.go (discoverGPUs, "
            f"hasAdditionalGPUsInstalled since {RESCAN_CHANGE})",
        ],
        fix=ctx.stack.render(restart) + f"   # the new plugin pod lists the device files again and registers all {has} "
        f"GPUs; so a node that boots again does not repeat it, run the GKE GPU device plugin that looks for new GPUs "
        f"every 10 s ({RESCAN_CHANGE}, rolled out by {ROLLOUT}): upgrade the node pool{upgrade}; if the new pod "
        f"again finds {advertised}, the node itself is short: nvidia-smi -L on it lists the GPUs the driver sees",
        action=restart,
    )

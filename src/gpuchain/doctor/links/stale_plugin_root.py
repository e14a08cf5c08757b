"""A device plugin that kept the driver container's root on a node whose driver is the host's: the device paths it
hands out do not exist, so the runtime refuses every GPU container there.

NVIDIA's device plugin gives the runtime each GPU's device nodes as host paths under its driver root
(NVIDIA/k8s-device-plugin internal/plugin/server.go@v0.17.0 apiDeviceSpecs: ``filepath.Join(devRoot, path)``; the
GPU Operator has it pass them, PASS_DEVICE_SPECS=true in assets/state-device-plugin/0500_daemonset.yaml@v24.9.0),
and it reads that root once, when it starts: /run/nvidia/driver, the driver container's root, unless the host's
driver was validated (assets/state-device-plugin/0400_daemonset.yaml@v1.11.0: ``host-driver-ready`` gives ``/``;
0400_configmap.yaml@v24.9.0: its entrypoint sources /run/nvidia/validations/driver-ready). A plugin started before
that validation, or while a driver container served the node, keeps /run/nvidia/driver after the node runs the
host's driver (the driver disabled in the policy, or the node opted out with nvidia.com/gpu.deploy.driver=false),
and containerd, building each GPU container's devices from those paths, fails with ``lstat <path>: no such file or
directory`` (containerd pkg/oci/utils_unix.go@v1.6.4 DeviceFromPath). Started again, the plugin reads the host's
root. Where a driver pod should serve the node, the same line means its root is missing (its pod is not running,
or a stale mount): that is the driver's, and this rule stays quiet."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import opted_out
from gpuchain.doctor.model import Finding, Fix, Severity
from gpuchain.doctor.pods import pod_state, start_refused
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import name_of
from gpuchain.operator.operands import DEVICE_PLUGIN, DRIVER, enabled

#: The driver container's root as the GPU Operator mounts it on the node.
CONTAINER_DRIVER_ROOT = "/run/nvidia/driver"
#: The runtime's refusal of a device path under the driver container's root (Go's os.PathError of an lstat or stat).
MISSING_DEVICE = re.compile(
    r"\bl?stat (" + re.escape(CONTAINER_DRIVER_ROOT) + r"/dev/\S+?):? no such file or directory"
)


def _host_driver(ctx: Context, view: NodeView) -> str:
    """Why this node runs the host's driver, not a driver pod ("" where a driver pod should serve it)."""
    if view.pod(DRIVER) is not None:
        return ""
    if not ctx.policy_unknown and not enabled(ctx.policy, DRIVER):
        return "spec.driver.enabled=false"
    return opted_out(view, DRIVER) or ""


def _refusals(view: NodeView, found: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(who, path) of every container on the node the runtime refused for a device path under the driver
    container's root: ``found`` (the walk's failing containers, as (description, text)) and the node's GPU pods."""
    texts = list(found)
    for pod in view.workloads:
        if not pod_gpu_requests(pod):
            continue
        events = [
            str(e.get("message") or "")
            for e in view.events
            if e.get("reason") == "Failed" and (e.get("involvedObject") or {}).get("name") == name_of(pod)
        ]
        texts.append((f"GPU pod {name_of(pod)}", "\n".join([start_refused(pod), *events])))
    return [(who, hit.group(1)) for who, text in texts if (hit := MISSING_DEVICE.search(text))]


def stale_plugin_root(ctx: Context, view: NodeView, *, found: Sequence[tuple[str, str]]) -> Finding | None:
    """``device-plugin.stale-driver-root``: on the GPU Operator, a node that runs the host's driver, a device plugin
    pod there, and a container the runtime refused for a device path under /run/nvidia/driver. The repair starts
    the plugin again (its pod deleted), after which the refused pods are created with paths that exist."""
    plugin = view.pod(DEVICE_PLUGIN)
    why = _host_driver(ctx, view) if ctx.stack.id == "gpu-operator" and plugin is not None else ""
    refused = _refusals(view, found) if why else []
    if plugin is None or not refused:
        return None
    state = pod_state(plugin)
    action = Fix.delete_pod(state.restart_in(ctx.namespace), state.name)
    who, path = refused[0]
    return Finding(
        id="device-plugin.stale-driver-root",
        severity=Severity.ERROR,
        link="device-plugin",
        cause=f"the device plugin hands out GPU device paths under the driver container's root ({path}), but this "
        f"node runs the host's driver ({why}) and no driver pod, so the paths do not exist and the container "
        "runtime refuses every GPU container here: the plugin kept the driver root it read when it started.",
        evidence=(
            f"{who}: refused, lstat {path}: no such file or directory",
            f"no driver pod on {view.name} ({why})",
            state.describe(),
            *(f"also: {w}" for w, _ in refused[1:3]),
        ),
        fix=ctx.stack.render(action) + "   # restart the device plugin: it starts again with the host's driver "
        "root (/) and hands out device paths that exist; then delete the pods refused here (the plugin "
        "validator and the operator validator run again)",
        node=view.name,
        action=action,
    )

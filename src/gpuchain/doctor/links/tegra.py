"""Tegra (Jetson) nodes under a device plugin that found no NVML: the release, not the runtime.

A Jetson's GPU is integrated in its SoC and NVML does not see it. The device plugin discovers it only from v0.13.0,
through its Tegra resource manager, which it picks when go-nvlib finds the Tegra platform files
(/etc/nv_tegra_release, /sys/devices/soc0/family) in its container (NVIDIA/k8s-device-plugin internal/rm/rm.go and
tegra_manager.go@v0.13.0); the container toolkit puts those files into containers from v1.11.0 (its CHANGELOG.md
"Inject platform files into container on Tegra-based systems"). So on a Tegra node a plugin that says it could not
load NVML is not told "make nvidia the default runtime" as an x86 node would be: an older plugin release cannot serve
the GPU under any runtime (move the plugin to a release with Tegra support), and a plugin with Tegra support that
detected no Tegra platform was given a container without the platform files (move the node's toolkit to a release
that injects them). The release facts are releases.yaml's entries of symptom ``no-tegra``.

A Tegra node is read from the node itself: arm64 (status.nodeInfo.architecture or the kubernetes.io/arch label) with
an L4T kernel (NVIDIA's Linux for Tegra kernels are named ``<version>-tegra``) or an L4T OS image.
"""

from __future__ import annotations

import re

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.links.releases import set_release
from gpuchain.doctor.model import Fix, FixOp, LinkState, Severity
from gpuchain.doctor.node import KUBEADM, distribution_of, node_info, runtime_scheme
from gpuchain.doctor.owners import owner_daemonset
from gpuchain.doctor.releases import Defect, defect, fixed_image, image_version, showing
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import DEVICE_PLUGIN

#: An L4T kernel release (4.9.253-tegra, 5.15.136-tegra) or OS image ("... L4T ...").
L4T = re.compile(r"-tegra\b|\bL4T\b", re.IGNORECASE)
#: The architectures Jetson modules run (Linux's and Go's names for 64-bit ARM).
ARM64 = ("arm64", "aarch64")
#: What the releases.yaml entries of the two components are known by.
PLUGIN, TOOLKIT = "k8s-device-plugin", "container-toolkit"


def is_tegra(node: Obj) -> bool:
    """Is ``node`` a Tegra (Jetson) node: arm64, with an L4T kernel or OS image?"""
    info = node_info(node)
    labels = (node.get("metadata") or {}).get("labels") or {}
    arch = info.get("architecture") or labels.get("kubernetes.io/arch", "")
    return arch in ARM64 and bool(L4T.search(info.get("kernelVersion", "")) or L4T.search(info.get("osImage", "")))


def _template(ctx: Context, pod: Obj) -> Obj:
    """The pod spec of ``pod``'s DaemonSet's template ({} where none is in the snapshot)."""
    return ((owner_daemonset(ctx, pod).get("spec") or {}).get("template") or {}).get("spec") or {}


def _plugin_image(ctx: Context, pod: Obj) -> tuple[str, str]:
    """The plugin container's name and image (the first container whose image is the device plugin's): in its
    DaemonSet's pod template where the pod has one (what the DaemonSet makes its pods from, and where the repair is
    set), else in the pod."""
    for spec in (_template(ctx, pod), pod.get("spec") or {}):
        for c in spec.get("containers") or []:
            if image_version(str(c.get("image", "")))[0] == PLUGIN:
                return str(c.get("name", "")), str(c["image"])
    return "", ""


def _toolkit_defect() -> Defect | None:
    """The toolkit's releases.yaml entry of symptom ``no-tegra`` (the release that injects the platform files)."""
    return next((d for d in showing("no-tegra") if d.component == TOOLKIT), None)


def tegra_release(ctx: Context, *, view: NodeView, evidence: list[str]) -> Result | None:
    """The repair on a Tegra node whose device plugin found no NVML (``evidence``, its lines): the plugin's release
    where it predates Tegra support, else the node's toolkit release, which did not give the plugin the Tegra
    platform files. None on other nodes, or where the plugin's image names no release."""
    pod = view.pod(DEVICE_PLUGIN)
    if pod is None or not is_tegra(view.node):
        return None
    container, image = _plugin_image(ctx, pod)
    if not image:
        return None
    tag = image_version(image)[1]
    info = node_info(view.node)
    seen = [
        *evidence,
        f"node: {info.get('architecture', 'arm64')}, kernel {info.get('kernelVersion', '')} (a Tegra / Jetson node)",
        f"plugin image {image}",
    ]
    old = defect(PLUGIN, tag, "no-tegra")
    if old is not None:
        return _plugin_too_old(ctx, view=view, pod=pod, container=container, image=image, found=old, evidence=seen)
    toolkit = _toolkit_defect()
    # On k3s or RKE2 (their containerd) a plugin that asks for no RuntimeClass runs without the nvidia runtime: no
    # toolkit release gives it the platform files then, and the RuntimeClass is the repair (`distribution_default`).
    bare = not (pod.get("spec") or {}).get("runtimeClassName") and not _template(ctx, pod).get("runtimeClassName")
    own_containerd = distribution_of(view.node) is not KUBEADM and runtime_scheme(view.node) != "docker"
    if toolkit is None or (bare and own_containerd):
        return None
    return _toolkit_too_old(ctx, view=view, found=toolkit, evidence=seen)


def _plugin_too_old(
    ctx: Context, *, view: NodeView, pod: Obj, container: str, image: str, found: Defect, evidence: list[str]
) -> Result:
    """The device plugin link broken: a release without Tegra support on a Tegra node."""
    target = fixed_image(image, found)
    action, fix = set_release(ctx, pod=pod, operand=DEVICE_PLUGIN, container=container, image=target)
    toolkit = _toolkit_defect()
    needs = f" with {toolkit.name} {toolkit.fixed_in} or later on the node" if toolkit is not None else ""
    return Result(
        LinkState.BROKEN,
        f"device plugin {image_version(image)[1]} predates Tegra support",
        (
            node_finding(
                view,
                fid="device-plugin.tegra-unsupported",
                sev=Severity.ERROR,
                link="device-plugin",
                cause=f"{view.name} is a Tegra (Jetson) node, whose integrated GPU NVML does not see, and its device "
                f"plugin runs {image_version(image)[1]}: {found.cause} Its 'could not load NVML' is that, not the "
                "runtime.",
                evidence=[*evidence, found.cite()],
                fix=f"{fix}   # upgrade the device plugin to a release with Tegra (Jetson) support, "
                f"{found.fixed_in} or later{needs}",
                action=action,
            ),
        ),
    )


def _toolkit_too_old(ctx: Context, *, view: NodeView, found: Defect, evidence: list[str]) -> Result:
    """The toolkit link broken: a plugin with Tegra support that found no Tegra platform in its container."""
    what = (
        f"upgrade the {found.name} on the node to {found.fixed_in} or later (it injects the Tegra platform files and "
        "mounts the integrated GPU's libraries in CSV mode), then restart the container runtime and the device "
        "plugin pod"
    )
    action = Fix(FixOp.NODE, view.name, {"action": what, "fact": "runtime"})
    return Result(
        LinkState.BROKEN,
        "the node's container toolkit does not give the plugin the Tegra platform",
        (
            node_finding(
                view,
                fid="toolkit.tegra-platform-missing",
                sev=Severity.ERROR,
                link="toolkit",
                cause=f"{view.name} is a Tegra (Jetson) node and its device plugin supports Tegra, yet found neither "
                f"NVML nor a Tegra platform in its container: {found.cause}",
                evidence=[*evidence, found.cite()],
                fix=ctx.stack.render(action),
                action=action,
            ),
        ),
    )

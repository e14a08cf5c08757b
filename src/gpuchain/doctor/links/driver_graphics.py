"""A precompiled driver image that ships no GL/EGL/Vulkan libraries, seen where a graphics workload fails.

The precompiled driver images of Ubuntu 22.04 and 24.04 installed the driver's compute, decode, encode and FBC
packages but not libnvidia-gl-<branch>-server until NVIDIA/gpu-driver-container#619 (precompiled_images.yaml):
the kernel module loads, every validation passes and CUDA work runs, but the driver root the NVIDIA runtime hands to
containers has no libGLX_nvidia.so.0, libEGL_nvidia.so.0 or Vulkan ICD manifest. Only a pod that asks for graphics
(NVIDIA_DRIVER_CAPABILITIES all, graphics or display) needs them, and its Vulkan loader then says it found no driver
("vkCreateInstance: Found no drivers!", catalog.yaml). Read only where such a pod is in trouble on the node (its log
is read then, `gpuchain.doctor.snapshot.needs_logs`), so a healthy node costs a look at its workload list.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import container_image, node_finding
from gpuchain.doctor.links.driver_pools import NVIDIADRIVER_DS
from gpuchain.doctor.links.image_missing import PRECOMPILED_TAG
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.owners import owner_daemonset
from gpuchain.doctor.packaged import packaged_yaml
from gpuchain.doctor.releases import image_version
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DRIVER

#: The capabilities that make the NVIDIA runtime mount the driver's graphics libraries into a container.
GRAPHICS = frozenset({"all", "graphics", "display"})
CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
#: The operator's label of a precompiled driver DaemonSet (gpu-operator manifests/state-driver/0500_daemonset.yaml).
PRECOMPILED_LABEL = "nvidia.com/precompiled"


@dataclass(frozen=True, kw_only=True)
class ImageDefect:
    """One entry of precompiled_images.yaml."""

    id: str
    os: tuple[str, ...]
    lacks: str
    entries: tuple[str, ...]
    fixed_by: str
    source: str
    line: str


@functools.cache
def image_defects() -> tuple[ImageDefect, ...]:
    """Every entry of precompiled_images.yaml."""
    return tuple(
        ImageDefect(**{**raw, "os": tuple(raw["os"]), "entries": tuple(raw["entries"])})
        for raw in packaged_yaml("precompiled_images.yaml")
    )


def _precompiled_tag(ctx: Context, pod: Obj) -> tuple[str, str, str]:
    """The precompiled image the node's driver pod runs, from its DaemonSet's template (the operator renders the pod
    from it), else the pod: its image, branch and OS tag (empty where neither is a precompiled image)."""
    ds = owner_daemonset(ctx, pod)
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    if ((ds.get("metadata") or {}).get("labels") or {}).get(PRECOMPILED_LABEL) == "false":
        return "", "", ""
    for image in (container_image({"spec": spec}, ctx.container(DRIVER)), container_image(pod, ctx.container(DRIVER))):
        shaped = PRECOMPILED_TAG.fullmatch(image_version(image)[1]) if image else None
        if shaped is not None:
            return image, shaped.group(1), shaped.group(3)
    return "", "", ""


def _asks_graphics(pod: Obj, container: str) -> bool:
    """Does ``container`` ask for the driver's graphics libraries, or leave it to its image (no capabilities set in
    the pod: the image's own setting is not in a dump)? False where the pod sets capabilities without graphics."""
    spec: Obj = next((c for c in (pod.get("spec") or {}).get("containers") or () if c.get("name") == container), {})
    value = next((str(e.get("value", "")) for e in spec.get("env") or () if e.get("name") == CAPABILITIES), None)
    return value is None or bool(GRAPHICS & {v.strip() for v in value.split(",")})


def graphics_missing(ctx: Context, view: NodeView) -> Finding | None:
    """The node's precompiled driver image of an affected OS lacks the graphics libraries a GPU workload here needs
    (its log says so); None where no such workload fails or the driver is no such image."""
    pod = view.pod(DRIVER)
    if pod is None or not ctx.logs_read or not view.workloads:
        return None
    image, branch, os_tag = _precompiled_tag(ctx, pod)
    defect = next((d for d in image_defects() if os_tag in d.os), None) if image else None
    if defect is None:
        return None
    failing: list[tuple[Obj, catalog.Match]] = []
    for workload in view.workloads:
        if not pod_gpu_requests(workload):
            continue
        for cs in (workload.get("status") or {}).get("containerStatuses") or ():
            name = str(cs.get("name"))
            found = catalog.find(ctx.log(workload, name), *defect.entries)
            if found is not None and _asks_graphics(workload, name):
                failing.append((workload, found))
                break
    if not failing:
        return None
    ds = name_of(owner_daemonset(ctx, pod)) or "the driver DaemonSet"
    resource = NVIDIADRIVER_DS.match(ds) is not None
    where = "its NVIDIADriver resource's spec.usePrecompiled" if resource else "spec.driver.usePrecompiled"
    restart = "; then delete the failing graphics pods so they start on the new driver root"
    full = (
        f"set spec.driver.version (or the NVIDIADriver's spec.version) to a full {branch} release, whose standard "
        f"image (<version>-{os_tag}) installs libnvidia-gl; or keep precompiled drivers and pull an image of tag "
        f"{image_version(image)[1]} rebuilt since {defect.fixed_by.split(' (')[0]} (spec.driver.imagePullPolicy: "
        "Always, then delete the driver pod)"
    )
    if ctx.policy_obj is not None and not resource:
        action = Fix(
            FixOp.PATCH_POLICY,
            ctx.policy_name,
            {"spec": {"driver": {"usePrecompiled": False}}, NOT_SIMULATED: "precompiled images are not simulated"},
        )
        fix = ctx.stack.render(action) + f"   # with it, {full}{restart}"
    else:
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": f"turn precompiled drivers off ({where}: false) and {full}{restart}",
                NOT_SIMULATED: "precompiled images are not simulated",
            },
        )
        fix = ctx.stack.render(action)
    lacks = defect.lacks.replace("<branch>", branch)
    pods = ", ".join(f"{namespace_of(p)}/{name_of(p)}" for p, _ in failing[:5])
    return node_finding(
        view,
        fid="driver.precompiled-no-graphics",
        sev=Severity.ERROR,
        link="driver",
        cause=f"the node's precompiled driver image {image} does not install {lacks}, so the NVIDIA runtime has "
        "no GL/EGL/Vulkan driver to give containers: CUDA work runs, but graphics pods find no NVIDIA driver.",
        evidence=[
            f"driver pod {name_of(pod)} (DaemonSet {ds}): precompiled image {image}",
            f"graphics pods failing: {pods}",
            *failing[0][1].evidence(),
            f"release: {defect.id} ({defect.source}): fixed by {defect.fixed_by}",
        ],
        fix=fix,
        action=action,
    )

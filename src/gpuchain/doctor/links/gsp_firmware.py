"""A driver container whose kernel module finds no GSP firmware, and the repair that fits how it was installed.

The open kernel modules (and the proprietary ones on GPUs that run GSP) load nvidia/<version>/gsp_*.bin through the
kernel's firmware loader at a GPU's first open (NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv.c@595.45.04
nv_get_firmware; "No firmware image found" from src/nvidia/arch/nvalloc/unix/src/osinit.c RmFetchGspRmImages). The
GPU Operator's driver container points the loader's search path (/sys/module/firmware_class/parameters/path) at
/run/nvidia/driver/lib/firmware, its own root as the host sees it, unless the host set a path first, which it keeps
(NVIDIA/gpu-driver-container ubuntu22.04/nvidia-driver@06a208c `_load_driver`). Two ways lose the firmware:

- a precompiled driver image (usePrecompiled: the operator's image tag is <version>-<node kernel>-<os>,
  NVIDIA/gpu-operator controllers/object_controls.go@v26.7.0 resolveDriverTag) built before
  NVIDIA/gpu-driver-container 070e32e (#175) installed the firmware into the image at build time, under the
  /run/nvidia/driver mount that hides it, and set no search path: a precompiled image with that change, or the
  driver container that builds the module (usePrecompiled false), installs it after the mount;
- any driver container on a host whose own firmware search path leads elsewhere: the path is the host's to clear.
"""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known, container_image
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DRIVER

#: The lines that say the module has no GSP firmware (catalog.yaml), the module's and the kernel loader's.
NO_FIRMWARE = ("nvidia-kernel.gsp-firmware-missing", "kernel.gsp-firmware-load-failed")
#: The driver container's words that it kept a firmware search path the host had set, or could not set its own.
SEARCH_PATH = "driver-container.firmware-search-path"


def precompiled(ctx: Context, view: NodeView, pod: Obj) -> str:
    """What says the node's driver container is a precompiled one ("" when nothing does): the policy's
    usePrecompiled, or an image tag that names the node's kernel (the operator's tag for precompiled images)."""
    if ctx.policy_obj is not None and ctx.policy.driver.use_precompiled:
        return f"spec.driver.usePrecompiled=true in {ctx.policy_ref}"
    image = container_image(pod, ctx.container(DRIVER))
    tag = image.rsplit(":", 1)[-1] if ":" in image else ""
    built_for = view.kernel and view.kernel in tag
    return f"driver image {image} is built for kernel {view.kernel} (precompiled)" if built_for else ""


def gsp_firmware(ctx: Context, *, view: NodeView, pod: Obj, log: str) -> Known | None:
    """The driver container's module finding no GSP firmware: the precompiled image's repair, else the host's
    firmware search path cleared; None where its log does not say so."""
    found = catalog.find(log, *NO_FIRMWARE)
    if found is None:
        return None
    again = ctx.stack.render(Fix.delete_pod(namespace_of(pod) or ctx.namespace, name_of(pod)))
    why = precompiled(ctx, view, pod)
    if why and ctx.policy_obj is not None:
        build = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"driver": {"usePrecompiled": False}}})
        return Known(
            cause=f"{found.entry.cause.rstrip('.')}: the precompiled driver image carries the firmware from its build, "
            "under the /run/nvidia/driver mount that hides it, and sets no firmware search path to it.",
            evidence=(*found.evidence(), why),
            action=build,
            fix=ctx.stack.render(build)
            + "   # the driver container that builds the module installs the driver package, GSP firmware included, "
            "after the mount and sets the firmware search path (firmware_class) to it; or run a precompiled image "
            "built with NVIDIA/gpu-driver-container#175 (070e32e), which does the same",
        )
    said = catalog.find(log, SEARCH_PATH)
    clear = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": "clear the firmware search path the host sets (the firmware_class.path= kernel argument, or "
            "whatever writes /sys/module/firmware_class/parameters/path at boot) and reboot, so the driver container "
            "points it at its own /run/nvidia/driver/lib/firmware, where the driver's nvidia/<version>/gsp_*.bin "
            f"are; then {again}",
            NOT_SIMULATED: "the kernel's firmware search path is a fact of the node no scenario names",
        },
    )
    return Known(
        cause=f"{found.entry.cause.rstrip('.')}: the driver container's firmware is under /run/nvidia/driver/lib/"
        "firmware, which the kernel reads only where its firmware search path leads there (the driver container sets "
        "it unless the host set one first).",
        evidence=(*found.evidence(), *(said.evidence() if said else ())),
        action=clear,
        fix=ctx.stack.render(clear),
    )

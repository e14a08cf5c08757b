"""Why Fabric Manager left an NVSwitch node's GPUs outside the NVLink fabric, read from what the driver container
wrote, and the repair that fits it.

CUDA's "system not yet initialized" (error 802, catalog cuda.system-not-ready) says only that the GPUs are not
registered with the fabric. The GPU Operator's driver container starts Fabric Manager itself
(NVIDIA/gpu-driver-container ubuntu22.04/nvidia-driver@06a208c `_start_daemons`); images before 223687f ("fail fast
when FabricManager fails to come up") go on to Ready when it fails, so only their log holds Fabric Manager's own
words (a later image fails, and its not-ready finding quotes the same catalog entries). The words name different
repairs:

- a Fabric Manager whose version is not the loaded driver's refuses to start: the image bundles another version than
  its driver, and a driver image whose Fabric Manager is its driver's is the repair;
- Fabric Manager started on the NVSwitch driver's path that finds no switch to manage ("Nothing to do"), or the
  start script and NVLSM asking for ib_umad: an NVLink5 board (fourth-generation NVSwitches, Blackwell) whose
  switches NVLSM programs over InfiniBand, where the node has not loaded the InfiniBand modules the driver container
  looks for (it takes the NVLink5 path only when /sys/class/infiniband/*/device/vpd names SW_MNG, and waits for
  mlx5_core and ib_umad there).

The node's GPU generation (GFD's nvidia.com/gpu.family and compute capability) is evidence beside the line.
"""

from __future__ import annotations

import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known, container_image, operand_log
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.operator.operands import DRIVER

MISMATCH = "fabric-manager.driver-version-mismatch"
NOTHING_TO_DO = "fabric-manager.nvswitch-nothing-to-do"
#: The lines that say the NVLink5 path wants the InfiniBand modules (catalog.yaml): the start script's, NVLSM's
#: library's, the driver container's wait.
IB_WANTED = (
    "fabric-manager.ib-umad-not-loaded",
    "libibumad.abi-version-unreadable",
    "driver-container.nvlink5-modules-wait",
)
#: Fabric Manager's two versions in its refusal: its own, and the loaded driver's.
VERSIONS = re.compile(r"interface version (\S+) .{0,12}match with driver version (\d+(?:\.\d+)+)")
#: The driver container's words when it took the NVLink5 path (FM with NVLSM), not the NVSwitch driver's.
NVLINK5_PATH = "Starting NVIDIA fabric manager daemon for NVLink5"
FAMILY = "nvidia.com/gpu.family"
COMPUTE_MAJOR = "nvidia.com/gpu.compute.major"
#: Compute capability of the first GPUs on NVLink5 boards (Blackwell, 10.0).
NVLINK5_COMPUTE = 10


def _generation(view: NodeView) -> tuple[bool | None, str]:
    """Whether the node's GPUs are of an NVLink5 generation (None: no label says), and the labels that say it."""
    family = view.labels.get(FAMILY, "")
    major = view.labels.get(COMPUTE_MAJOR, "")
    product = view.labels.get("nvidia.com/gpu.product", "")
    said = ", ".join(f"{k}={v}" for k, v in (("product", product), ("family", family), ("compute", major)) if v)
    if not major.isdigit():
        return None, said
    return int(major) >= NVLINK5_COMPUTE, said


def _restart(ctx: Context, view: NodeView) -> Fix:
    """Deleting the node's driver pod, so its container starts Fabric Manager again (`fabric_repair` reads a pod)."""
    pod = view.pod(DRIVER) or {}
    return Fix.delete_pod(namespace_of(pod) or ctx.namespace, name_of(pod))


def _mismatch(ctx: Context, view: NodeView, line: str) -> Known:
    """A driver image whose Fabric Manager is another version than its driver: one whose versions agree."""
    found = VERSIONS.search(line)
    fm, driver = found.groups() if found else ("another version", "the loaded driver's")
    branch = driver.split(".")[0]
    image = container_image(view.pod(DRIVER), ctx.container(DRIVER)) or ctx.policy.driver.image_ref()
    again = ctx.stack.render(_restart(ctx, view))
    fix = (
        f"# the driver image {image} bundles Fabric Manager {fm} beside driver {driver}: run a driver image whose "
        f"Fabric Manager is its driver's version - set spec.driver.version in {ctx.policy_ref} to a driver release "
        f"whose image carries the matching Fabric Manager (nv-fabricmanager --version in its driver container shows "
        f"it), or rebuild this image with nvidia-fabricmanager-{branch}={driver}-1 pinned (apt-mark hold) so its "
        f"build cannot take a newer one; then {again}"
    )
    cause = (
        f"Fabric Manager {fm} refuses to start beside the loaded driver {driver}: it runs only with the driver of its "
        "exact version, so the NVSwitch fabric is never set up and CUDA reports the system not initialised."
    )
    return Known(cause=cause, evidence=(), action=None, fix=fix)


def _ib_modules(ctx: Context, view: NodeView, match: catalog.Match) -> Known:
    """An NVLink5 board whose InfiniBand modules are not loaded: load them, then restart the driver."""
    nvlink5, said = _generation(view)
    legacy = match.entry.id == NOTHING_TO_DO
    cause = match.entry.cause
    if legacy:
        cause = (
            "the driver container started Fabric Manager on the NVSwitch driver's path and Fabric Manager found no "
            "switch to manage there: on an NVLink5 board the NVSwitches are programmed over InfiniBand by NVLSM, and "
            "the driver container takes that path only where the node's InfiniBand management devices are present "
            "(mlx5_ib and ib_umad loaded), so the GPUs stay unregistered and CUDA reports the system not initialised."
        )
    evidence = []
    if said:
        seen = "an NVLink5 generation" if nvlink5 else "not of an NVLink5 generation" if nvlink5 is False else ""
        evidence.append(f"node GPUs: {said}" + (f" ({seen})" if seen else ""))
    if legacy:
        evidence.append("driver container took the NVSwitch driver's path (no 'for NVLink5+' start line)")
    load = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"{match.entry.repair(view.name)}: {ctx.stack.render(_restart(ctx, view))}",
            "drain": False,
            NOT_SIMULATED: "the node's loaded kernel modules are a fact of the node no scenario names",
        },
    )
    return Known(cause=cause, evidence=tuple(evidence), action=load, fix=ctx.stack.render(load))


def fabric_repair(ctx: Context, view: NodeView) -> Known | None:
    """What the driver container's log says of Fabric Manager on this node, as cause, evidence and the repair that
    fits it; None where it says nothing of it (no driver pod, or no line of Fabric Manager's)."""
    if view.pod(DRIVER) is None:
        return None
    log = operand_log(ctx, view=view, operand=DRIVER, container=ctx.container(DRIVER), last="")
    found = catalog.find(log, MISMATCH, *IB_WANTED, NOTHING_TO_DO)
    if found is None or (found.entry.id == NOTHING_TO_DO and NVLINK5_PATH in log):
        # Nothing of Fabric Manager's, or a switch NVLSM did not bring up on the NVLink5 path the driver container
        # took once the InfiniBand modules were there: no line says which repair that wants.
        return None
    known = _mismatch(ctx, view, found.line) if found.entry.id == MISMATCH else _ib_modules(ctx, view, found)
    evidence = (*found.evidence(), *known.evidence)
    return Known(cause=known.cause, evidence=evidence, action=known.action, fix=known.fix)

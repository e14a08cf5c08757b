"""Why the validator's driver validation never completes, read from how it decides, and the change that lets it pass.

NVIDIA's validator (``nvidia-validator``, COMPONENT=driver; NVIDIA/gpu-operator validator/main.go@v23.9.0 and
@v25.3.0) proves the driver link this way:

- a driver installed on the host counts only where ``<host root>/usr/bin/nvidia-smi`` exists (hostPaths.rootFS,
  mounted at /host): it runs ``chroot /host nvidia-smi``;
- otherwise it takes the driver for the operator's driver container: where the operator manages one it first waits
  for that container's ``.driver-ctr-ready``, then looks under its driver root, the host's
  ``hostPaths.driverInstallDir`` (default /run/nvidia/driver), for ``nvidia-smi`` (in usr/bin, usr/sbin, bin, sbin)
  and ``libnvidia-ml.so.1`` (in usr/lib64, usr/lib/x86_64-linux-gnu, usr/lib/aarch64-linux-gnu, lib64, ...:
  validator/find.go@v25.3.0), retrying every few seconds while it fails (WITH_WAIT); v23.9 ran ``chroot <driver
  root> nvidia-smi`` there.

The operator sets that root only on the operands' ``driver-validation`` init containers and their
``driver-install-dir`` volume (controllers/object_controls.go@v25.3.0 ``transformForDriverInstallDir``); its own
driver container still installs under /run/nvidia/driver. So each way the validation hangs has its own repair:

- the operator installs the driver, and hostPaths.driverInstallDir points the validation elsewhere: drop the key;
- the driver is the host's (driver.enabled=false) and not at <host root>/usr/bin/nvidia-smi: point
  hostPaths.driverInstallDir at the directory that holds it in that layout (a managed image's own driver root);
  where the host keeps the driver in another layout, as Talos' system extensions do (the driver's user space under
  /usr/local: siderolabs/extensions nvidia-gpu/nvidia-container-toolkit/nvidia-pkgs/production/pkg.yaml, its
  --opengl-prefix and --utility-prefix), no driver root the validator searches holds it, and the operands need
  either the ready files the disabled containers would have written or a device plugin that does not wait for them.

A line of the validation's log that the catalog knows (NVML's version mismatch, ...) is read before this, by the
catalog's own entries (evidence.running_says); this module answers the validation that names no known failure.
"""

from __future__ import annotations

import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.links.talos_extensions import talos_release
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp
from gpuchain.doctor.node_image import node_image
from gpuchain.doctor.stacks.inferred_policy import unread
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import DRIVER, TOOLKIT

#: The validator's default driver root: where the operator's driver container installs the driver
#: (NVIDIA/gpu-operator validator/main.go@v25.3.0 defaultDriverInstallDir; controllers DefaultDriverInstallDir).
DEFAULT_DRIVER_ROOT = "/run/nvidia/driver"
#: Where the validator writes the ready files the operands' validation init containers wait for (its outputDir).
VALIDATIONS = "/run/nvidia/validations"
#: The validator's own line when it runs the host's nvidia-smi (runCommandWithWait's "running command %s with args
#: %v" over ``chroot /host nvidia-smi``, v23.9): the host driver was found, and what follows says why it fails.
HOST_SMI = "[/host nvidia-smi]"
#: What the driver validation says while it finds no driver where it looks (validator/main.go@v23.9.0 and @v25.3.0:
#: its start, its loop over a driver root, the driver container's ready file, the files it does not find; chroot's
#: own words for a root without nvidia-smi). A line beyond these is the driver speaking: not this module's case.
NOT_FOUND = re.compile(
    r"version: |running command |command failed, retrying|Attempting to validate|failed to validate the driver|"
    r"Driver is not pre-installed|Detected pre-installed|no 'nvidia-smi' file|empty 'nvidia-smi' file|"
    r"failed to locate (nvidia-smi|driver libraries)|chroot: failed to run command '?nvidia-smi'?: No such file|"
    r"stat: cannot stat '?/run/nvidia/validations/|error checking driver container status|driver is not ready"
)


def _found_nothing(log: str) -> bool:
    """Does the validation's log (read or not) hold only the validator's words of a driver not found?"""
    return all(NOT_FOUND.search(line) for line in log.splitlines() if line.strip())


def hung_driver_validation(ctx: Context, *, view: NodeView, validator: Obj, at: str) -> Known | None:
    """The repair for a validator that runs ``at`` (its driver validation) and does not complete it, from the
    policy's driver switches and host paths and the node's OS; None where its logic implies no change gpuchain
    can name (the host driver was found and fails with words the catalog does not know)."""
    if ctx.policy_unknown or ctx.policy_obj is None:
        return None
    # A policy read back from the DaemonSets (stacks/inferred_policy.py) whose validator showed no install dir volume:
    # the key is not known, so no repair that rests on its value is named.
    hidden = unread(ctx.stack, "hostPaths")
    log = ctx.log(validator, at)
    if not _found_nothing(log) or HOST_SMI in log:
        return None  # the driver was found and speaks (a catalog entry reads known words first): its words tell
    said = catalog.known_error(log)
    evidence = [f"says: {said.line}", said.entry.cite()] if said is not None else []
    # Read from the ClusterPolicy as written: gpuchain's own operator does not take this key, so its parsed policy
    # (ctx.policy) keeps the default where NVIDIA's operator honours the user's value.
    paths = ((ctx.policy_obj.get("spec") or {}).get("hostPaths") or {}).get("driverInstallDir")
    root = str(paths or DEFAULT_DRIVER_ROOT).rstrip("/") or "/"
    if ctx.deploys(DRIVER):
        if root == DEFAULT_DRIVER_ROOT or hidden:
            return None  # the driver container's own root: its pod's state says why it has no driver there
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"hostPaths": {"driverInstallDir": None}}})
        return Known(
            cause=f"ClusterPolicy spec.hostPaths.driverInstallDir={root} points the driver validation at {root}, but "
            f"the operator's driver container installs the driver under {DEFAULT_DRIVER_ROOT} (the key moves only the "
            "validation's driver root), so the validation finds no nvidia-smi there and retries forever; the "
            "operands wait for its ready file.",
            evidence=(f"spec.hostPaths.driverInstallDir={root}", "spec.driver.enabled=true", *evidence),
            action=action,
            fix=ctx.stack.render(action)
            + f"   # drop the override: the validation looks under {DEFAULT_DRIVER_ROOT}, where the driver container "
            "installs",
        )
    shown = "not in the dump" if hidden else root
    markers = f"{VALIDATIONS}/driver-ready" + ("" if ctx.deploys(TOOLKIT) else f" and {VALIDATIONS}/toolkit-ready")
    cause = (
        "the operator's driver is off (driver.enabled=false), so its validator accepts a driver on the host only where "
        "<host root>/usr/bin/nvidia-smi exists, else under spec.hostPaths.driverInstallDir "
        f"({shown}) with nvidia-smi in usr/bin or bin and libnvidia-ml.so.1 in usr/lib64 or lib/<arch>-linux-gnu; it "
        f"finds neither, so it retries forever and never writes {markers}, which the operands wait for."
    )
    facts = ("spec.driver.enabled=false", f"spec.hostPaths.driverInstallDir={shown}", *evidence)
    release = talos_release(view.node)
    if release:
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": f"have a DaemonSet on {view.name} create and keep {markers} (what the disabled operator "
                "containers would have written), so the operands' validation init containers pass; or run NVIDIA's "
                "standalone device plugin (helm chart nvidia-device-plugin, runtimeClassName nvidia) in place of the "
                "operator, as Talos' own guide does",
                NOT_SIMULATED: "where a host keeps its driver's files is a fact of the node no scenario names",
                "drain": False,
            },
        )
        return Known(
            cause=f"{cause} Talos {release} installs the driver's user space from its NVIDIA system extensions under "
            "/usr/local (libnvidia-ml.so.1 in /usr/local/lib, beside the extensions' own glibc), where the "
            "validator's search under a driver root does not look.",
            evidence=(*facts, f"osImage Talos ({release})"),
            action=action,
            fix=ctx.stack.render(action),
        )
    image = node_image(view.node)
    kept = (image.keep.get("hostPaths") or {}).get("driverInstallDir") if image and image.ships_driver else None
    if image is not None and kept and (hidden or kept != root):
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"hostPaths": {"driverInstallDir": kept}}})
        return Known(
            cause=f"{cause} The node's {image.cloud} image installs its driver under {kept}.",
            evidence=(*facts, *image.said),
            action=action,
            fix=ctx.stack.render(action) + f"   # the validation then looks under {kept}, where the image's driver is",
        )
    return Known(
        cause=cause,
        evidence=facts,
        action=None,
        fix=f"# set spec.hostPaths.driverInstallDir of {ctx.policy_ref} to the host directory that holds the "
        "driver (nvidia-smi under its usr/bin or bin, libnvidia-ml.so.1 under its usr/lib64 or lib/<arch>-linux-gnu), "
        f"or install the host's driver package so /usr/bin/nvidia-smi runs on {view.name}; then delete the validator "
        "pod so it validates again",
    )

"""The driver container's package manager finds no headers of the node's running kernel: why, from the node, and the
repair for that reason.

The GPU Operator's RHEL-family driver container builds nvidia.ko against ``kernel-headers`` and ``kernel-devel`` of
the running kernel, installed with dnf from the repositories it can read, at the release it derives from the kernel
(NVIDIA/gpu-driver-container rhel9/nvidia-driver@06a208c ``_install_prerequisites``: ``dnf -q -y
--releasever=${DNF_RELEASEVER} install kernel-headers-${KERNEL_VERSION} kernel-devel-${KERNEL_VERSION}``). dnf says
"Unable to find a match" when none of them carries that version. Which repository is missing decides the repair:

- a disconnected cluster reads a mirror the ClusterPolicy names (``spec.driver.repoConfig.configMapName``): the
  mirror lacks this kernel's packages;
- RHEL 9 and 10 publish kernel-headers and kernel-devel in AppStream, and an Extended Update Support minor's kernels
  (the ``.el9_<minor>`` kernels of a minor after the next one ships) only in the AppStream EUS repository; the
  container enabled only BaseOS EUS until NVIDIA/gpu-driver-container 4fd766a ("fix(rhel9): Enable appstream EUS RPM
  repo", rhel9/nvidia-driver) and 7039d09 (the same for rhel10), so an image built before them cannot find them;
- RHEL 8 keeps them in BaseOS, whose EUS repository the container enables (2f04e11, "enable eus kernel for rhel8
  driver container"): what is missing there is the subscription that opens the repositories (an entitlement);
- CentOS Stream, Rocky and AlmaLinux mirrors carry the current minor's kernel packages: a node kernel the mirror no
  longer (or not yet) has needs a kernel the mirror carries, or a mirror of its own.
"""

from __future__ import annotations

import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.model import Fix
from gpuchain.doctor.node_image import os_release
from gpuchain.doctor.pods import PodState
from gpuchain.operator.operands import DRIVER, Operand

#: dnf's refusal (catalog.yaml), read here only where it names the kernel's header or devel package.
NO_MATCH = "dnf.no-match"
KERNEL_PACKAGE = re.compile(r"\bkernel-(?:headers|devel)-(\d\S*)")
#: A RHEL-family kernel's release with its minor stream: 5.14.0-570.112.1.el9_6.x86_64 -> major 9, minor 6.
EL_STREAM = re.compile(r"\.el(\d+)(?:_(\d+))?")
#: The release the container asks dnf for (its install command's ``--releasever=``).
RELEASEVER = re.compile(r"--releasever=(\d+(?:\.\d+)?)")
#: The gpu-driver-container commits that enable the AppStream EUS repository, by RHEL major.
APPSTREAM_EUS_FIX = {"9": "4fd766a", "10": "7039d09"}


def _repo_config(ctx: Context) -> str:
    """The ConfigMap of package repositories the ClusterPolicy gives the driver container ("" where none)."""
    spec = ((ctx.policy_obj or {}).get("spec") or {}).get("driver") or {}
    return str((spec.get("repoConfig") or {}).get("configMapName") or "")


def _repair(ctx: Context, view: NodeView, kernel: str, log: str) -> tuple[str, str]:
    """Why the packages of ``kernel`` are not found on this node (``log``: the driver container's), and the repair
    for that reason."""
    mirror = _repo_config(ctx)
    if mirror:
        return (
            f"the driver container reads the repositories of ConfigMap {mirror} (spec.driver.repoConfig), and they "
            f"carry no kernel-headers / kernel-devel {kernel}",
            f"add kernel-headers-{kernel} and kernel-devel-{kernel} to the repository ConfigMap {mirror} points at "
            f"(or point {ctx.policy_ref} spec.driver.repoConfig.configMapName at one that has them)",
        )
    os_id, _ = os_release(view.node)
    stream = EL_STREAM.search(kernel)
    major, minor = (stream.group(1), stream.group(2)) if stream else ("", None)
    asked = RELEASEVER.search(log)
    if asked is not None and minor is not None and asked.group(1) != f"{major}.{minor}":
        # The release comes from the operator (RHEL_VERSION, OPENSHIFT_VERSION in the driver's env), written once at
        # install by releases before 1.7.0 (NVIDIA/gpu-operator#190's known limitation), so a node upgrade leaves it.
        return (
            f"the driver container asks dnf for RHEL {asked.group(1)} packages (--releasever) while the node's kernel "
            f"is of RHEL {major}.{minor}",
            f"set RHEL_VERSION={major}.{minor} (on OpenShift OPENSHIFT_VERSION too) in spec.driver.env of "
            f"{ctx.policy_ref}, or delete and re-create the ClusterPolicy so the operator derives them again (it "
            "follows node upgrades from GPU Operator 1.7.0)",
        )
    arch = kernel.rsplit(".", 1)[-1] if kernel.endswith(("x86_64", "aarch64")) else "x86_64"
    local = (
        f"or mirror kernel-headers-{kernel} and kernel-devel-{kernel} into a repository of your own and name its "
        f"ConfigMap in {ctx.policy_ref} spec.driver.repoConfig.configMapName"
    )
    if os_id == "rhel" and major in APPSTREAM_EUS_FIX and minor is not None:
        eus = f"rhel-{major}-for-{arch}-appstream-eus-rpms"
        return (
            f"RHEL {major} publishes kernel-headers and kernel-devel in AppStream, and the kernels of an Extended "
            f"Update Support minor ({major}.{minor} here) only in {eus}, which driver images built before "
            f"NVIDIA/gpu-driver-container {APPSTREAM_EUS_FIX[major]} do not enable",
            f"run a driver image built from NVIDIA/gpu-driver-container rhel{major} at {APPSTREAM_EUS_FIX[major]} or "
            f"later (it enables {eus}; spec.driver.repository / version of {ctx.policy_ref}), with a RHEL "
            f"subscription that includes EUS; {local}",
        )
    if os_id == "rhel":
        return (
            "the RHEL repositories the driver container reads (its subscription's) carry no such package: the "
            "entitlement that opens them is missing or outdated",
            "give the driver container a current RHEL entitlement (Simple Content Access, or the cluster-wide "
            f"entitlement mounted into it); {local}",
        )
    if os_id in ("rhcos", "scos"):
        return (
            "an OpenShift node's kernel packages come from the RHEL and OpenShift repositories its cluster's "
            "entitlement opens, or from the release's Driver Toolkit image",
            "renew the cluster-wide entitlement (or turn on Simple Content Access) so the driver container reads those "
            f"repositories, or build with the Driver Toolkit image (spec.operator.use_ocp_driver_toolkit=true in "
            f"{ctx.policy_ref}); {local}",
        )
    return (
        "the distribution's mirrors carry the kernel packages of their current release, and not of this kernel",
        f"boot {view.name} into a kernel whose kernel-devel its mirror carries (and hold the kernel packages), {local}",
    )


def headers_missing(ctx: Context, *, view: NodeView, operand: Operand, state: PodState, log: str) -> Known | None:
    """The driver container's dnf finding no kernel-headers / kernel-devel of the node's kernel, with the repair for
    the reason the node shows; None where the driver's log does not say so."""
    found = catalog.find(log, NO_MATCH) if operand is DRIVER else None
    named = KERNEL_PACKAGE.search(found.line) if found is not None else None
    if found is None or named is None:
        return None
    kernel = named.group(1)
    why, repair = _repair(ctx, view, kernel, log)
    rerun = ctx.stack.render(Fix.delete_pod(state.restart_in(ctx.namespace), state.name))
    return Known(
        cause=f"the driver container cannot install the headers of kernel {kernel} to build nvidia.ko for it: {why}; "
        "nothing above the driver starts on the node.",
        evidence=(*found.evidence(), f"node kernel {view.kernel} (status.nodeInfo.kernelVersion)"),
        action=None,  # the image, the mirror or the subscription: set by the cluster's owners, none a scenario fact
        fix=f"# {repair}; then {rerun}",
    )

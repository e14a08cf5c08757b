"""Which NVIDIA driver release a node runs now, and what says so.

A check that compares a component's view of the driver with the driver itself (a DRA plugin's enumeration, a
toolkit release's support of a driver branch) needs the driver's current release, read from the freshest witness:
the driver container's own log of the run now going (nvidia-installer's "Installation of the kernel module ...
(version: <release>) is now complete"), the image its pod runs (NVIDIA's driver images are tagged
<release>-<os>), the release the stack's policy installs, and last the release GPU feature discovery labelled the
node with when it started (nvidia.com/cuda.driver-version.full), which a driver reloaded since leaves behind.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.releases import image_version
from gpuchain.kube.objects import name_of
from gpuchain.operator.operands import DRIVER

#: A full driver release (550.90.07, 580.95.05; the 3-part form every R450+ driver carries).
RELEASE = re.compile(r"\b(\d{3}\.\d{1,3}(?:\.\d{1,3})?)\b")
#: nvidia-installer's summary of the kernel module it installed, as the driver container prints it at each start.
INSTALLED = re.compile(r"kernel module .{0,120}\(version: (\d{3}\.\d{1,3}(?:\.\d{1,3})?)\)")
#: GFD's label of the driver's full release.
DRIVER_FULL = "nvidia.com/cuda.driver-version.full"


@dataclass(frozen=True)
class Running:
    """A node's driver release and the evidence line that says so."""

    release: str
    said_by: str


def release_key(text: str) -> tuple[int, ...] | None:
    """A driver release's numbers for ordering (570.172.08 -> (570, 172, 8)); None where ``text`` names none."""
    found = RELEASE.search(text)
    return tuple(int(p) for p in found.group(1).split(".")) if found else None


def policy_version_said(ctx: Context, wanted: str) -> str:
    """Where the policy's driver version came from, for the evidence line: a policy read back from the operand
    DaemonSets (`Stack.policy_inferred`, a dump without the ClusterPolicy) took it from the driver DaemonSet's image
    tag, which the user's policy never showed, so saying the policy names it would send them looking for a setting
    gpuchain did not read."""
    if ctx.stack.policy_inferred:
        return f"driver version {wanted} read back from the {ctx.ds(DRIVER)} DaemonSet's image"
    return f"spec.driver.version {wanted} of {ctx.policy_ref}"


def running_driver(ctx: Context, view: NodeView) -> Running | None:
    """The driver release ``view``'s node runs now (`module docstring`'s witnesses, freshest first); None where
    nothing on the node or in the policy names one."""
    pod = view.pod(DRIVER)
    if pod is not None:
        for container in (pod.get("spec") or {}).get("containers") or []:
            name = str(container.get("name", ""))
            said = INSTALLED.search(ctx.log(pod, name))
            if said:
                return Running(said.group(1), f"driver pod {name_of(pod)} log: kernel module {said.group(1)} installed")
        for container in (pod.get("spec") or {}).get("containers") or []:
            image, tag = image_version(str(container.get("image", "")))
            found = RELEASE.match(tag)
            if image == "driver" and found:
                return Running(found.group(1), f"driver pod {name_of(pod)} runs {container.get('image')}")
    if ctx.policy_obj is not None and ctx.deploys(DRIVER):
        wanted = str(((ctx.policy_obj.get("spec") or {}).get("driver") or {}).get("version") or "")
        found = RELEASE.fullmatch(wanted)
        if found:
            return Running(found.group(1), policy_version_said(ctx, wanted))
    label = view.labels.get(DRIVER_FULL, "")
    if RELEASE.fullmatch(label):
        return Running(label, f"label {DRIVER_FULL}={label}")
    return None

"""The driver's GSP firmware failing under a node whose pods still run: Xid 119 and 120 in its kernel log.

On GPUs whose driver runs the GPU System Processor firmware (from the 510 branch), the kernel module writes
"NVRM: Xid (PCI:...): 119, ... Timeout waiting for RPC from GSP%d! Expected function %d ..." when the firmware stops
answering, and Xid 120 when it faults (NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c
@580.65.06; NVIDIA's Xid catalog: GSP_RPC_TIMEOUT and GSP_ERROR, reset the GPU). The firmware ships with the driver,
so the lasting repair is a driver release without the fault (NVIDIA/open-gpu-kernel-modules#446 names the 510-535
branches; managed clouds move their GPU node images to newer ones, Azure/AKS#3454), and meanwhile the driver's
GSP firmware off. A node-problem monitor (node-problem-detector's kernel-monitor) posts these lines as Warning Events
on the Node, which is where the doctor reads them; the device plugin may still see the GPUs, so nothing else on the
chain shows the fault.
"""

from __future__ import annotations

import re

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.links.driver import check_driver
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp, LinkState, Severity
from gpuchain.gpu import xid as xids
from gpuchain.operator.operands import DRIVER

#: The kernel module's Xid line for the GSP firmware's timeout (119) or fault (120), as dmesg and a node-problem
#: monitor's Event carry it.
GSP_XID = re.compile(r"NVRM: Xid \((?:PCI:)?[0-9a-f:.]+\): (119|120)\b", re.IGNORECASE)
#: The module option that runs the driver without its GSP firmware (the open kernel module requires it on).
GSP_OFF = "options nvidia NVreg_EnableGpuFirmware=0"


def gsp_lines(view: NodeView) -> list[str]:
    """The messages of the Node's Warning Events that carry a GSP Xid, most repeated first."""
    events = [
        e
        for e in view.events
        if (e.get("involvedObject") or {}).get("kind") == "Node" and GSP_XID.search(str(e.get("message", "")))
    ]
    events.sort(key=lambda e: -int(e.get("count") or 1))
    return [str(e.get("message")) for e in events]


def _driver_move(ctx: Context) -> str:
    """Where this stack's driver comes from, and how it moves to a newer release there."""
    if ctx.stack.host_driver and ctx.stack.node_image:
        return f"move the node to a newer node image, whose driver branch is newer: {ctx.stack.node_image}"
    if ctx.deploys(DRIVER):
        return (
            f"upgrade the driver the operator installs to a newer branch (ClusterPolicy {ctx.policy_name} "
            "spec.driver.version)"
        )
    return "upgrade the node's NVIDIA driver packages to a newer branch"


def check_driver_and_gsp(ctx: Context, view: NodeView) -> Result:
    """The driver link's check, then the kernel's GSP Xids where that check finds the driver answering."""
    result = check_driver(ctx, view)
    lines = gsp_lines(view) if result.state is not LinkState.BROKEN else []
    if not lines:
        return result
    codes = sorted({int(m.group(1)) for ln in lines for m in [GSP_XID.search(ln)] if m})
    meaning = "; ".join(xids.describe(c).meaning for c in codes)
    action = (
        f"{_driver_move(ctx)}; until it runs there, reset the GPU or reboot the node when the Xid comes, or run "
        f"the driver without its GSP firmware ({GSP_OFF} in /etc/modprobe.d/, proprietary kernel module only, then "
        "reboot)"
    )
    fix = Fix(FixOp.NODE, view.name, {"action": action, NOT_SIMULATED: "a kernel Xid is no scenario fact"})
    finding = node_finding(
        view,
        fid="driver.gsp-xid",
        sev=Severity.ERROR,
        link="driver",
        cause="the NVIDIA driver's GSP firmware stops answering or faults on this node's GPUs (the kernel logs "
        f"{meaning}), so the CUDA calls of the pods on them fail while the GPUs stay announced; the firmware is "
        "the driver's, and driver releases fix its faults.",
        evidence=[f"node event: {ln}" for ln in lines[:3]],
        fix=ctx.stack.render(fix),
        action=fix,
    )
    return Result(LinkState.BROKEN, f"GSP firmware Xid {', '.join(map(str, codes))}", (finding,))

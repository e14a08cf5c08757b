"""A GPU that fell off the bus while the driver probed it: no Xid, one GPU fewer, and only the kernel's lines say so.

When nvidia.ko probes a GPU whose registers read all ones, it prints "NVRM: The NVIDIA GPU %04x:%02x:%02x.%x\\n
NVRM: (PCI ID: %04x:%04x) installed in this system has\\nNVRM: fallen off the bus and is not responding to commands.\\n"
and gives the GPU up (NV_ERR_GPU_IS_LOST; NVIDIA/open-gpu-kernel-modules src/nvidia/arch/nvalloc/unix/src/osapi.c
rm_is_supported_device), then "NVRM: The NVIDIA probe routine failed for %d device(s)." (kernel-open/nvidia/nv.c).
No Xid is written: the driver never drove the GPU, so NVML, the device plugin and GFD count one GPU fewer and nothing
in the chain fails. NVSentinel's syslog health monitor reads these journal lines (NVIDIA/NVSentinel#155, closed by
#195: a fatal health event with RESTART_BM, the Xid 79 they duplicate; before that it logged them and matched no
rule), a node-problem monitor posts them as Node Events. The repair is the Xid 79 one: drain and power-cycle the
node so the GPU enumerates again, and the GPU's hardware checked, reseated or replaced if it falls off again.

The monitor's log is read only on a node that offers fewer GPUs than its peers (doctor/probe_monitor.py): the one
sign in the node objects that a GPU is missing.
"""

from __future__ import annotations

import re

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.kernel_log import node_texts
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.probe_monitor import WHOLE, monitor_container
from gpuchain.kube.gpu_resources import node_gpu_resources
from gpuchain.kube.objects import name_of

#: The kernel's probe-time line (osapi.c), the GPU's address from the line before it, and the probe's count (nv.c).
FELL = re.compile(r"NVRM: fallen off the bus and is not responding to commands")
ADDRESS = re.compile(r"NVRM: The NVIDIA GPU (?P<bus>[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])", re.IGNORECASE)
PROBE = re.compile(r"NVRM: The NVIDIA probe routine failed for (?P<count>\d+) device")


def _kernel_text(ctx: Context, view: NodeView) -> tuple[str, str] | None:
    """(where, text) of the first place on the node that quotes the probe-time line: a Node Event or condition, or
    the syslog health monitor's log."""
    for text, where, *_ in node_texts(view):
        if FELL.search(text):
            return where, text
    for pod in view.workloads:
        container = monitor_container(pod)
        log = ctx.log(pod, container) if container else ""
        if FELL.search(log):
            return f"pod {name_of(pod)}", log
    return None


def fell_off_at_probe(ctx: Context, view: NodeView) -> Finding | None:
    """The node whose GPU fell off the bus when the driver probed it, from the kernel's own lines."""
    found = _kernel_text(ctx, view)
    if found is None:
        return None
    where, text = found
    fell = FELL.search(text)
    before = text[: fell.start()] if fell else text
    addresses = ADDRESS.findall(before)
    bus = addresses[-1] if addresses else None
    probe = PROBE.search(text)
    gpu = f"the GPU at {bus}" if bus else "a GPU"
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"drain the node and power-cycle it (a cold reboot) so {gpu} enumerates again; if it falls off "
            "the bus again, reseat it, check its power cables and cooling, or replace it",
            "drain": True,
            NOT_SIMULATED: "a GPU the kernel could not probe is no scenario fact",
        },
    )
    offered = node_gpu_resources(view.node).get(WHOLE, 0)
    return node_finding(
        view,
        fid="node.gpu-lost-at-probe",
        sev=Severity.ERROR,
        link="node",
        cause=f"{gpu} fell off the PCIe bus when the NVIDIA driver probed it (no Xid: the driver never drove it), so "
        f"the node offers {offered} {WHOLE} instead of all its GPUs; the driver, the plugin and GFD only count what "
        "the kernel gave them.",
        evidence=[
            f"{where}: NVRM: {'The NVIDIA GPU ' + bus + ' ... ' if bus else ''}fallen off the bus and is not "
            "responding to commands",
            f"{where}: NVRM: The NVIDIA probe routine failed for {probe.group('count')} device(s)" if probe else "",
            f"node {view.name} capacity {WHOLE}: {offered}",
        ],
        fix=ctx.stack.render(action),
        action=action,
    )

"""The GPU's and the driver's kernel-side faults: every Xid the node shows (doctor/kernel_log.py), read through the
one Xid table (gpuchain.gpu.xid: NVIDIA's catalog, its resolution bucket and thresholds) into a finding on the link
the Xid names, with that resolution's action on the GPU it names.

- The GSP firmware's Xids (119 GSP_RPC_TIMEOUT, 120 GSP_ERROR; the firmware ships with the driver, which writes
  "Timeout waiting for RPC from GSP%d! Expected function %d ..." when it stops answering, NVIDIA/open-gpu-kernel-
  modules src/nvidia/src/kernel/gpu/gsp/kernel_gsp.c@580.65.06) are the driver link's: the lasting repair is a driver
  release without the fault (NVIDIA/open-gpu-kernel-modules#446 names the 510-535 branches; managed clouds move their
  GPU node images to newer ones, Azure/AKS#3454), meanwhile the GPU reset the catalog names, or the driver without
  its GSP firmware.
- An Xid the catalog clears by resetting the GPU or rebooting the node (ECC and row remapping, NVLink, the bus, the
  GPU's own faults), or one that crossed its threshold, is the node's hardware: drain the GPU's pods and reset it
  (nvidia-smi -r -i <GPU>), or drain and reboot the node; the same Xid again after that is the GPU to replace.
- An Xid the catalog clears by restarting the application (13, 31, 43, 45 ...) is the workload's: the GPU still
  serves, so it is a warning with the restart, and the threshold that would make it the GPU's.
- An Xid the catalog leaves alone (63 a row remapped, 92 a high single-bit ECC rate) is information.

A lost GPU (Xid 79 with pods refused, NVML's GPU_IS_LOST) is links/hardware.py's finding, which stops the walk before
this one reads the node; the Xids the device plugin logged are its count check's (links/plugin_health.py).
"""

from __future__ import annotations

import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.kernel_log import Bus, Gpu, Seen, bus_text, mentioned, node_texts, node_xids, scrape_gpus
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.links.driver import check_driver
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, LinkState, Severity
from gpuchain.gpu import xid as xids
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN, DRIVER
from gpuchain.remediation.model import node_view

#: The module option that runs the driver without its GSP firmware (the open kernel module requires it on).
GSP_OFF = "options nvidia NVreg_EnableGpuFirmware=0"
#: The Xid number in the device plugin's XidCriticalError line (catalog k8s-device-plugin.xid-critical).
PLUGIN_XID = catalog.entry("k8s-device-plugin.xid-critical")
#: The catalog's component of the NVIDIA kernel module's own lines (NVRM: ...).
KERNEL = "NVIDIA kernel module"
XID_NUMBER = re.compile(r"Xid=(\d+)")
LEVELS = {"error": Severity.ERROR, "fatal": Severity.ERROR, "warning": Severity.WARNING, "info": Severity.INFO}


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


def _plugin_codes(ctx: Context, view: NodeView) -> set[int]:
    """The Xids the device plugin logged as XidCriticalError on this node (its count check reports them)."""
    pod = view.pod(DEVICE_PLUGIN)
    log = ctx.log(pod, ctx.container(DEVICE_PLUGIN)) if pod is not None else ""
    if "XidCriticalError" not in log:
        return set()
    return {int(m.group(1)) for ln in log.splitlines() if PLUGIN_XID.regex.search(ln) and (m := XID_NUMBER.search(ln))}


def _gpu_name(seen: Seen, gpus: dict[Bus, Gpu]) -> tuple[str, str]:
    """The GPU as a person names it (index and bus id where the exporter gives the index) and the id nvidia-smi -i
    takes (the index, else the bus id, else <GPU> when the line named none)."""
    if seen.bus is None:
        return "a GPU", "<GPU>"
    bus = bus_text(seen.bus)
    gpu = gpus.get(seen.bus)
    part = f" (its MIG GPU instance {seen.instance})" if seen.instance else ""
    if gpu is not None and gpu.index:
        return f"GPU {gpu.index} (PCI {bus}{', ' + gpu.uuid if gpu.uuid else ''}){part}", gpu.index
    return f"the GPU at PCI {bus}{part}", bus


def _repeated(seen: Seen, info: xids.XidInfo) -> bool:
    """Whether the occurrences reach the row's threshold within its window (unknown spans count as within)."""
    t = info.threshold
    return t is not None and seen.count >= t.count and (seen.span_s is None or seen.span_s <= t.window_s)


def _needs(seen: Seen) -> xids.Resolution:
    info = xids.describe(seen.code)
    return info.needs(_repeated(seen, info))


def _said(seen: Seen) -> str:
    info = xids.describe(seen.code)
    mnemonic = f", {info.mnemonic}" if info.mnemonic else ""
    times = f", {seen.count} times" if seen.count > 1 else ""
    return f"Xid {seen.code} ({info.meaning}{mnemonic}{times})"


def _evidence(seen: list[Seen]) -> list[str]:
    return (
        [f"{s.places[0]}: {s.lines[0]}" for s in seen[:4]]
        + [
            f"Xid {s.code}: NVIDIA's catalog resolution {xids.describe(s.code).bucket or 'none'}, gpuchain: "
            f"{_needs(s).value}" + (f" (threshold {t.describe()})" if (t := xids.describe(s.code).threshold) else "")
            for s in seen[:4]
        ]
        + [xids.source()]
    )


def _pods_on(view: NodeView, gpu: Gpu | None) -> list[str]:
    """The pods bound to ``gpu`` where gpuchain's repair loop recorded them, else the node's GPU pods."""
    bound = node_view(view.node).pods.get(gpu.uuid, ()) if gpu is not None and gpu.uuid else ()
    if bound:
        return sorted({"/".join(ref.split("/")[:2]) for ref in bound})
    return sorted(f"{namespace_of(p)}/{name_of(p)}" for p in view.workloads if pod_gpu_requests(p))


#: What the reset leaves to a person, by the part of the GPU the Xid names (gpu/xids.yaml groups): the memory's row
#: remapper and ECC counts (nvidia-smi -q -d ROW_REMAPPER,ECC), the NVLink's state (nvidia-smi nvlink -s), the card's
#: seating and power.
AFTER = {
    "memory": "a remapping failure or uncorrectable errors that return (nvidia-smi -q -d ROW_REMAPPER,ECC -i {id}) "
    "mean the GPU is replaced",
    "nvlink": "links that stay down after it (nvidia-smi nvlink -s -i {id}) are the NVLink cable, bridge or baseboard",
    "bus": "if it falls off again, reseat the GPU, check its power cables and cooling, or replace it",
}


def gpu_step(seen: Seen, gpus: dict[Bus, Gpu]) -> str:
    """The work on the node for one GPU's Xid, by what the catalog (or its threshold) says it needs."""
    name, ident = _gpu_name(seen, gpus)
    if _needs(seen) is xids.Resolution.REBOOT_NODE:
        step = f"{name}, {_said(seen)}: reboot the node"
    else:
        step = f"{name}, {_said(seen)}: nvidia-smi -r -i {ident} (reboot the node if the reset fails)"
    after = AFTER.get(xids.describe(seen.code).group)
    if after:
        step += f"; {after.format(id=ident)}"
    threshold = xids.describe(seen.code).threshold
    if threshold is not None and _repeated(seen, xids.describe(seen.code)):
        repeats = f"{seen.count} times, threshold {threshold.describe()}"
        return f"{step}; it repeated ({repeats}): replace the GPU if it comes back"
    return f"{step}; if the same Xid comes back after that, replace the GPU"


def _gpu_finding(ctx: Context, view: NodeView, seen: list[Seen], gpus: dict[Bus, Gpu]) -> Finding:
    """The Xids that need the GPU reset or the node rebooted: the GPU's pods drained (the node's, for a reboot),
    the work on the node, the node given back."""
    proven = any(s.warned for s in seen)
    steps = "; ".join(gpu_step(s, gpus) for s in seen[:4])
    reboot = any(_needs(s) is xids.Resolution.REBOOT_NODE for s in seen)
    done = f"; then kubectl uncordon {view.name}"
    if reboot:
        action = Fix(FixOp.NODE, view.name, {"action": steps + done, NOT_SIMULATED: "a kernel Xid is no scenario fact"})
        fix = ctx.stack.render(action)
    else:
        pods = sorted({p for s in seen for p in _pods_on(view, gpus.get(s.bus) if s.bus else None)})
        # One delete per pod: kubectl applies the last -n to every name of one command.
        deletes = "".join(f" && kubectl delete pod -n {p.split('/')[0]} {p.split('/')[1]}" for p in pods[:4])
        work = f"{steps}{done}"
        action = Fix(
            FixOp.NODE,
            view.name,
            {"action": work, "drain": False, NOT_SIMULATED: "a kernel Xid is no scenario fact"},
        )
        fix = f"kubectl cordon {view.name}{deletes}   # then on the node (outside the cluster): {work}"
    groups = sorted({xids.describe(s.code).group or "the GPU" for s in seen})
    return node_finding(
        view,
        fid="node.gpu-xid",
        sev=Severity.ERROR if proven else Severity.WARNING,
        link="node",
        cause=f"the NVIDIA driver reported {', '.join(_said(s) for s in seen[:4])} on this node's GPUs "
        f"({', '.join(groups)}): faults NVIDIA's Xid catalog clears only by resetting the GPU or rebooting the node, "
        "so pods on that GPU fail until it is; the node's hardware, not a link of the GPU stack"
        + ("" if proven else " (only the exporter's last Xid shows it: confirm with dmesg | grep -i xid on the node)"),
        evidence=_evidence(seen),
        fix=fix,
        action=action,
    )


#: The process a kernel Xid line names (kernel_rc.c: "pid=%s, name=%s, ").
PROCESS = re.compile(r"pid=(\d+), name=([^,]+),")


def _app_finding(view: NodeView, seen: list[Seen], gpus: dict[Bus, Gpu]) -> Finding:
    """The Xids NVIDIA's catalog clears by restarting the application: the workload's, the GPU still serves."""
    procs = sorted({f"{m.group(2)} (pid {m.group(1)})" for s in seen for ln in s.lines if (m := PROCESS.search(ln))})
    limits = sorted({f"Xid {s.code}: {t.describe()}" for s in seen if (t := xids.describe(s.code).threshold)})
    which = f"the application running {', '.join(procs[:3])}" if procs else "the application on that GPU"
    fix = (
        f"# restart {which}: delete its pod so its controller starts it again, and fix the application's fault (an "
        "illegal address, a bad kernel launch) if it recurs"
        + (f"; the GPU needs a reset only where one GPU repeats it ({'; '.join(limits)})" if limits else "")
    )
    on = ", ".join(sorted({_gpu_name(s, gpus)[0] for s in seen}))
    return node_finding(
        view,
        fid="workload.gpu-xid",
        sev=Severity.WARNING,
        link="workload",
        cause=f"an application faulted on {on} ({', '.join(_said(s) for s in seen[:4])}): NVIDIA's Xid catalog "
        "clears these by restarting the application, and the GPU still serves.",
        evidence=_evidence(seen),
        fix=fix,
    )


def _info_finding(view: NodeView, seen: list[Seen], gpus: dict[Bus, Gpu]) -> Finding:
    """The Xids NVIDIA's catalog names no action for."""
    return node_finding(
        view,
        fid="node.gpu-xid-noted",
        sev=Severity.INFO,
        link="node",
        cause=f"the NVIDIA driver noted {', '.join(_said(s) for s in seen[:4])} on "
        f"{', '.join(sorted({_gpu_name(s, gpus)[0] for s in seen}))}: NVIDIA's Xid catalog names no action for it; "
        "repeats over days are a GPU to watch (nvidia-smi -q -d ECC,ROW_REMAPPER).",
        evidence=_evidence(seen),
        fix="# nothing to do now; replace the GPU if the remapping or ECC counts keep rising",
    )


def _gsp_finding(ctx: Context, view: NodeView, seen: list[Seen], gpus: dict[Bus, Gpu]) -> Finding:
    """The GSP firmware's Xids: the driver's, with the release that fixes it as the lasting repair."""
    meaning = "; ".join(xids.describe(s.code).meaning for s in seen)
    where = ", ".join(sorted({_gpu_name(s, gpus)[1] for s in seen}))
    action = (
        f"{_driver_move(ctx)}; until it runs there, reset the GPU (nvidia-smi -r -i {where}) or reboot the node when "
        f"the Xid comes, or run the driver without its GSP firmware ({GSP_OFF} in /etc/modprobe.d/, proprietary "
        "kernel module only, then reboot)"
    )
    fix = Fix(FixOp.NODE, view.name, {"action": action, NOT_SIMULATED: "a kernel Xid is no scenario fact"})
    return node_finding(
        view,
        fid="driver.gsp-xid",
        sev=Severity.ERROR,
        link="driver",
        cause="the NVIDIA driver's GSP firmware stops answering or faults on this node's GPUs (the kernel logs "
        f"{meaning}), so the CUDA calls of the pods on them fail while the GPUs stay announced; the firmware is "
        "the driver's, and driver releases fix its faults.",
        evidence=[f"{s.places[0]}: {ln}" for s in seen for ln in s.lines[:3]][:3],
        fix=ctx.stack.render(fix),
        action=fix,
    )


def _kernel_lines(view: NodeView) -> list[Finding]:
    """The NVIDIA kernel module's other lines (catalog entries of its component, all of the driver link) that a
    node-problem monitor posted on the Node: the entry's cause and repair."""
    out: dict[str, Finding] = {}
    for text, where, _, warned, _ in node_texts(view):
        if "NVRM" not in text:
            continue
        found = catalog.find(text, *(e.id for e in catalog.entries() if e.component.startswith(KERNEL)))
        if found is None or found.entry.id in out:
            continue
        e = found.entry
        out[e.id] = node_finding(
            view,
            fid="driver.kernel-line",
            sev=LEVELS[e.level] if warned else Severity.INFO,
            link=e.link,
            cause=f"the NVIDIA kernel module on this node says: {e.cause}",
            evidence=[*found.evidence(where)],
            fix=f"# {e.repair(view.name)}",
        )
    return list(out.values())


def xid_findings(ctx: Context, view: NodeView) -> list[Finding]:
    """Every Xid of the node, by what it needs: the driver's (GSP), the GPU's (reset or reboot), the workload's
    (restart), or none; then the kernel module's other lines. Each list empty where none shows."""
    if not mentioned(ctx, view):
        return []
    scraped = scrape_gpus(ctx, view)
    seen = node_xids(ctx, view, scraped)
    kernel = _kernel_lines(view)
    if not seen:
        return kernel
    gpus, _ = scraped
    told = _plugin_codes(ctx, view)
    seen = [s for s in seen if s.code not in told]
    gsp = [s for s in seen if xids.describe(s.code).group == "firmware"]
    rest = [s for s in seen if s not in gsp]
    hardware = [s for s in rest if _needs(s).repairs]
    app = [s for s in rest if _needs(s) is xids.Resolution.RESTART_APP]
    noted = [s for s in rest if _needs(s) is xids.Resolution.NONE]
    out = [_gsp_finding(ctx, view, gsp, gpus)] if gsp else []
    out += [_gpu_finding(ctx, view, hardware, gpus)] if hardware else []
    out += [_app_finding(view, app, gpus)] if app else []
    out += [_info_finding(view, noted, gpus)] if noted else []
    return out + kernel


def check_driver_and_kernel(ctx: Context, view: NodeView) -> Result:
    """The driver link's check, then, where it finds the driver answering, the kernel's lines that prove the driver
    broken: the GSP firmware's Xids and the module's own errors a node-problem monitor posted."""
    result = check_driver(ctx, view)
    if result.state is LinkState.BROKEN:
        return result
    found = [f for f in xid_findings(ctx, view) if f.link == "driver" and f.severity is Severity.ERROR]
    if not found:
        return result
    return Result(LinkState.BROKEN, f"kernel: {', '.join(f.id for f in found)}", tuple(found))

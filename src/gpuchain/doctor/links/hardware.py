"""A GPU that fell off the bus, as the chain above it relays it: the node's own hardware, under every link.

NVML answers NVML_ERROR_GPU_IS_LOST once a GPU has left the PCIe bus (the kernel logs Xid 79, "GPU has fallen off
the bus"); the device plugin then cannot list its devices and the kubelet refuses every GPU pod at admission, the
runtime hook and CUDA fail on it. None of those components is broken: each only relays what the GPU did, and no
change to the driver, the toolkit or the plugin brings it back. The chain's `node` link is the node itself (its
kubelet, its runtime, its hardware), so that is the link named, with the work a person does on it.

A GPU whose infoROM (the board's configuration store) is corrupted is the board's fault too: NVML answers
NVML_ERROR_CORRUPTED_INFOROM, nvidia-smi warns "infoROM is corrupted at gpu <bus id>" and exits 14, so NVIDIA's driver
validation and the driver container's nvidia-smi probe fail although the driver loaded; the repair is the board.

Short of a lost GPU, the node's hardware speaks through the kernel's Xids (links/xid_events.py): those NVIDIA's
catalog clears by a GPU reset or a reboot are this link's too, without stopping the walk (the other GPUs still serve),
and the application's are the workload's warning. The driver's own (the GSP firmware's, the module's errors) are read
by the driver link's check instead.
"""

from __future__ import annotations

import dataclasses
import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.evidence import Failure
from gpuchain.doctor.kernel_log import mentioned, node_xids
from gpuchain.doctor.links.probe_lost import fell_off_at_probe
from gpuchain.doctor.links.xid_events import xid_findings
from gpuchain.doctor.model import Finding, Fix, FixOp, Severity
from gpuchain.gpu import xid as xids
from gpuchain.kube.objects import name_of, namespace_of

#: NVML's words for a lost GPU (catalog.yaml: go-nvml's ERROR_GPU_IS_LOST, nvml.h's text, the kernel's Xid 79 line).
LOST = "nvml.gpu-lost"
#: NVML's and nvidia-smi's words for a GPU whose infoROM is corrupted (nvml.h NVML_ERROR_CORRUPTED_INFOROM).
INFOROM = "nvml.corrupted-inforom"
#: The bus id nvidia-smi names with it ("WARNING: infoROM is corrupted at gpu 0000:0B:00.0").
INFOROM_AT = re.compile(r"infoROM is corrupted at gpu ([0-9A-Fa-f:.]+)")
#: The witnesses that are a refusal of the GPU, not a component's own state: GPU pods the kubelet rejected at
#: admission, and containers that failed on it. A running device plugin's log of a lost GPU is read by the plugin's
#: count check (gpu.lost), which names the GPU and the pods still bound to it.
RELAYED = ("Running",)


def gpu_lost(ctx: Context, view: NodeView, witnessed: list[Failure]) -> Finding | None:
    """The node whose GPU fell off the bus, from the first witness whose words say NVML found a GPU lost (the
    kubelet's admission refusals first: they name every GPU pod the node turns away); None where none says so."""
    lost = [(f, m) for f in witnessed if f.reason not in RELAYED and (m := catalog.find(f.text, LOST)) is not None]
    if not lost:
        return None
    lost.sort(key=lambda pair: pair[0].reason != "UnexpectedAdmissionError")
    first, said = lost[0]
    relayed = catalog.known_error(first.text)
    refused = sorted({f"{namespace_of(f.pod)}/{name_of(f.pod)}" for f, _ in lost})
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": "reboot the node (or, with no process left on it, reset the GPU: nvidia-smi -r -i <its index>) "
            "so the GPU comes back on the bus; if it falls off again (Xid 79 in the kernel log: dmesg | grep -i xid), "
            f"replace the GPU or the node; then kubectl uncordon {view.name}",
            "fact": "replace-gpu",
        },
    )
    return Finding(
        id="node.gpu-lost",
        severity=Severity.ERROR,
        link="node",
        cause="a GPU of this node fell off the bus (NVML answers that the GPU is lost), so the device plugin cannot "
        "list its devices and the kubelet refuses GPU pods here: the node's hardware, not a link of the GPU "
        "stack, which only relays it.",
        evidence=tuple(
            e
            for e in (
                first.describe(),
                *said.evidence("says"),
                relayed.entry.cite() if relayed is not None and relayed.entry.id != LOST else "",
                f"pods refused or failing on it: {', '.join(refused[:5])}",
            )
            if e
        ),
        fix=ctx.stack.render(action),
        node=view.name,
        action=action,
    )


def inforom_corrupted(ctx: Context, view: NodeView, witnessed: list[Failure]) -> Finding | None:
    """The node with a GPU whose infoROM is corrupted, from the first failing container (the driver validation's
    nvidia-smi, the driver container's) or Event (its startup probe's output) that says so; None where none does."""
    said = next(
        ((f.describe(), m) for f in witnessed if (m := catalog.find(f.text, INFOROM)) is not None),
        None,
    ) or next(
        (
            (f"event {e.get('reason')}: {m.line}", m)
            for e in view.events
            if (m := catalog.find(str(e.get("message", "")), INFOROM)) is not None
        ),
        None,
    )
    if said is None:
        return None
    where, match = said
    bus = INFOROM_AT.search(match.line)
    gpu = f"the GPU at {bus.group(1)}" if bus else "the GPU nvidia-smi names"
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"replace {gpu}: its infoROM is corrupted, a fault of the board that no driver or operand "
            "setting cures (NVIDIA's support may reflash the infoROM); then kubectl uncordon "
            f"{view.name} and the driver validation passes",
            "fact": "replace-gpu",
        },
    )
    return Finding(
        id="node.gpu-inforom-corrupted",
        severity=Severity.ERROR,
        link="node",
        cause=f"{gpu} of this node has a corrupted infoROM: NVML answers NVML_ERROR_CORRUPTED_INFOROM and nvidia-smi "
        "exits 14, so NVIDIA's driver validation and every nvidia-smi probe fail here and the operands wait: the "
        "node's hardware, not a link of the GPU stack.",
        evidence=(where, *match.evidence("says")),
        fix=ctx.stack.render(action),
        node=view.name,
        action=action,
    )


def gpu_faults(ctx: Context, view: NodeView, witnessed: list[Failure]) -> list[Finding]:
    """The node's hardware: a lost GPU (`gpu_lost`, which stops the walk, so its Xid 79 is told once) or a corrupted
    infoROM (`inforom_corrupted`, which stops it too), else the Xids the node shows that are not the driver link's."""
    lost = gpu_lost(ctx, view, witnessed)
    if lost is None:
        inforom = inforom_corrupted(ctx, view, witnessed)
        if inforom is not None:
            return [inforom]
        at_probe = fell_off_at_probe(ctx, view)
        return [f for f in xid_findings(ctx, view) if f.link != "driver"] + ([at_probe] if at_probe else [])
    # The kernel's own word for it, where the node shows one, names the GPU that left the bus.
    off = [s for s in node_xids(ctx, view) if xids.describe(s.code).group == "bus"] if mentioned(ctx, view) else []
    said = tuple(f"{s.places[0]}: {s.lines[0]}" for s in off[:2])
    return [dataclasses.replace(lost, evidence=lost.evidence + said)]

"""An operand pod of the GPU chain the node's kubelet refused at admission, so the link it runs never starts there: the
node (its kubelet's settings or release) is the root, not the operand.

The kubelet admits each pod bound to its node before it starts it; a pod it refuses is Failed, with the refusal's
reason and message in its status, and the kubelet posts a Warning Event on the pod with the same reason (kubernetes
pkg/kubelet/kubelet.go rejectPod). The reasons form one family (kubelet.go admissionRejectionReasons; the
predicates of pkg/kubelet/lifecycle/predicate.go, the Topology Manager's TopologyAffinityError in
pkg/kubelet/cm/topologymanager, the CPU manager's SMTAlignmentError in pkg/kubelet/cm/cpumanager, the eviction
manager's Evicted, sysctl's SysctlForbidden, the node shutdown manager's NodeShutdown), each naming what on the node
refused the pod, which is also what a person changes. A DaemonSet pod the kubelet refuses is made again and refused
again while the node stays as it is, so its link never comes up: for the device plugin, the node never announces its
GPUs.

UnexpectedAdmissionError (the device manager's refusal of a pod's devices) is read where the GPU workloads' devices
are (links/kubelet_defects, links/plugin_validator), not here: it refuses GPU requests, which no operand makes.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuchain.doctor.admission_reasons import refusal
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.links.kubelet_defects import kubelet_defect, kubelet_upgrade
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.node import node_info
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN, DRIVER, TOOLKIT, VALIDATOR

#: The operands of the foundation links, by their state names: a refused pod of one stops the node's chain.
FOUNDATION_OPERANDS = {
    DRIVER.state: "driver",
    TOOLKIT.state: "toolkit",
    VALIDATOR.state: "toolkit",
    DEVICE_PLUGIN.state: "device-plugin",
}
#: The finding: the node's kubelet refuses a pod of the chain.
FINDING = "node.admission-refused"


@dataclass(frozen=True, kw_only=True)
class Refused:
    """One refusal of a chain's pod on the node: the pod's name, its operand, the reason and the kubelet's words."""

    pod: str
    operand: str
    reason: str
    message: str
    where: str  #: "pod status" or "event"
    best_effort: bool


def _best_effort(pod: Obj) -> bool:
    """Does no container of the pod request or limit any resource (QoS BestEffort)?"""
    spec = pod.get("spec") or {}
    return not any(
        (c.get("resources") or {}).get("requests") or (c.get("resources") or {}).get("limits")
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    )


def _operand(ctx: Context, namespace: str, owner: str) -> str:
    return next(iter(ctx.stack.operands_in(namespace, owner)), "")


def _refused_here(ctx: Context, view: NodeView) -> list[Refused]:
    """The chain's pods the node's kubelet refused: its Failed pods (`Snapshot.refused`) and its Events on pods it
    refused, whose operand has no live pod on the node now."""
    out = []
    for pod in ctx.snapshot.refused:
        status = pod.get("status") or {}
        reason = str(status.get("reason") or "")
        if (pod.get("spec") or {}).get("nodeName") != view.name or refusal(reason) is None:
            continue
        owners = [str(r.get("name")) for r in (pod.get("metadata") or {}).get("ownerReferences") or []]
        operand = next((op for o in owners if (op := _operand(ctx, namespace_of(pod) or "", o))), "")
        if operand:
            out.append(
                Refused(
                    pod=name_of(pod),
                    operand=operand,
                    reason=reason,
                    message=str(status.get("message") or ""),
                    where="pod status",
                    best_effort=_best_effort(pod),
                )
            )
    for e in view.events:
        ref = e.get("involvedObject") or {}
        reason = str(e.get("reason") or "")
        if ref.get("kind") != "Pod" or refusal(reason) is None:
            continue
        name = str(ref.get("name") or "")
        ns = str(ref.get("namespace") or "")
        operand = next(
            (st for st, ds in ctx.stack.daemonsets.items() if name.startswith(f"{ds}-") and _operand(ctx, ns, ds)), ""
        )
        if operand and not any(r.pod == name for r in out):
            message = str(e.get("message") or "")
            out.append(
                Refused(pod=name, operand=operand, reason=reason, message=message, where="event", best_effort=False)
            )
    return [r for r in out if r.operand not in view.operand_pods]


def admission_refused(ctx: Context, view: NodeView) -> list[Finding]:
    """The node's kubelet refusing a pod of a foundation link (driver, toolkit, device plugin) at admission: that link
    never starts on the node. The repair is the kubelet's setting that refused it, or its release where a known defect
    of that release refuses such a pod."""
    found = [r for r in _refused_here(ctx, view) if _link_of(r.operand)]
    if not found:
        return []
    first = found[0]
    said = refusal(first.reason)
    assert said is not None  # _refused_here keeps only known reasons
    version = node_info(view.node).get("kubeletVersion", "")
    work = said.repair
    evidence = [
        f"pod {r.pod} ({r.operand}) refused by the kubelet ({r.where}): {r.reason}: {r.message}".rstrip(": ")
        for r in found[:3]
    ]
    known = (
        kubelet_defect(view.node, "besteffort-topology-refused") if first.reason == "TopologyAffinityError" else None
    )
    cause = (
        f"the node's kubelet refuses the {first.operand} pod at admission ({first.reason}): {said.what}, so "
        f"{first.operand} never starts on the node"
        + ("; without it the node announces no GPU" if _link_of(first.operand) == "device-plugin" else "")
        + "."
    )
    if known is not None and first.best_effort:
        defect, fixed = known
        work = f"{kubelet_upgrade(view, defect, fixed)}; until then: {defect.workaround}"
        cause += (
            f" The pod requests no resource at all, and the node's kubelet ({version}) has a known defect: "
            f"{defect.cause}"
        )
        evidence += [
            f"status.nodeInfo.kubeletVersion: {version} (fixed in {fixed})",
            defect.cite(),
            f"release note: {defect.line}",
        ]
    action = Fix(
        FixOp.NODE,
        view.name,
        {"action": work, "drain": False, NOT_SIMULATED: "a kubelet's admission settings are not simulated"},
    )
    return [
        node_finding(
            view,
            fid=FINDING,
            sev=Severity.ERROR,
            link="node",
            cause=cause,
            evidence=[*evidence, f"status.nodeInfo.kubeletVersion: {version}" if known is None else ""],
            fix=ctx.stack.render(action) + "   # its DaemonSet then starts the pod again and the kubelet admits it",
            action=action,
        )
    ]


def _link_of(operand: str) -> str:
    """The foundation link an operand state belongs to ("" for the links above them)."""
    return FOUNDATION_OPERANDS.get(operand, "")

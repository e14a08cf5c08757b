"""A GPU Operator that places its operands on no node: no node reads as a GPU node, so no chain is walked, and
only the operator itself says why (its log, its ClusterPolicy's conditions: doctor/operator_says.py).

With Node Feature Discovery's labels missing everywhere, a bare-metal GPU node carries no sign of its GPUs the
doctor reads (no NFD label, no nvidia.com/gpu.present, no GPU capacity), which is the very fault: the operator says
so ("NFD labels missing in the cluster", reason ``NFDLabelsMissing``; "No GPU node can be found in the cluster",
reason ``NoGPUNodes``). What repairs it is NFD's own state (links/nfd_pods.py), or installing NFD where none runs.
A cluster where NFD runs and labels its nodes but none has an NVIDIA device has no GPU node now (a pool scaled to
zero): no finding. Any other reason the operator gives (an admission webhook refusing its DaemonSets, the driver
step failing) is the catalog entry's, and a line no entry knows is reported as unrecognised.
"""

from __future__ import annotations

from gpuchain.doctor.context import Context
from gpuchain.doctor.links.deployed import NFD_PREFIX, nfd_hint, nfd_install, said_by_operator
from gpuchain.doctor.links.nfd_pods import nfd_down, nfd_pods
from gpuchain.doctor.model import Finding, Fix, Severity
from gpuchain.doctor.next_steps import next_step
from gpuchain.doctor.nfd import NFD_LINK
from gpuchain.doctor.removed_apis import API_NOT_SERVED, api_repair
from gpuchain.kube.objects import labels_of
from gpuchain.operator.operands import NFD_GPU_LABELS

#: What the operator says when no node carries any NFD label (not only none of a GPU).
NO_NFD_LABEL = frozenset({"gpu-operator.nfd-labels-missing", "gpu-operator.condition-nfd-labels-missing"})


def nothing_placed(ctx: Context) -> list[Finding]:
    """The finding for a GPU Operator that deploys on no node, with the reason it gives; [] where a GPU node is
    walked (its chain names what is missing there) or the operator gives none."""
    if ctx.views or ctx.stack.id != "gpu-operator":
        return []
    said = said_by_operator(ctx)
    if said is None:
        return []
    if said.match is None:
        if said.unknown is None:
            return []
        return [
            Finding(
                id="log.unrecognised",
                severity=Severity.WARNING,
                link="driver",
                cause="the GPU Operator runs but no node carries its operands, and its log's error names why in a "
                "line gpuchain's catalog does not know, so gpuchain names no cause and no repair for it.",
                evidence=said.evidence,
                fix=f"# {next_step(ctx, link='driver', line=said.unknown)}",
            )
        ]
    entry = said.match.entry
    evidence = list(said.evidence)
    action: Fix | None = None
    if not said.about_nfd:
        unserved = (
            api_repair(ctx, line=said.match.line, namespace=ctx.namespace) if entry.id == API_NOT_SERVED else None
        )
        return [
            Finding(
                id="operand.not-deployed",
                severity=Severity.ERROR,
                link=entry.link,
                cause=f"the GPU Operator runs but deploys its operands on no node: {(unserved or entry).cause}",
                evidence=(*evidence, *(unserved.evidence if unserved else ())),
                fix=unserved.fix if unserved else "# " + entry.repair(namespace=ctx.namespace),
                root=True,
            )
        ]
    down = nfd_down(ctx, view=None, label=NFD_GPU_LABELS[0])
    running = bool(nfd_pods(ctx))
    labelled = any(k.startswith(NFD_PREFIX) for n in ctx.snapshot.nodes for k in labels_of(n))
    if down is not None:
        cause = f"the GPU Operator places its operands on no node because {down.cause}"
        evidence += down.evidence
        fix, action = down.fix, down.action
    elif not running and not labelled:
        action = nfd_install()
        cause = (
            "the GPU Operator places its operands on no node: no Node Feature Discovery runs and no node carries "
            f"its labels, so the operator finds no GPU node ({NFD_GPU_LABELS[0]} is on none)."
        )
        fix = ctx.stack.render(action) + nfd_hint(ctx)
    elif entry.id in NO_NFD_LABEL:
        cause = f"the GPU Operator places its operands on no node: {entry.cause}"
        fix = "# " + entry.repair(namespace=ctx.namespace)
    else:
        # NFD runs and labels the nodes, none with an NVIDIA device: no GPU node now.
        return []
    return [
        Finding(
            id="nfd.not-labelled",
            severity=Severity.ERROR,
            link=NFD_LINK,
            cause=cause if cause.endswith(".") else cause + ".",
            evidence=tuple(evidence),
            fix=fix,
            root=True,
            action=action,
        )
    ]

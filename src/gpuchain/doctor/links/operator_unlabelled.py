"""A GPU node that Node Feature Discovery marks as having an NVIDIA device but that NVIDIA's GPU Operator never
labelled: the operator has not reconciled since the node joined, so none of its operands is placed there.

The operator gives every node with one of NFD's NVIDIA PCI labels (its ``gpuNodeLabels``: pci-10de, pci-0302_10de,
pci-0300_10de) ``nvidia.com/gpu.present=true`` and the ``nvidia.com/gpu.deploy.*`` labels its DaemonSets select on,
and it does so only while it reconciles (NVIDIA/gpu-operator controllers/state_manager.go labelGPUNodes@v24.9.0;
pkg/controller/clusterpolicy/state_manager.go@1.3.0, where the DaemonSets selected on nvidia.com/gpu.present; before
1.2.0 it set no label and its DaemonSets selected NFD's pci-10de label themselves). Up to 1.3.x it reconciled on its
ClusterPolicy and its operands' pods only; 1.4.0 added a watch on Nodes that reconciles when a node's GPU labels
change (pkg/controller/clusterpolicy/clusterpolicy_controller.go@1.4.0, the ``corev1.Node``
watch; absent @1.3.0). So an NFD-marked node without the operator's label is one no reconcile has reached: the
operator starting again labels it (it reconciles on start), and on a release before 1.4.0 the next node to join
waits the same way until the operator is upgraded.

The link is feature discovery's (``NFD_LINK``), as for NFD's own missing label (links/deployed.py): labels are
how the stack finds its GPU nodes, whichever operand their absence keeps off the node."""

from __future__ import annotations

from gpuchain.common.labels import DEPLOY_PREFIX, GPU_PRESENT
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, gpus_present, node_finding
from gpuchain.doctor.links.releases import operator_at_least, operator_release
from gpuchain.doctor.model import NOT_SIMULATED, Fix, LinkState, Severity
from gpuchain.doctor.nfd import NFD_LINK
from gpuchain.doctor.placement import Blocker
from gpuchain.doctor.pods import pod_state
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import NFD_GPU_LABELS

#: The first GPU Operator release that labels GPU nodes from NFD's labels (nvidia.com/gpu.present from any of
#: ``NFD_GPU_LABELS``: pkg/controller/clusterpolicy/state_manager.go@1.2.0 gpuNodeLabels, absent @1.1.7, whose
#: DaemonSets selected feature.node.kubernetes.io/pci-10de.present themselves).
LABELLING_OPERATOR = "1.2.0"
#: The first GPU Operator release that reconciles when a node's GPU labels change (its Node watch).
NODE_WATCH_OPERATOR = "1.4.0"
#: The operator's Deployment (deployments/gpu-operator/templates/operator.yaml@1.3.0 and @v24.9.0).
OPERATOR_DEPLOYMENT = "gpu-operator"


def _operator_label(block: Blocker | None) -> bool:
    """Whether nothing keeps the operand's DaemonSet off the node, or only a label the operator itself sets."""
    if block is None:
        return True
    key = str(block.detail.get("key", ""))
    return block.kind == "selector" and (key == GPU_PRESENT or key.startswith(DEPLOY_PREFIX))


def operator_unlabelled(
    ctx: Context, *, view: NodeView, block: Blocker | None, name: str, link: str, operator: Obj | None
) -> Result | None:
    """``operator.node-unlabelled``: on the GPU Operator, this node carries one of NFD's NVIDIA labels but not the
    operator's ``nvidia.com/gpu.present``, and the operand's DaemonSet ``name`` has no pod here for no other reason
    than the operator's labels (``block``). The repair restarts the ``operator`` pod (it reconciles on start), or,
    where the source lists none, its Deployment. None where any of that does not hold."""
    marked = sorted(k for k in NFD_GPU_LABELS if view.labels.get(k) == "true")
    if ctx.stack.id != "gpu-operator" or not marked or view.labels.get(GPU_PRESENT) == "true":
        return None
    running = operator_release(ctx)[0]
    if not _operator_label(block) or (running and not operator_at_least(ctx, LABELLING_OPERATOR)):
        return None  # before 1.2.0 the DaemonSets select NFD's own label: links/deployed.py's NFD paths answer
    action: Fix | None = None
    evidence: list[str] = []
    if operator is not None:
        state = pod_state(operator)
        action = Fix.delete_pod(
            state.restart_in(ctx.namespace),
            state.name,
            **{NOT_SIMULATED: "the simulator runs no operator that would label the node"},
        )
        fix, evidence = ctx.stack.render(action), [state.describe()]
    else:
        fix = f"kubectl -n {ctx.namespace} rollout restart deployment {OPERATOR_DEPLOYMENT}"
    fix += (
        f"   # restarting the gpu-operator pod triggers a reconcile, which labels {view.name} {GPU_PRESENT}=true and "
        "deploys the operands there"
    )
    if running and not operator_at_least(ctx, NODE_WATCH_OPERATOR):
        fix += (
            f"; for good, upgrade the GPU Operator ({running}) to {NODE_WATCH_OPERATOR} or later, whose operator "
            "watches nodes and labels a GPU node when it joins"
        )
    if not running and NFD_GPU_LABELS[0] not in marked:
        fix += (
            f"; on a GPU Operator before {LABELLING_OPERATOR} (no release shows here), whose DaemonSets select "
            f"{NFD_GPU_LABELS[0]} itself, label the node {NFD_GPU_LABELS[0]}=true instead, or have NFD publish the "
            "vendor-only label (its sources.pci.deviceLabelFields: [vendor])"
        )
    cause = (
        f"Node Feature Discovery marks this node as having an NVIDIA device ({marked[0]}), but NVIDIA's GPU Operator "
        f"never labelled it {GPU_PRESENT}=true nor gave it the {DEPLOY_PREFIX}* labels its DaemonSets select on: the "
        "operator has not reconciled since the node joined (it labels GPU nodes only while it reconciles), so "
        f"{name} and the other operands place no pod here and the {link} link, the first, is missing."
    )
    return Result(
        LinkState.BROKEN,
        "the GPU Operator never labelled this node",
        (
            node_finding(
                view,
                fid="operator.node-unlabelled",
                sev=Severity.ERROR,
                link=NFD_LINK,
                cause=cause,
                evidence=[
                    f"{marked[0]}=true, no {GPU_PRESENT} label",
                    f"{name} places no pod on {view.name}",
                    f"GPUs present: {gpus_present(view)}",
                    *evidence,
                ],
                fix=fix,
                action=action,
            ),
        ),
    )

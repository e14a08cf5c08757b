"""What every link's check shares: its result, how it words a finding, and how it finds its operand.

The checks are one module per link (`driver`, `toolkit`, `device_plugin`, `gfd`, `exporter`, `mig`,
`workload`); each is a pure function of a node's view and the cluster context that returns the link's
state, a one-line summary and the findings it made. The walk (`gpuchain.doctor.diagnose`) calls them
bottom-up and stops at the first broken foundation link. Finding ids are stable; every finding carries
evidence (objects, log lines, numbers), its cause in one sentence and a fix, written by the stack's one
fix renderer (`Stack.render`) wherever the fix is a change gpuchain can state as data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from gpuchain.common.labels import GPU_PRESENT, OPERANDS_LABEL
from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.operand_tolerations import policy_lists, unlisted
from gpuchain.doctor.model import Finding, Fix, FixOp, LinkState, Severity
from gpuchain.doctor.placement import Blocker, tolerations_for
from gpuchain.doctor.releases import Defect, showing
from gpuchain.doctor.stacks.base import daemonsets_in, is_gpu_node
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of
from gpuchain.operator.operands import NFD_GPU_LABELS, Operand, deploy_label

GPU_COUNT = "nvidia.com/gpu.count"
DRIVER_VERSION = "nvidia.com/cuda.driver-version.full"
#: What NVIDIA's plugin logs once it could dlopen libnvidia-ml.so.1 in its container (go-nvlib pkg/nvlib/info
#: HasNvml's reason, which k8s-device-plugin's factory.go logs as "Detected NVML platform: %v"): the runtime gave it
#: the driver's library, so an NVML failure after it is not a runtime without NVIDIA's hook.
NVML_FOUND = "Detected NVML platform: found NVML library"


@dataclass(frozen=True)
class Result:
    """What one check concluded about one link on one node."""

    state: LinkState
    summary: str
    findings: tuple[Finding, ...] = ()


def node_finding(
    view: NodeView,
    *,
    fid: str,
    sev: Severity,
    link: str,
    cause: str,
    evidence: list[str],
    fix: str,
    action: Fix | None = None,
) -> Finding:
    """A finding about ``view``'s node; empty evidence lines (a fact that did not apply) are dropped."""
    return Finding(
        id=fid,
        severity=sev,
        link=link,
        cause=cause,
        evidence=tuple(e for e in evidence if e),
        fix=fix,
        node=view.name,
        action=action,
    )


def opted_out(view: NodeView, operand: Operand) -> str | None:
    """The label that keeps ``operand`` off this node (``key=false``), if any."""
    for key in (OPERANDS_LABEL, view.deploy_labels.get(operand.state, deploy_label(operand))):
        if view.labels.get(key) == "false":
            return f"{key}=false"
    return None


def operand_daemonset(ctx: Context, operand: Operand) -> Obj | None:
    """The operand's DaemonSet in the stack's namespace (by name, or by prefix such as NVIDIADriver's): looked up
    once a diagnosis (`Context.memo`), where each node's checks asked again, a pass over every DaemonSet each."""
    known = cast("dict[str, Obj | None]", ctx.memo.setdefault("operand_daemonset", {}))
    if operand.state not in known:
        known[operand.state] = _operand_daemonset(ctx, operand)
    return known[operand.state]


def _operand_daemonset(ctx: Context, operand: Operand) -> Obj | None:
    mine = daemonsets_in(ctx.snapshot, ctx.namespace)
    if ctx.ds(operand) in mine:
        return mine[ctx.ds(operand)]
    return next((d for n, d in sorted(mine.items()) if ctx.stack.operand_of(n) == operand.state), None)


def placement_fix(ctx: Context, *, view: NodeView, ds: Obj, block: Blocker) -> Fix:
    """The change that lets ``ds`` place its pod: tolerate the taint (through the stack's policy for its own
    DaemonSets, on the DaemonSet itself for a release in another namespace), or give the node the label."""
    if block.kind == "taint":
        needed = tolerations_for(block)
        ns = namespace_of(ds) or ctx.namespace
        # Where the policy already lists them, its operator did not apply them to this DaemonSet: the DaemonSet
        # itself lacks them (`operand_tolerations`), and a policy patch would only repeat them.
        if ctx.policy_obj is not None and ns == ctx.namespace and not policy_lists(ctx, block):
            tolerations = unlisted(ctx, block, needed)
            return Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"daemonsets": {"tolerations": tolerations}}})
        current = (((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("tolerations") or []
        patch = {"spec": {"template": {"spec": {"tolerations": [*current, *needed]}}}}
        return Fix(FixOp.PATCH_DAEMONSET, f"{ns}/{name_of(ds)}", patch)
    d = block.detail
    values = list(d.get("values") or [])
    widened = _widened(ds, view, block) if str(d["key"]).startswith(PLATFORM_LABELS) else None
    if widened is not None:
        return widened
    if d.get("operator") in ("NotIn", "DoesNotExist"):
        return Fix(FixOp.LABEL_NODE, view.name, {str(d["key"]): None})
    return Fix(FixOp.LABEL_NODE, view.name, {str(d["key"]): str(values[0]) if values else "true"})


#: Node labels the platform sets and keeps, which a person does not change to move a pod: the node's pool, machine
#: type, zone and name (AKS kubernetes.azure.com/agentpool, EKS eks.amazonaws.com/nodegroup, GKE
#: cloud.google.com/gke-nodepool, Karpenter's karpenter.sh/nodepool, the kubelet's well-known labels). Labelling a
#: node with another pool's name misstates it (and the cloud puts its own back); a DaemonSet kept to one pool by such a
#: label is widened to the node's.
PLATFORM_LABELS = (
    "kubernetes.azure.com/",
    "agentpool",
    "eks.amazonaws.com/",
    "alpha.eksctl.io/",
    "cloud.google.com/gke-",
    "karpenter.sh/",
    "karpenter.k8s.aws/",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    "topology.kubernetes.io/",
    "kubernetes.io/hostname",
)


def _widened(ds: Obj, view: NodeView, block: Blocker) -> Fix | None:
    """The patch that lets ``ds`` onto ``view``'s node where a platform label's value keeps it off: the nodeSelector
    entry becomes a required node affinity term that takes the node's value beside the old one, or the failing In
    expression takes it too (a merge patch replaces the affinity whole: its other terms are written back as they are).
    None where the selector is not such an equality or In (then the label is the repair)."""
    key = str(block.detail["key"])
    value = labels_of(view.node).get(key)
    if value is None or block.detail.get("operator") not in ("=", "In"):
        return None
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if key in selector:
        # The selector's equality becomes an In expression ANDed into each term the DaemonSet has (one of its own
        # where it has none): the same nodes as before, and this node's pool.
        wider = {"key": key, "operator": "In", "values": [str(selector[key]), value]}
        terms = [{**t, "matchExpressions": [*(t.get("matchExpressions") or []), wider]} for t in terms or [{}]]
        patch: dict[str, object] = {"nodeSelector": {key: None}}
    else:
        terms = [
            {
                **t,
                "matchExpressions": [
                    {**e, "values": [*(e.get("values") or []), value]}
                    if e.get("key") == key and e.get("operator") == "In"
                    else e
                    for e in t.get("matchExpressions") or []
                ],
            }
            for t in terms
        ]
        patch = {}
    patch["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    }
    return Fix(FixOp.PATCH_DAEMONSET, f"{namespace_of(ds)}/{name_of(ds)}", {"spec": {"template": {"spec": patch}}})


def said_in(log: str) -> list[str]:
    """What a crashed container's log says, as evidence: the line a catalog entry knows and the entry,
    else its last error line (or its last line, its final word) quoted as unrecognised."""
    known = catalog.known_error(log)
    if known is not None:
        return list(known.evidence())
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    odd = catalog.unknown_error(log) or (lines[-1] if lines else None)
    return [f"unrecognised: {odd}"] if odd else []


def operand_log(ctx: Context, *, view: NodeView, operand: Operand, container: str, last: str) -> str:
    """The container's last lines from its status, else the log the gather step read ("" if none);
    of a container that serves several operands, the lines of this one (`Stack.own_lines`)."""
    pod = view.pod(operand)
    if last or pod is None:
        return ctx.stack.own_lines(operand.state, last)
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return ctx.stack.own_lines(operand.state, ctx.log(pod, container or str(containers[0].get("name", ""))))


@dataclass(frozen=True, kw_only=True)
class Known:
    """A failure gpuchain recognises in an operand's log or status, with the change that fixes it."""

    cause: str
    evidence: tuple[str, ...]
    action: Fix | None
    fix: str


#: The GPU count labels clouds write on a GPU node (GKE: cloud.google.com/gke-accelerator-count, which a GPU pod's
#: nodeSelector may name, cloud.google.com/kubernetes-engine/docs/how-to/gpus; Karpenter: karpenter.k8s.aws/
#: instance-gpu-count, karpenter.sh/docs/reference/instance-types).
PROVIDER_COUNTS = ("cloud.google.com/gke-accelerator-count", "karpenter.k8s.aws/instance-gpu-count")


def gpus_present(view: NodeView) -> str:
    """What says this node has GPUs, whatever its capacity shows (GFD, NFD, cloud labels)."""
    labels = view.labels
    for key in (GPU_COUNT, *PROVIDER_COUNTS):
        if labels.get(key, "0") not in ("", "0"):
            return f"{key}={labels[key]}"
    for key in (*NFD_GPU_LABELS, GPU_PRESENT, "cloud.google.com/gke-accelerator", "kubernetes.azure.com/accelerator"):
        if labels.get(key):
            return f"{key}={labels[key]}"
    instance = labels.get("node.kubernetes.io/instance-type")
    return f"instance type {instance}" if instance else ""


def off_gpu_nodes(ctx: Context) -> tuple[dict[str, Obj], list[Obj]]:
    """The nodes that announce no NVIDIA GPU, by name, and the pods bound to them in the snapshot's order: one pass
    over the cluster's pods a diagnosis, for every check of what runs where no GPU is (`memo`); none where every node
    is a GPU node."""
    if "off_gpu_nodes" not in ctx.memo:
        others = {name_of(n): n for n in ctx.snapshot.nodes if not is_gpu_node(n)}
        pods = [p for p in ctx.snapshot.pods if (p.get("spec") or {}).get("nodeName") in others] if others else []
        ctx.memo["off_gpu_nodes"] = (others, pods)
    return cast("tuple[dict[str, Obj], list[Obj]]", ctx.memo["off_gpu_nodes"])


def container_image(pod: Obj | None, container: str) -> str:
    """The image of ``container`` in ``pod`` ("" when the pod or the container is not there)."""
    spec = (pod or {}).get("spec") or {}
    return next((str(c.get("image", "")) for c in spec.get("containers") or [] if c.get("name") == container), "")


def labels_showing(ctx: Context, view: NodeView) -> tuple[Defect, ...]:
    """The known defects (releases.yaml) whose label state ``view``'s labels carry. Which defects show in labels
    is looked up once a diagnosis (`Context.memo`), and the answer once for each state of the labels they name
    (`Defect.shows` reads no other): most nodes of a cluster share one, and the defects' patterns are not matched
    again on each of them."""
    known = ctx.memo.get("labels_showing")
    if known is None:
        defects = showing("labels")
        keys = tuple(sorted({key for d in defects for key, _ in d.labels}))
        known = ctx.memo["labels_showing"] = (defects, keys, {})
    defects, keys, answers = cast(
        "tuple[tuple[Defect, ...], tuple[str, ...], dict[tuple[object, ...], tuple[Defect, ...]]]", known
    )
    state = tuple((key in view.labels, view.labels.get(key)) for key in keys)
    shown = answers.get(state)
    if shown is None:
        shown = answers[state] = tuple(d for d in defects if d.shows(view.labels))
    return shown


def said_by(ctx: Context, pod: Obj) -> str:
    """Everything a pod's containers left: termination messages of the current and last run, and the log the
    gather step read."""
    out = []
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            out.append(str((state.get("terminated") or {}).get("message") or ""))
        out.append(ctx.log(pod, str(cs.get("name"))))
    return "\n".join(x for x in out if x)

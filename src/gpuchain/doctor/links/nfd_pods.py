"""Node Feature Discovery's own pods, where a GPU node lacks NFD's labels: why NFD does not label it.

The GPU Operator (and NVIDIA's device plugin chart) places its operands by ``feature.node.kubernetes.io/pci-10de
.present``, which nfd-master writes from what the nfd-worker on the node reports (kubernetes-sigs/
node-feature-discovery: a worker DaemonSet, a master Deployment; the operator's chart bundles both as its
``node-feature-discovery`` subchart). A worker that does not run on the node (its image cannot be pulled, it
crashes, the scheduler does not place it) or a master that does not run means the label never appears, and the
missing label is all the operands show. What repairs it is the NFD pod's own state: its image, the change the
scheduler asks for, or what its crash says (the catalog, else the line quoted as unrecognised).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import placement_fix
from gpuchain.doctor.model import Fix
from gpuchain.doctor.nfd import is_nfd, is_nfd_master
from gpuchain.doctor.owners import owner_daemonset
from gpuchain.doctor.placement import blocker
from gpuchain.doctor.pods import PodState, pod_state
from gpuchain.kube.objects import Obj, name_of, namespace_of

#: The kubelet's waiting reasons for an image it cannot pull (kubernetes pkg/kubelet/images/types.go@v1.34.4).
IMAGE_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


#: nfd-master's lines for a node it cannot write (not those for one label it drops: gfd's, nfd.py), for the rules it
#: cannot read, for the leader-election Lease it may not read, and for the NodeFeature API the cluster lacks
#: (catalog.yaml: kubernetes-sigs/node-feature-discovery pkg/nfd-master/nfd-master.go@v0.16.9 and @v0.17.3, client-go's
#: elector).
MASTER_REFUSED = (
    "node-feature-discovery.master-node-update-forbidden",
    "node-feature-discovery.master-list-forbidden",
    "node-feature-discovery.master-lease-forbidden",
    "node-feature-discovery.nodefeature-crd-missing",
)


def _own_entries() -> tuple[str, ...]:
    """NFD's own failure entries, tried first on an NFD pod's log: a worker refused its NodeFeature object writes the
    words GFD writes for its own ("failed to create NodeFeature object", internal/lm/output.go), and the worker's is
    repaired on NFD's Role, not on GFD's."""
    return tuple(e.id for e in catalog.entries() if e.id.startswith("node-feature-discovery.") and e.level != "info")


@dataclass(frozen=True, kw_only=True)
class NfdDown:
    """Why NFD does not label the node, and the change that lets it."""

    cause: str
    evidence: tuple[str, ...]
    fix: str
    action: Fix | None = None


def _worker_ds(ds: Obj) -> bool:
    """An NFD worker DaemonSet (NFD's chart names it ``<release>-worker``)."""
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    images = " ".join(str(c.get("image", "")) for c in spec.get("containers") or [])
    return "node-feature-discovery" in images and "worker" in name_of(ds)


def nfd_repair(ctx: Context, pod: Obj, state: PodState, what: str) -> tuple[str, list[str], Fix | None]:
    """The change that lets ``pod`` (NFD's ``what``) run, by its state: the scheduler's words for a Pending pod, its
    image for one the kubelet cannot pull, what its log says for one that crashes; with the evidence."""
    ns = namespace_of(pod) or ctx.namespace
    evidence = [f"{what} {state.describe()}"]
    if state.unschedulable:
        evidence.append(f"scheduler: {state.message}")
        return (
            f"# give {what} {ns}/{name_of(pod)} what the scheduler says it lacks ({state.message}): a toleration for "
            "the taint it names, a nodeSelector your nodes match, or requests a node can hold (NFD's chart: "
            "worker/master.tolerations, nodeSelector, resources)",
            evidence,
            None,
        )
    if state.status in IMAGE_REASONS:
        evidence.append(f"kubelet: {state.message}" if state.message else "")
        return (
            f"# give {what} an image the node can pull: NFD's chart's image.repository and image.tag (NFD publishes "
            "registry.k8s.io/nfd/node-feature-discovery:<version>; the GPU Operator's chart sets them under "
            "node-feature-discovery.image), or the imagePullSecrets of its registry",
            evidence,
            None,
        )
    log = ctx.log(pod, state.container) or state.last_log
    known = (catalog.find(log, *_own_entries()) or catalog.known_error(log)) if log else None
    if known is not None:
        evidence += list(known.evidence(f"{what} log"))
        return "# " + known.entry.repair(namespace=ns, pod=name_of(pod)), evidence, None
    odd = catalog.unknown_error(log) if log else None
    evidence.append(f"{what} log, unrecognised: {odd}" if odd else state.message)
    again = Fix.delete_pod(ns, name_of(pod))
    return ctx.stack.render(again) + "   # runs it again; gpuchain knows no repair for this failure", evidence, again


def _master_refused(ctx: Context, pods: list[Obj], label: str) -> NfdDown | None:
    """A running nfd-master whose log (read where the operator finds no NFD label or GPU node) says it cannot write
    the labels: the catalog's repair for its line, else its last error line quoted as unrecognised."""
    for pod in sorted((p for p in pods if is_nfd_master(p) and pod_state(p).ready), key=name_of):
        for container in (pod.get("spec") or {}).get("containers") or []:
            log = ctx.log(pod, str(container.get("name", "")))
            known = catalog.find(log, *MASTER_REFUSED) if log else None
            odd = None if known is not None or not log else catalog.unknown_error(log)
            if known is None and odd is None:
                continue
            ns = namespace_of(pod) or ctx.namespace
            cause = f"Node Feature Discovery's master {name_of(pod)} runs but its log says it cannot write the labels"
            if known is not None:
                return NfdDown(
                    cause=f"{cause}: {known.entry.cause.rstrip('.')}, so {label} never appears",
                    evidence=(f"nfd-master {pod_state(pod).describe()}", *known.evidence("nfd-master log")),
                    fix="# " + known.entry.repair(namespace=ns, pod=name_of(pod)),
                )
            again = Fix.delete_pod(ns, name_of(pod))
            return NfdDown(
                cause=f"{cause} (in a line gpuchain's catalog does not know), so {label} never appears",
                evidence=(f"nfd-master {pod_state(pod).describe()}", f"nfd-master log, unrecognised: {odd}"),
                fix=ctx.stack.render(again) + "   # runs it again; gpuchain knows no repair for this failure",
                action=again,
            )
    return None


def nfd_pods(ctx: Context) -> list[Obj]:
    """NFD's pods, found once per diagnosis (every GPU node without NFD's label asks)."""
    found = ctx.memo.get("nfd_pods")
    if found is None:
        found = ctx.memo["nfd_pods"] = [p for p in ctx.snapshot.pods if is_nfd(p)]
    return cast("list[Obj]", found)


def _pod_node(pod: Obj) -> str:
    """The node a DaemonSet's pod is for: its nodeName, or, Pending, the node its controller pins it to (the
    ``metadata.name`` matchFields term of its required node affinity)."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
    return ""


def nfd_down(ctx: Context, *, view: NodeView | None, label: str) -> NfdDown | None:
    """Why NFD does not give ``view``'s node ``label`` (any node's, with ``view`` None): its worker there does not
    run, its worker DaemonSet selects not the node, or its master does not run. None when NFD's pods run (or no
    NFD runs at all)."""
    pods = nfd_pods(ctx)
    workers = sorted(
        (
            p
            for p in pods
            if not is_nfd_master(p)
            and _worker_ds(owner_daemonset(ctx, p) or {})
            and (view is None or _pod_node(p) == view.name)
        ),
        key=lambda p: (pod_state(p).ready, name_of(p)),
    )
    worker = workers[0] if workers else None
    if worker is not None and not (state := pod_state(worker)).ready:
        fix, evidence, action = nfd_repair(ctx, worker, state, "nfd-worker")
        return NfdDown(
            cause=f"Node Feature Discovery's worker {state.name} on {_pod_node(worker) or 'its node'} is "
            f"{state.status}, so NFD never "
            f"reports the node's PCI devices and {label} never appears",
            evidence=tuple(e for e in evidence if e),
            fix=fix,
            action=action,
        )
    if worker is None and view is not None:
        for ds in sorted((d for d in ctx.snapshot.daemonsets if _worker_ds(d)), key=name_of):
            block = blocker(ds, view.node)
            if block is not None and block.kind == "selector":
                action = placement_fix(ctx, view=view, ds=ds, block=block)
                return NfdDown(
                    cause=f"Node Feature Discovery's worker DaemonSet {namespace_of(ds)}/{name_of(ds)} does not select "
                    f"this node ({block.describe()}), so NFD never labels it and {label} never appears",
                    evidence=(f"nfd-worker DaemonSet {namespace_of(ds)}/{name_of(ds)}: {block.describe()}",),
                    fix=ctx.stack.render(action) + "   # or widen the NFD worker's nodeSelector (worker.nodeSelector)",
                    action=action,
                )
    refused = _master_refused(ctx, pods, label)
    if refused is not None:
        return refused
    master = next((p for p in sorted(pods, key=name_of) if is_nfd_master(p) and not pod_state(p).ready), None)
    if master is not None and not any(is_nfd_master(p) and pod_state(p).ready for p in pods):
        state = pod_state(master)
        fix, evidence, action = nfd_repair(ctx, master, state, "nfd-master")
        return NfdDown(
            cause=f"Node Feature Discovery's master {state.name} is {state.status}: nfd-master writes the labels the "
            f"workers report, so no node gets {label}",
            evidence=tuple(e for e in evidence if e),
            fix=fix,
            action=action,
        )
    return None

"""Why a drain or eviction of a GPU node's pods never finishes, read from the state of the pods it must remove, the
PodDisruptionBudgets that cover them and the node, for every component that drains a GPU node: the GPU Operator's
driver manager (the driver pod's k8s-driver-manager init container) and its upgrade controller (the node label
nvidia.com/gpu-driver-upgrade-state). Both run kubectl's drain helper (kubernetes/kubectl pkg/drain@v0.34.9), whose
filters refuse, before evicting anything, a pod with an emptyDir volume unless deleteEmptyDir is set ("cannot delete
Pods with local storage") and a pod no controller owns unless force is set ("cannot delete Pods that declare no
controller"); then it evicts through the Eviction API, which refuses a pod whose PodDisruptionBudget allows no
disruption (kubernetes/kubernetes pkg/registry/core/pod/storage/eviction.go@v1.34.4) and retries every 5 s until the
drain's timeout (0: for ever); then it waits for every evicted pod to be gone, which a pod stuck terminating never is.

Each blocker names the pod, and its fix is the change that ends the wait: the setting of the component that drains
(spelled as that component reads it), the PodDisruptionBudget to relax, the finalizer to remove, or the pod to
delete."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.links.dra_plugin import node_dra_plugin
from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp
from gpuchain.doctor.pods import pod_state
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj, annotations_of, labels_of, name_of, namespace_of
from gpuchain.kube.pdb import PDB_EXEMPT_PHASES, disruptions_allowed, selects
from gpuchain.kube.selectors import match_labels

#: The kubelet's annotation on a static pod's mirror (k8s.io/api core/v1 MirrorPodAnnotationKey): the drain skips it.
MIRROR = "kubernetes.io/config.mirror"
#: kubectl's drain filter messages (kubernetes/kubectl pkg/drain/filters.go@v0.34.9), as its errors print them:
#: "cannot delete %s: %s" with the pods.
LOCAL_STORAGE = "cannot delete Pods with local storage (use --delete-emptydir-data to override)"
UNMANAGED = "cannot delete Pods that declare no controller (use --force to override)"
#: The Eviction API's refusals (kubernetes/kubernetes pkg/registry/core/pod/storage/eviction.go@v1.34.4).
PDB_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."
MANY_PDBS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
NOT_SIMULATED_NOTE = {NOT_SIMULATED: "a drain held by a pod is not simulated"}
#: The most pods one finding names.
MAX_BLOCKERS = 5


@dataclass(frozen=True, kw_only=True)
class Drainer:
    """One component's drain or pod eviction, with the settings it runs with and how to change each.

    ``force_fix`` / ``emptydir_fix``: the change that turns the setting on (None when the drain has no such setting);
    ``setting``: the setting's name as that component reads it, for the finding's words."""

    who: str  #: "the driver manager's GPU pod eviction", "the upgrade controller's drain" ...
    force: bool
    delete_emptydir: bool
    gpu_only: bool  #: only pods that use a GPU (a device-plugin resource or a DRA claim) are taken
    selector: str = ""  #: a label selector the drain narrows its pods to ("" = all)
    force_setting: str = ""
    emptydir_setting: str = ""
    force_fix: Fix | None = None
    emptydir_fix: Fix | None = None
    #: its timeout as set, for the evidence: how long it retries a refused eviction ("" where unknown)
    timeout: str = ""
    #: why no DRA kubelet plugin runs while it drains, and what keeps that from happening again (`terminating`)
    dra_why: str = ""
    dra_note: str = ""
    #: pods its log says it evicted: they passed its filters, so the filters' refusals do not apply to them
    passed: frozenset[tuple[str, str]] = field(default_factory=frozenset)


@dataclass(frozen=True, kw_only=True)
class Blocker:
    """One pod the drain cannot remove, why, and the change that ends the wait."""

    pod: Obj
    reason: str  #: terminating, local-storage, unmanaged, pdb
    cause: str
    evidence: tuple[str, ...]
    action: Fix | None
    fix: str

    @property
    def ref(self) -> str:
        return f"{namespace_of(self.pod) or 'default'}/{name_of(self.pod)}"


def uses_gpu(pod: Obj) -> bool:
    """Does the pod hold a GPU: a device-plugin resource or a DRA ResourceClaim (as the driver manager's podUsesGPU
    asks, NVIDIA/k8s-driver-manager internal/kubernetes/client.go@v0.12.0)?"""
    return bool(pod_gpu_requests(pod)) or bool((pod.get("spec") or {}).get("resourceClaims"))


def _controller(pod: Obj) -> dict[str, Any] | None:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), None)


def _taken(pod: Obj, drainer: Drainer) -> bool:
    """Is ``pod`` one the drain must remove (kubectl's drain skips DaemonSet pods with IgnoreAllDaemonSets, which
    every GPU Operator drain sets, mirror pods and finished pods)?"""
    owner = _controller(pod)
    if owner is not None and owner.get("kind") == "DaemonSet":
        return False
    if MIRROR in annotations_of(pod) or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    if drainer.gpu_only and not uses_gpu(pod):
        return False
    return not drainer.selector or match_labels(drainer.selector, labels_of(pod))


def _node_not_ready(view: NodeView) -> bool:
    conditions = (view.node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") != "True" for c in conditions)


def terminating(ctx: Context, view: NodeView, pod: Obj, *, who: str, dra_why: str = "", dra_note: str = "") -> Blocker:
    """A pod whose deletion was asked and that is still there, which ``who`` waits for to be gone: its finalizers
    removed by name, or the pod force-deleted (a NotReady node's kubelet cannot confirm it stopped; a DRA claim's
    pod cannot finish while no DRA kubelet plugin runs on the node: ``dra_why`` says why it does not, ``dra_note``
    what keeps it from happening again)."""
    meta = pod.get("metadata") or {}
    ns, name = namespace_of(pod) or "default", name_of(pod)
    evidence = [f"pod {ns}/{name} on {view.name} terminating since {meta.get('deletionTimestamp')} (deletionTimestamp)"]
    finalizers = [str(f) for f in meta.get("finalizers") or []]
    claims = [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("resourceClaims") or []]
    force = Fix.delete_pod(ns, name, force=True, **NOT_SIMULATED_NOTE)
    if finalizers:
        evidence.append(f"pod {ns}/{name} metadata.finalizers: {', '.join(finalizers)}")
        unfinalize = Fix(
            FixOp.PATCH_WORKLOAD,
            f"Pod/{ns}/{name}",
            {"patch": {"metadata": {"finalizers": None}}, **NOT_SIMULATED_NOTE},
        )
        return Blocker(
            pod=pod,
            reason="terminating",
            cause=f"{who} waits for pod {ns}/{name} to be gone, and the pod keeps finalizer(s) "
            f"{', '.join(finalizers)} that no controller removes, so the API server never deletes it.",
            evidence=tuple(evidence),
            action=unfinalize,
            fix=ctx.stack.render(unfinalize) + f"   # removes {', '.join(finalizers)}: the pod then goes",
        )
    plugin = node_dra_plugin(ctx, view) if claims else None
    if claims and (plugin is None or not pod_state(plugin).ready):
        evidence.append(f"pod {ns}/{name} holds ResourceClaim(s) {', '.join(claims)} (spec.resourceClaims)")
        evidence.append(
            f"DRA kubelet plugin {pod_state(plugin).describe()}"
            if plugin is not None
            else f"no DRA kubelet plugin pod on {view.name}"
        )
        return Blocker(
            pod=pod,
            reason="terminating",
            cause=f"{who} waits for pod {ns}/{name}, which holds a DRA ResourceClaim: it cannot finish terminating "
            "until the DRA kubelet plugin unprepares the claim, and no DRA kubelet plugin runs ready on the node"
            + (f" ({dra_why})" if dra_why else "")
            + ", so the pod never goes.",
            evidence=tuple(evidence),
            action=force,
            fix=f"{ctx.stack.render(force)}   # ends the wait once" + (f"; {dra_note}" if dra_note else ""),
        )
    if _node_not_ready(view):
        evidence.append(f"node {view.name} Ready is not True: its kubelet cannot confirm the pod stopped")
        why = "the node's kubelet is not ready, so nothing confirms the pod stopped and the API server keeps it"
    else:
        why = "the kubelet has not removed it (a volume it cannot unmount, a process that ignores SIGTERM)"
    return Blocker(
        pod=pod,
        reason="terminating",
        cause=f"{who} waits for pod {ns}/{name}, which was asked to go but is stuck terminating: {why}.",
        evidence=tuple(evidence),
        action=force,
        fix=f"{ctx.stack.render(force)}   # the pod is already being deleted; its controller starts it again elsewhere",
    )


def _setting_blocker(ctx: Context, pod: Obj, *, reason: str, drainer: Drainer) -> Blocker:
    """A pod the drain's filters refuse under its settings: the setting that lets it go, or the pod deleted by hand."""
    ns, name = namespace_of(pod) or "default", name_of(pod)
    local = reason == "local-storage"
    setting = drainer.emptydir_setting if local else drainer.force_setting
    action = drainer.emptydir_fix if local else drainer.force_fix
    if local:
        volumes = [str(v.get("name")) for v in (pod.get("spec") or {}).get("volumes") or [] if "emptyDir" in v]
        what = f"pod {ns}/{name} has emptyDir volume(s) {', '.join(volumes)}"
        message = LOCAL_STORAGE
    else:
        what = f"pod {ns}/{name} has no controller (metadata.ownerReferences names none)"
        message = UNMANAGED
    by_hand = Fix.delete_pod(ns, name, **NOT_SIMULATED_NOTE)
    own = f"{ctx.stack.render(by_hand)}" + ("" if local else " (no controller starts it again)")
    fix = f"{ctx.stack.render(action)}   # sets {setting}; or delete the pod yourself: {own}" if action else own
    return Blocker(
        pod=pod,
        reason=reason,
        cause=f"{drainer.who} refuses pod {ns}/{name} ({message}: {ns}/{name}) because {setting} is off, so it "
        "never gets past that pod.",
        evidence=(what, f"{drainer.who}: {setting.split('=')[0]} off"),
        action=action or by_hand,
        fix=fix,
    )


def _allowed(pdb: Obj, pods: list[Obj]) -> int:
    """status.disruptionsAllowed, which the Eviction API reads; computed as the disruption controller does where the
    object carries no status."""
    status = pdb.get("status") or {}
    if "disruptionsAllowed" in status:
        return int(status["disruptionsAllowed"])
    return disruptions_allowed(pdb, pods)


def _pdb_blocker(ctx: Context, pod: Obj, drainer: Drainer) -> Blocker | None:
    """The PodDisruptionBudget(s) that make the Eviction API refuse ``pod``: one at zero disruptions allowed, or
    more than one covering it (which the Eviction API never evicts)."""
    if (pod.get("status") or {}).get("phase") in PDB_EXEMPT_PHASES:
        return None
    covering = [p for p in ctx.snapshot.pdbs if selects(p, pod)]
    ns, name = namespace_of(pod) or "default", name_of(pod)
    by_hand = Fix.delete_pod(ns, name, **NOT_SIMULATED_NOTE)
    if len(covering) > 1:
        names = ", ".join(name_of(p) for p in covering)
        return Blocker(
            pod=pod,
            reason="pdb",
            cause=f"{drainer.who} evicts pod {ns}/{name}, and PodDisruptionBudgets {names} all cover it: the "
            f"Eviction API refuses every pod more than one budget covers ({MANY_PDBS}), so the eviction never passes.",
            evidence=(f"PodDisruptionBudgets {names} in {ns} select pod {ns}/{name}",),
            action=by_hand,
            fix=f"{ctx.stack.render(by_hand)}   # ends this wait; keep one PodDisruptionBudget per pod (delete or "
            f"narrow the selector of the others of {names})",
        )
    blocking = next((p for p in covering if _allowed(p, ctx.snapshot.pods) <= 0), None)
    if blocking is None:
        return None
    pdb_name, spec, status = name_of(blocking), blocking.get("spec") or {}, blocking.get("status") or {}
    counts = ", ".join(f"{k} {status[k]}" for k in ("currentHealthy", "desiredHealthy", "expectedPods") if k in status)
    allowed = _allowed(blocking, ctx.snapshot.pods)
    evidence = [
        f"PodDisruptionBudget {ns}/{pdb_name} selects pod {ns}/{name}: disruptionsAllowed {allowed}"
        + (f" ({counts})" if counts else ""),
        " ".join(f"spec.{k}={spec[k]}" for k in ("minAvailable", "maxUnavailable") if k in spec),
        f"{drainer.who}: {drainer.timeout}" if drainer.timeout else "",
    ]
    relax = _relaxed(blocking)
    unhealthy = int(status.get("currentHealthy", 0)) < int(status.get("desiredHealthy", 0))
    if relax is not None and not unhealthy:
        action: Fix = Fix(
            FixOp.PATCH_WORKLOAD, f"PodDisruptionBudget/{ns}/{pdb_name}", {"patch": relax, **NOT_SIMULATED_NOTE}
        )
        fix = (
            f"{ctx.stack.render(action)}   # lets one pod go; or delete the pod yourself (a delete is not an "
            f"eviction, no budget holds it): {ctx.stack.render(by_hand)}"
        )
    else:
        action = by_hand
        fix = (
            f"{ctx.stack.render(by_hand)}   # a delete is not an eviction, so no budget holds it; "
            + (
                "the budget's other pods are not healthy (currentHealthy < desiredHealthy): make them ready, or "
                if unhealthy
                else ""
            )
            + f"relax PodDisruptionBudget {ns}/{pdb_name} for the next drain"
        )
    return Blocker(
        pod=pod,
        reason="pdb",
        cause=f"{drainer.who} evicts pod {ns}/{name}, and PodDisruptionBudget {ns}/{pdb_name} allows no disruption "
        f"now, so the Eviction API refuses it ({PDB_REFUSED}) and the drain retries until its timeout.",
        evidence=tuple(e for e in evidence if e),
        action=action,
        fix=fix,
    )


def _relaxed(pdb: Obj) -> dict[str, Any] | None:
    """A merge patch that lets one more covered pod go: maxUnavailable 0 -> 1, or an integer minAvailable one lower;
    None where the budget is a percentage (the user's to choose)."""
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        value = spec["maxUnavailable"]
        return {"spec": {"maxUnavailable": 1}} if value in (0, "0", "0%") else None
    value = spec.get("minAvailable")
    if isinstance(value, int) and value > 0:
        return {"spec": {"minAvailable": value - 1}}
    return None


def blockers(ctx: Context, view: NodeView, drainer: Drainer) -> list[Blocker]:
    """Every pod on ``view``'s node that ``drainer`` must remove and cannot, with why, in kubectl's order: a pod
    stuck terminating, then its filters' refusals (local storage, then no controller), then its eviction's."""
    found: list[Blocker] = []
    for pod in view.workloads:
        if not _taken(pod, drainer):
            continue
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            found.append(
                terminating(ctx, view, pod, who=drainer.who, dra_why=drainer.dra_why, dra_note=drainer.dra_note)
            )
            continue
        key = (namespace_of(pod) or "default", name_of(pod))
        refused = False
        if key not in drainer.passed:
            volumes = (pod.get("spec") or {}).get("volumes") or []
            if not drainer.delete_emptydir and any("emptyDir" in v for v in volumes):
                found.append(_setting_blocker(ctx, pod, reason="local-storage", drainer=drainer))
                refused = True
            if not drainer.force and _controller(pod) is None:
                found.append(_setting_blocker(ctx, pod, reason="unmanaged", drainer=drainer))
                refused = True
        if not refused:
            pdb = _pdb_blocker(ctx, pod, drainer)
            if pdb is not None:
                found.append(pdb)
    return found


def held_by(found: list[Blocker], *, extra: tuple[str, ...] = ()) -> Known:
    """One finding for the pods that hold a drain: the first one's cause and fix, every one's evidence."""
    first, others = found[0], [b.ref for b in found[1:]]
    evidence = [*extra, *(line for b in found[:MAX_BLOCKERS] for line in b.evidence)]
    if len(found) > MAX_BLOCKERS:
        evidence.append(f"{len(found) - MAX_BLOCKERS} more pods hold it")
    return Known(
        cause=first.cause + (f" Pods {', '.join(others[:MAX_BLOCKERS])} hold it as well." if others else ""),
        evidence=tuple(evidence),
        action=first.action,
        fix=first.fix + (f"   # then the same for {', '.join(others[:MAX_BLOCKERS])}" if others else ""),
    )

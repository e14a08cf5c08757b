"""GPU nodes that keep a startup taint: the node is the root, not the pods it keeps off.

A startup taint is put on a node when it joins (the kubelet's registerWithTaints, a node group's taints, a Karpenter
NodePool's ``startupTaints``) by one component's design: that component -- a CSI or CNI node agent, a DaemonSet whose
pod runs on the node -- removes it once it runs there, so no pod lands on the node before the agent can serve it
(kubernetes-sigs/aws-efs-csi-driver docs/install.md@v2.3.0 "Configure node startup taint"; a Karpenter NodePool's
``startupTaints`` are the same contract: Karpenter adds them and another component removes them). A workload is not
meant to tolerate one; a node that keeps it runs DaemonSets only and every GPU pod waits. So where the scheduler
names such a taint as all that keeps a GPU pod off a GPU node, the finding is that node's: the taint removed now
(``kubectl taint node <n> <key>-``) and its owner made to remove it on the next node -- its release with the fix where
a release of it is known to lose the removal (releases.yaml, symptom ``startup-taint``), its pod on the node made ready
where it is not, or the taint no longer added where no owner runs there to remove it.

Which taints are startup taints is data (startup_taints.yaml, with its source); a key no entry names is read by its
name's shape (`SHAPE`: ``<domain>/agent-not-ready``, ``.../uninitialized``, ``startup-taint...``), its owner the
DaemonSet whose name carries its domain's words. The node lifecycle's own taints (``node.kubernetes.io/*``) are the
node's conditions, read elsewhere.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.packaged import packaged_yaml
from gpuchain.doctor.placement import pod_blocker, taint_text
from gpuchain.doctor.pods import pod_state
from gpuchain.doctor.releases import Defect, defect, image_version
from gpuchain.kube.objects import Obj, name_of, namespace_of

#: The shape of a startup taint's key no entry names: an agent's "not ready yet" (Cilium's node.cilium.io/
#: agent-not-ready, the CSI drivers' <driver>/agent-not-ready), a node not initialised yet (the cloud controller
#: manager's node.cloudprovider.kubernetes.io/uninitialized, Cluster API's node.cluster.x-k8s.io/uninitialized), and
#: the cluster autoscaler's startup-taint.cluster-autoscaler.kubernetes.io/ prefix (kubernetes/autoscaler
#: cluster-autoscaler/utils/taints/taints.go StartupTaintPrefix).
SHAPE = re.compile(r"(^|/)([\w.-]*-)?(not-ready|uninitiali[sz]ed)$|^startup-taint\.|/startup-taint$", re.IGNORECASE)
#: The node lifecycle controller's and the kubelet's taints of a node's conditions: not a startup taint.
CONDITION_DOMAIN = "node.kubernetes.io/"
#: Words of a key's domain that name no component (its owner is found by the others).
GENERIC_WORDS = frozenset({"com", "io", "org", "net", "k8s", "x-k8s", "kubernetes", "node", "aws", "sh", "dev"})
FINDING = "node.startup-taint-left"


@dataclass(frozen=True, kw_only=True)
class StartupTaint:
    """One startup taint's key and the component that removes it."""

    key: str
    owner: str  #: how a fix names the component
    daemonset: str = ""  #: a regex the owner's DaemonSet name fully matches ("": its domain's words)
    image: str = ""  #: the image name its releases are tagged on (releases.yaml)
    controller: bool = False  #: a controller of the cluster removes it, not a pod on the node
    source: str = ""
    line: str = ""

    def owns(self, ds: str) -> bool:
        """Is DaemonSet ``ds`` this taint's owner (the entry's regex, else every word of the key's domain in it)?"""
        if self.daemonset:
            return re.fullmatch(self.daemonset, ds) is not None
        words = [w for w in re.split(r"[.]", self.key.partition("/")[0]) if w and w.lower() not in GENERIC_WORDS]
        return bool(words) and all(w.lower() in ds.lower() for w in words)


@functools.cache
def known() -> dict[str, StartupTaint]:
    """startup_taints.yaml, by key."""
    return {str(raw["key"]): StartupTaint(**raw) for raw in packaged_yaml("startup_taints.yaml")}


def startup_taint(key: str) -> StartupTaint | None:
    """The startup taint ``key`` is (an entry, or one its name's shape says), None for any other taint."""
    if key.startswith(CONDITION_DOMAIN):
        return None
    if key in known():
        return known()[key]
    if not SHAPE.search(key):
        return None
    domain = key.partition("/")[0] if "/" in key else ""
    return StartupTaint(key=key, owner=f"the agent of {domain}" if domain else "the component that adds it")


def _owner_pod(view: NodeView, taint: StartupTaint) -> Obj | None:
    """The owner's DaemonSet pod on the node (the one that removes the taint there), None where none runs."""
    for pod in [*view.workloads, *view.operand_pods.values()]:
        for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
            if ref.get("kind") == "DaemonSet" and taint.owns(str(ref.get("name"))):
                return pod
    return None


def _release_defect(pod: Obj, taint: StartupTaint) -> tuple[Defect, str] | None:
    """The known defect of the owner's release its pod runs that leaves the taint (releases.yaml), and that release."""
    for c in (pod.get("spec") or {}).get("containers") or ():
        name, tag = image_version(str(c.get("image") or ""))
        if taint.image and name == taint.image and (found := defect(name, tag, "startup-taint")) is not None:
            return found, tag
    return None


def _owner_repair(view: NodeView, taint: StartupTaint, pod: Obj | None) -> tuple[str, list[str]]:
    """What makes the owner remove the taint on this node and the next, and the evidence for it."""
    if taint.controller:
        return (
            f"make {taint.owner} run and initialise {view.name} (it removes the taint then)",
            [f"{taint.key} is removed by {taint.owner}, a controller of the cluster"],
        )
    if pod is None:
        return (
            f"no pod of {taint.owner} runs on {view.name} to remove it: install it there (its DaemonSet must tolerate "
            "the taint), or stop adding the taint to new nodes (the node group's taints, the NodePool's "
            "startupTaints, the kubelet's registerWithTaints)",
            [f"no DaemonSet pod of {taint.owner} on {view.name}"],
        )
    ref = f"{namespace_of(pod)}/{name_of(pod)}"
    state = pod_state(pod)
    evidence = [f"{taint.owner}'s pod {ref} on the node: {'ready' if state.ready else 'not ready'}"]
    known_defect = _release_defect(pod, taint)
    if known_defect is not None:
        found, tag = known_defect
        evidence += [f"{taint.owner} runs {tag}: {found.cause}", found.cite(), f"release note: {found.line}"]
        return (
            f"upgrade {found.name} to {found.fixed_in} or later, which removes the taint reliably, so new nodes do not "
            "keep it",
            evidence,
        )
    if not state.ready:
        return f"make {taint.owner}'s pod {ref} ready: it removes the taint once it runs", evidence
    return (
        f"{taint.owner}'s pod runs ready and did not remove it: restart it (kubectl delete pod -n {namespace_of(pod)} "
        f"{name_of(pod)}) and move {taint.owner} to its newest release",
        evidence,
    )


def left_startup_taints(ctx: Context, pod: Obj, spec: dict[str, Any], msg: str) -> list[Finding]:
    """Findings for the GPU nodes that only a startup taint keeps GPU pod ``pod`` (its admitted ``spec``) off, one per
    node: the taint removed now and its owner made to remove it. [] where no such node is (the pod's other
    placement checks then read it)."""
    findings = []
    pod_ref = f"{namespace_of(pod)}/{name_of(pod)}"
    for view in ctx.views:
        block = pod_blocker(spec, view.node)
        if block is None or block.kind != "taint":
            continue
        taints = block.taints or (block.detail,)
        starting = [(t, s) for t in taints if (s := startup_taint(str(t.get("key")))) is not None]
        if len(starting) != len(taints):
            continue  # a taint put there on purpose keeps it off too
        passes = [{"operator": "Exists", "key": t["key"]} for t, _ in starting]
        tolerated = {**spec, "tolerations": [*(spec.get("tolerations") or []), *passes]}
        if pod_blocker(tolerated, view.node) is not None:
            continue  # the pod selects another node: the taint is not what keeps it off this one
        findings.append(_finding(ctx, view, pod_ref, msg, starting))
    return findings


def _finding(
    ctx: Context, view: NodeView, pod_ref: str, msg: str, starting: list[tuple[dict[str, Any], StartupTaint]]
) -> Finding:
    taint, owner = starting[0]
    pod = _owner_pod(view, owner)
    repair, said = _owner_repair(view, owner, pod)
    action = Fix(
        FixOp.TAINT_NODE,
        view.name,
        {
            "remove": [f"{t['key']}:{t['effect']}" for t, _ in starting],
            NOT_SIMULATED: "a node's taints set outside the stack are not scenario facts",
        },
    )
    return Finding(
        id=FINDING,
        severity=Severity.ERROR,
        link="node",
        cause=f"GPU node {view.name} keeps the startup taint {taint_text(taint)}, which {owner.owner} puts there to "
        "keep pods off until it runs on the node and then removes; it was never removed, so no pod that does not "
        f"tolerate it lands there (GPU pod {pod_ref} waits) although the node's GPU chain may be healthy. A workload "
        "is not meant to tolerate a startup taint: the taint is meant to go.",
        evidence=(
            f"scheduler: {msg}",
            f"node {view.name} taints: {', '.join(taint_text(t) for t, _ in starting)}",
            *said,
            *((f"startup taint: {owner.source}",) if owner.source else ()),
        ),
        fix=f"{ctx.stack.render(action)}   # the startup taint nothing removed; then {repair}",
        node=view.name,
        root=True,
        action=action,
    )

"""GPU pods the scheduler places on no GPU node for a reason other than a lack of GPUs.

A user's pod that asks for GPUs (``nvidia.com/gpu*`` in its limits, or DRA ResourceClaims) and stays
Pending is read from the scheduler's own words (its PodScheduled=False Unschedulable message, kubernetes
pkg/scheduler/framework/plugins@v1.34.4):

- tainttoleration: ``node(s) had untolerated taint {<key>: <value>}`` (before 1.25 ``node(s) had taint {<key>:
  <value>}, that the pod didn't tolerate``, before 1.20 ``node(s) had taints that the pod didn't tolerate``): every
  GPU node carries a taint the pod does not tolerate; the repair is the toleration, added to the object that makes
  the pod;
- nodeaffinity: ``node(s) didn't match Pod's node affinity/selector``: the pod selects a label no GPU node
  has; the repair is the selector changed to the value the GPU nodes carry, or the label put on them;
- dynamicresources: ``cannot allocate all claims``: no GPU DRA driver publishes a device for them in a
  ResourceSlice, or every published device carries a taint the claim does not tolerate.

A pod that asks for no GPU but is bound by a required pod affinity on ``kubernetes.io/hostname`` to a pod running on
a GPU node (a cache, sidecar service or agent that must sit beside the GPU pod it serves, the interpodaffinity filter's
``node(s) didn't match pod affinity rules`` on every other node) can go to that GPU node only: where its taint keeps
the pod off (tainttoleration's words), the GPU pod it serves waits on it, and the repair is the same toleration, on
the companion's owner. Kept off a tainted GPU node with nothing tying it there, such a pod is the taint working.

The same filters are evaluated here as pure functions of the pod and the GPU nodes (`placement`), so the
finding names the taint or the label and the exact change, not the scheduler's summary. A taint the node
lifecycle controller or the kubelet sets for a node's condition (``node.kubernetes.io/*``) is a node fault the
walk names on that node; no workload is told to tolerate it.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from gpuchain.doctor.context import Context
from gpuchain.doctor.dra_conflict import GPU_DRA_DRIVERS, published_devices
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, NodeChain, Severity
from gpuchain.doctor.placement import Blocker, pod_blocker, taint_text, tolerations_for
from gpuchain.doctor.pods import unschedulable_message
from gpuchain.doctor.stacks.base import is_dra_plugin
from gpuchain.doctor.startup_taints import left_startup_taints
from gpuchain.doctor.validation_pods import validation_of
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of

#: The scheduler's words for each filter that keeps a pod off a node (kubernetes
#: pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go, nodeaffinity/node_affinity.go
#: ErrReasonPod, dynamicresources/dynamicresources.go@v1.34.4). The taint filter's words changed twice: "node(s) had
#: taints that the pod didn't tolerate" (pkg/scheduler/algorithm/predicates/error.go@v1.16.0,
#: ErrTaintsTolerationsNotMatch), "node(s) had taint {%s: %s}, that the pod didn't tolerate" (the plugin's Filter from
#: 1.20), "node(s) had untolerated taint {%s: %s}" (from 1.25): each is read.
UNTOLERATED_WORDS = ("untolerated taint", "that the pod didn't tolerate")
AFFINITY_WORDS = "didn't match Pod's node affinity/selector"
#: The interpodaffinity filter's words for a node where a required pod affinity finds no pod it must sit beside
#: (kubernetes pkg/scheduler/framework/plugins/interpodaffinity/filtering.go ErrReasonAffinityRulesNotMatch).
POD_AFFINITY_WORDS = "didn't match pod affinity rules"
HOSTNAME = "kubernetes.io/hostname"
CLAIMS_WORDS = "cannot allocate all claims"
#: Taints of a node's own condition (k8s.io/api core/v1 well_known_taints.go): not a workload's to tolerate.
CONDITION_TAINTS = "node.kubernetes.io/"
#: Controllers whose pod template a merge patch may change in place (a Job's template is immutable once it runs).
PATCHABLE = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")
#: gpuchain's DRA plugin DaemonSet (charts/gpuchain templates/dra-plugin.yaml, values dra.enabled).
GPUCHAIN_DRA_DS = "gpuchain-dra-plugin"


@dataclass(frozen=True)
class Owner:
    """The object that makes a pod, whose pod template (or the pod itself) a fix changes."""

    kind: str
    namespace: str
    name: str

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    def template_patch(self, pod_spec: dict[str, Any]) -> dict[str, Any]:
        """A merge patch that sets ``pod_spec`` fields of the pods this owner makes."""
        return {"spec": pod_spec} if self.kind == "Pod" else {"spec": {"template": {"spec": pod_spec}}}


def owner_of(pod: Obj) -> Owner:
    """Who makes ``pod``: its Deployment (a ReplicaSet named ``<deployment>-<pod-template-hash>``), its other
    controller, or the pod itself."""
    ns = namespace_of(pod) or "default"
    refs = (pod.get("metadata") or {}).get("ownerReferences") or ()
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if ref is None:
        return Owner("Pod", ns, name_of(pod))
    kind, name = str(ref.get("kind")), str(ref.get("name"))
    hash_ = labels_of(pod).get("pod-template-hash")
    if kind == "ReplicaSet" and hash_ and name.endswith(f"-{hash_}"):
        return Owner("Deployment", ns, name.removesuffix(f"-{hash_}"))
    return Owner(kind, ns, name)


def gpu_pod(pod: Obj) -> bool:
    """Does the pod ask for GPUs, as a count (device plugin) or as ResourceClaims (DRA)?"""
    return bool(pod_gpu_requests(pod) or (pod.get("spec") or {}).get("resourceClaims"))


def patch_fix(owner: Owner, pod_spec: dict[str, Any]) -> Fix:
    """The change of ``owner``'s pods' spec: a merge patch where the object takes one, else the object made
    again with it (a running Job's template and a pod's node selector cannot change in place)."""
    in_place = owner.kind in PATCHABLE or (owner.kind == "Pod" and set(pod_spec) <= {"tolerations"})
    # A pod takes only added tolerations in place; its selector and runtime class are fixed at creation.
    return Fix(
        FixOp.PATCH_WORKLOAD,
        owner.ref,
        {
            "patch": owner.template_patch(pod_spec),
            "recreate": not in_place,
            NOT_SIMULATED: "a user's workload objects are not scenario facts",
        },
    )


def resource_paths(pod: Obj, owner: Owner, resource: str) -> list[tuple[str, str]]:
    """(JSON-pointer path, quantity) of ``resource`` in each container's limits and requests of ``pod``, as the
    paths lie in ``owner``'s object (its pod template, or the pod itself)."""
    base = "/spec" if owner.kind == "Pod" else "/spec/template/spec"
    key = resource.replace("/", "~1")
    return [
        (f"{base}/containers/{i}/resources/{part}/{key}", str(value))
        for i, container in enumerate((pod.get("spec") or {}).get("containers") or [])
        for part in ("limits", "requests")
        if (value := ((container.get("resources") or {}).get(part) or {}).get(resource)) is not None
    ]


def resources_fix(owner: Owner, ops: list[dict[str, Any]]) -> Fix:
    """A JSON patch (``ops``) of the containers' resources of ``owner``'s pods: a merge patch would replace the whole
    container list. A pod takes no change of its resources in place, so it is made again with it."""
    return Fix(
        FixOp.PATCH_WORKLOAD,
        owner.ref,
        {
            "patch": ops,
            "type": "json",
            "recreate": owner.kind not in PATCHABLE,
            NOT_SIMULATED: "a user's workload objects are not scenario facts",
        },
    )


def _tolerable(block: Blocker) -> tuple[dict[str, Any], ...]:
    """The taints of ``block`` a workload may tolerate (not a node condition's)."""
    return tuple(t for t in block.taints or (block.detail,) if not str(t.get("key", "")).startswith(CONDITION_TAINTS))


def _as_admitted(ctx: Context, pod: Obj) -> dict[str, Any]:
    """The pod's spec as the API server keeps it: where it runs the ExtendedResourceToleration admission plugin (a
    field of the stack), with the toleration that plugin adds for each extended resource the pod requests ({key:
    <resource>, operator: Exists, effect: NoSchedule}), which a spec taken from elsewhere (a manifest, a template)
    lacks."""
    spec: dict[str, Any] = dict(pod.get("spec") or {})
    if ctx.stack.extended_resource_toleration:
        added = [{"key": r, "operator": "Exists", "effect": "NoSchedule"} for r in sorted(pod_gpu_requests(pod))]
        spec["tolerations"] = [*(spec.get("tolerations") or []), *added]
    return spec


def _placement(ctx: Context, pod: Obj, msg: str, chains: dict[str, NodeChain]) -> Finding | None:
    """Every GPU node keeps ``pod`` off by a taint it does not tolerate or a label it selects: the change to the
    pod's owner (or the nodes) that lets it onto them. None when some GPU node admits it (then it waits for GPUs)
    or a node's own fault keeps it off."""
    spec = _as_admitted(ctx, pod)
    views = ctx.views
    blocks = [(v, pod_blocker(spec, v.node)) for v in views]
    if any(b is None for _, b in blocks):
        return None
    taints: dict[tuple[str, str], dict[str, Any]] = {}
    for _, b in blocks:
        if b is not None and b.kind == "taint":
            tolerable = _tolerable(b)
            if len(tolerable) < len(b.taints or (b.detail,)):
                return None  # a node condition's taint: the node's own finding
            taints |= {(str(t["key"]), str(t["effect"])): t for t in tolerable}
    owner = owner_of(pod)
    patch: dict[str, Any] = {}
    evidence = [f"scheduler: {msg}"]
    if taints:
        added = tolerations_for(Blocker(kind="taint", detail={}, taints=tuple(taints.values())))
        patch["tolerations"] = [*(spec.get("tolerations") or []), *added]
        spec["tolerations"] = patch["tolerations"]
        evidence.append(
            "GPU nodes' taints it does not tolerate: " + ", ".join(sorted(taint_text(t) for t in taints.values()))
        )
    after = [(v, pod_blocker(spec, v.node)) for v in views]
    if any(b is None for _, b in after):
        finding = _finding(ctx, pod, owner, "taint", evidence, patch_fix(owner, patch), None)
        return _unadmitted(finding, pod, {key for key, _ in taints})
    selectors = {(str(b.detail["key"]), str(b.detail.get("operator"))): b for _, b in after if b is not None}
    if any(b.kind != "selector" for b in selectors.values()) or len(selectors) != 1:
        return None
    (block,) = selectors.values()
    key = str(block.detail["key"])
    carried = Counter(v.labels[key] for v in views if key in v.labels)
    evidence.append(block.describe().replace("the DaemonSet", "the pod"))
    if carried:
        value = carried.most_common(1)[0][0]
        evidence.append(f"GPU nodes carry {key}: " + ", ".join(f"{k} ({n})" for k, n in carried.most_common(4)))
        if block.detail.get("operator") == "=" and not (spec.get("affinity") or {}).get("nodeAffinity"):
            patch["nodeSelector"] = {**(spec.get("nodeSelector") or {}), key: value}
            return _finding(ctx, pod, owner, "selector", evidence, patch_fix(owner, patch), None)
        text = (
            f"# in {owner.ref}'s pod spec, change the required node affinity on {key} to In [{value}] (the value the "
            "GPU nodes carry)"
        )
        return _finding(ctx, pod, owner, "selector", evidence, None, text)
    if key.startswith("nvidia.com/") and any(c.broken_link == "gfd" for c in chains.values()):
        return None  # feature discovery writes nvidia.com/* labels and is down: its own root, on its nodes
    values = list(block.detail.get("values") or [])
    if block.detail.get("operator") not in ("=", "In") or not values:
        return None
    label = Fix(FixOp.LABEL_NODE, " ".join(v.name for v in views), {key: str(values[0])})
    return _finding(ctx, pod, owner, "label", evidence, label, None)


def _beside(pod: Obj) -> list[dict[str, Any]]:
    """The ``matchLabels`` of ``pod``'s required pod affinity terms on the node itself (topology
    kubernetes.io/hostname): the pods it must run on the same node as."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("podAffinity") or {}
    return [
        dict((term.get("labelSelector") or {}).get("matchLabels") or {})
        for term in affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or ()
        if term.get("topologyKey") == HOSTNAME and (term.get("labelSelector") or {}).get("matchLabels")
    ]


def _companion(ctx: Context, pod: Obj, msg: str) -> Finding | None:
    """A pod that asks for no GPU, bound by required pod affinity to the node of a pod on a GPU node, kept off that
    node by its taint (the module's docstring): the toleration for the pod's owner. None where no pod it must sit
    beside runs on a GPU node, or that node admits it (then something else keeps it off)."""
    wanted = _beside(pod)
    if not wanted or not any(w in msg for w in UNTOLERATED_WORDS):
        return None
    spec = dict(pod.get("spec") or {})
    for view in ctx.views:
        served = next(
            (
                p
                for p in view.workloads
                if p is not pod and any(all(labels_of(p).get(k) == v for k, v in m.items()) for m in wanted)
            ),
            None,
        )
        block = pod_blocker(spec, view.node) if served is not None else None
        if served is None or block is None or block.kind != "taint":
            continue
        tolerable = _tolerable(block)
        if not tolerable or len(tolerable) < len(block.taints or (block.detail,)):
            return None  # a node condition's taint: the node's own finding
        owner = owner_of(pod)
        added = tolerations_for(Blocker(kind="taint", detail={}, taints=tolerable))
        action = patch_fix(owner, {"tolerations": [*(spec.get("tolerations") or []), *added]})
        pod_ref, served_ref = f"{namespace_of(pod)}/{name_of(pod)}", f"{namespace_of(served)}/{name_of(served)}"
        taints = ", ".join(sorted(taint_text(t) for t in tolerable))
        return Finding(
            id="workload.companion-untolerated-taint",
            severity=Severity.ERROR,
            link="node",
            cause=f"pod {pod_ref} ({owner.kind} {owner.name}) asks for no GPU but must run on the same node as "
            f"{served_ref} (a required pod affinity on {HOSTNAME}), which runs on GPU node {view.name}; that node's "
            f"taint {taints} keeps it off, so it stays Pending and the GPU pod it serves goes without it. The taint "
            "is the GPU pool's own: the pod needs its toleration.",
            evidence=(
                f"scheduler: {msg}",
                f"pod {pod_ref} requires pods labelled "
                + " or ".join(",".join(f"{k}={v}" for k, v in m.items()) for m in wanted)
                + f" on its node; {served_ref} runs on {view.name}",
                f"{view.name} taints it does not tolerate: {taints}",
            ),
            fix=ctx.stack.render(action) + f"   # adds the toleration for {taints} to the pods {owner.name} makes",
            node=view.name,
            root=True,
            action=action,
        )
    return None


def _finding(
    ctx: Context,
    pod: Obj,
    owner: Owner,
    kind: str,
    evidence: list[str],
    action: Fix | None,
    text: str | None,
) -> Finding:
    pod_ref = f"{namespace_of(pod)}/{name_of(pod)}"
    causes = {
        "taint": "every GPU node carries a taint the pod does not tolerate, so the scheduler places it nowhere "
        "although GPUs are free; the pod (its owner's template) needs the toleration.",
        "selector": "the pod selects a node label value no GPU node carries, so the scheduler places it nowhere "
        "although GPUs are free; its selector names a value the GPU nodes do not have.",
        "label": "the pod selects a node label no GPU node carries, so the scheduler places it nowhere although GPUs "
        "are free; the GPU nodes need the label (or the pod drops the selector).",
    }
    fix = text if text is not None else ctx.stack.render(action) if action is not None else ""
    return Finding(
        id="workload.untolerated-taint" if kind == "taint" else "workload.node-selector",
        severity=Severity.ERROR,
        link="node",
        cause=f"GPU pod {pod_ref} ({owner.kind} {owner.name}) is Pending: {causes[kind]}",
        evidence=(f"pod {pod_ref} asks for {_asked(pod)}", *evidence),
        fix=fix,
        root=True,
        action=action,
    )


#: The API server's admission plugin that gives a pod the toleration of each extended resource it requests ({key:
#: <resource>, operator: Exists, effect: NoSchedule}; kubernetes plugin/pkg/admission/extendedresourcetoleration),
#: off unless kube-apiserver's --enable-admission-plugins names it: where it runs, a node pool tainted with its
#: resource's name (nvidia.com/gpu) admits the pods that request that resource and keeps the others off.
EXTENDED_RESOURCE_TOLERATION = "ExtendedResourceToleration"


def _unadmitted(finding: Finding, pod: Obj, keys: set[str]) -> Finding:
    """``finding`` with why a taint keyed by a resource the pod requests was not tolerated for it: the API server does
    not run ExtendedResourceToleration (one that runs it admits such a pod with the toleration), which turned on in
    kube-apiserver's --enable-admission-plugins tolerates it for every such pod at once."""
    named = sorted(keys & set(pod_gpu_requests(pod)))
    if not named:
        return finding
    why = (
        f"taint key {', '.join(named)} is the resource the pod requests, and the pod was admitted without its "
        f"toleration: the API server does not run the {EXTENDED_RESOURCE_TOLERATION} admission plugin"
    )
    also = (
        f" Or, for every pod that requests {', '.join(named)}, the API server's {EXTENDED_RESOURCE_TOLERATION} "
        "admission plugin (kube-apiserver --enable-admission-plugins) adds the toleration; a managed cloud's API "
        "server runs it or not as the cloud chose."
    )
    return dataclasses.replace(finding, cause=finding.cause + also, evidence=(*finding.evidence, why))


def _asked(pod: Obj) -> str:
    gpus = pod_gpu_requests(pod)
    if gpus:
        return ", ".join(f"{k}: {v}" for k, v in gpus.items())
    claims = (pod.get("spec") or {}).get("resourceClaims") or []
    return f"{len(claims)} ResourceClaim(s)"


def _slice_taints(ctx: Context) -> tuple[int, list[dict[str, Any]]]:
    """How many GPU devices the GPU DRA drivers publish, and the NoSchedule/NoExecute taints on each of them
    (one list entry per tainted device's first taint)."""
    total, tainted = 0, []
    for s in ctx.snapshot.resource_slices:
        spec = s.get("spec") or {}
        if spec.get("driver") not in GPU_DRA_DRIVERS:
            continue
        for device in spec.get("devices") or []:
            total += 1
            hard = [t for t in device.get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
            if hard:
                tainted.append(dict(hard[0]))
    return total, tainted


def dra_plugin_daemonsets(daemonsets: list[Obj]) -> list[Obj]:
    """The DaemonSets that run a GPU DRA kubelet plugin: NVIDIA's (by its image, `is_dra_plugin`) or gpuchain's."""
    return [d for d in daemonsets if is_dra_plugin(d) or name_of(d) == GPUCHAIN_DRA_DS]


def _claims(ctx: Context, pod: Obj, msg: str, chains: dict[str, NodeChain]) -> Finding | None:
    """A pod with ResourceClaims the scheduler cannot allocate: no GPU device published for DRA on any node (the
    DRA driver's publishing link), or every published device tainted (the claims need a toleration)."""
    if not (pod.get("spec") or {}).get("resourceClaims") or "resourceslices" in ctx.snapshot.absent:
        return None
    pod_ref = f"{namespace_of(pod)}/{name_of(pod)}"
    published = published_devices(ctx.snapshot)
    total, tainted = _slice_taints(ctx)
    if not published:
        if any(c.broken_link in ("driver", "toolkit", "device-plugin") for c in chains.values()):
            return None  # the walk's roots on the GPU nodes explain why nothing is published
        if dra_plugin_daemonsets(ctx.snapshot.daemonsets):
            return None  # a DRA plugin runs: its pods are walked on each node
        action, fix = install_dra(ctx)
        return Finding(
            id="workload.dra-unpublished",
            severity=Severity.ERROR,
            link="device-plugin",
            cause=f"GPU pod {pod_ref} asks for GPUs through ResourceClaims, and no GPU DRA driver publishes a device "
            "in any ResourceSlice (no DRA kubelet plugin is installed), so the scheduler cannot allocate its claims.",
            evidence=(f"scheduler: {msg}", f"ResourceSlices of {', '.join(GPU_DRA_DRIVERS)}: none", f"pod {pod_ref}"),
            fix=fix,
            root=True,
            action=action,
        )
    if tainted and len(tainted) == total:
        keys = Counter(f"{t.get('key')}:{t.get('effect')}" for t in tainted)
        tolerations = [
            {"key": k.rsplit(":", 1)[0], "operator": "Exists", "effect": k.rsplit(":", 1)[1]} for k in sorted(keys)
        ]
        return Finding(
            id="workload.dra-devices-tainted",
            severity=Severity.ERROR,
            link="device-plugin",
            cause=f"GPU pod {pod_ref} asks for GPUs through ResourceClaims, and every GPU device the DRA driver "
            "publishes carries a taint its claims do not tolerate (a DeviceTaintRule, or the driver's taint for an "
            "unhealthy device), so the scheduler allocates none of them.",
            evidence=(
                f"scheduler: {msg}",
                f"{total} published GPU device(s), tainted: " + ", ".join(f"{k} ({n})" for k, n in keys.most_common()),
            ),
            fix="# repair the devices the driver tainted (its unhealthy GPUs: reset or replace them; a "
            "DeviceTaintRule: "
            "kubectl delete devicetaintrule <rule>), or where the pods may use them tainted, add to each request of "
            f"the claim (template) of {pod_ref}: exactly.tolerations: {json.dumps(tolerations, separators=(',', ':'))}",
            root=True,
        )
    return None


def install_dra(ctx: Context) -> tuple[Fix | None, str]:
    """The install that puts a DRA kubelet plugin on the GPU nodes: gpuchain's chart's own (dra.enabled) where
    gpuchain runs, else NVIDIA's DRA driver chart with the driver root of this stack."""
    chart = ctx.stack.chart
    if chart is not None and chart.stack == "gpuchain":
        action = Fix(
            FixOp.INSTALL,
            "",
            {
                "release": chart.release,
                "chart": chart.chart,
                "namespace": ctx.namespace,
                "upgrade": True,
                "flags": "--reuse-values --set dra.enabled=true",
                NOT_SIMULATED: "DRA publishing is not a scenario fact",
            },
        )
        return action, ctx.stack.render(action)
    root = (
        "/run/nvidia/driver"
        if ctx.policy_obj is not None and ctx.policy.driver.enabled
        else (ctx.stack.driver_root or "/")
    )
    action = Fix(
        FixOp.INSTALL,
        "",
        {
            "release": "nvidia-dra-driver-gpu",
            "chart": "nvidia/nvidia-dra-driver-gpu",
            "namespace": "nvidia-dra-driver-gpu",
            "flags": f"--set nvidiaDriverRoot={root}",
            NOT_SIMULATED: "DRA publishing is not a scenario fact",
        },
    )
    return action, ctx.stack.render(action)


def unplaced(ctx: Context, chains: list[NodeChain]) -> tuple[list[Finding], set[int]]:
    """Findings for Pending GPU pods kept off every GPU node by a taint, a selector or unallocatable claims, and
    the pods they explain (by id), which are then no 'Insufficient' case. One finding per owning object."""
    by_node = {c.node: c for c in chains}
    findings: dict[str, Finding] = {}
    explained: set[int] = set()
    if not ctx.views:
        return [], explained
    for pod in ctx.pending:
        msg = unschedulable_message(pod)
        if msg and not gpu_pod(pod) and POD_AFFINITY_WORDS in msg:
            # One look through the GPU nodes' pods per owner: its other replicas wait for the same reason.
            ref = owner_of(pod).ref
            companion = findings.get(ref) or _companion(ctx, pod, msg)
            if companion is not None:
                findings[ref] = companion
                explained.add(id(pod))
            continue
        if not msg or not gpu_pod(pod):
            continue
        if validation_of(ctx, pod) is not None:
            continue  # the operator's validation pod: the validated link's root on its nodes (validation_pending)
        owner = owner_of(pod).ref
        if owner in findings:
            explained.add(id(pod))
            continue
        found = None
        if any(w in msg for w in UNTOLERATED_WORDS):
            # A startup taint nothing removed keeps it off: the node's finding, not a toleration for the pod.
            left = left_startup_taints(ctx, pod, _as_admitted(ctx, pod), msg)
            if left:
                findings |= {f"node/{f.node}": f for f in left if f"node/{f.node}" not in findings}
                explained.add(id(pod))
                continue
        if any(w in msg for w in UNTOLERATED_WORDS) or AFFINITY_WORDS in msg:
            found = _placement(ctx, pod, msg, by_node)
        if found is None and CLAIMS_WORDS in msg:
            found = _claims(ctx, pod, msg, by_node)
        if found is not None:
            findings[owner] = found
            explained.add(id(pod))
    return list(findings.values()), explained

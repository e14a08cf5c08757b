"""GPU pods the kubelet refused at admission for GPUs its node did not announce yet: bound before the device plugin
registered.

The kubelet admits every pod bound to its node against the node's allocatable, and refuses one whose request does not
fit with reason ``OutOf<resource>`` and "Node didn't have enough resource: <resource>, requested: N, used: U, capacity:
C" (kubernetes pkg/kubelet/lifecycle/predicate.go, InsufficientResourcePrefix and the message of
InsufficientResourceError). An extended resource such as nvidia.com/gpu is 0 when the kubelet starts until its device
plugin registers and announces it (its device manager zeroes the resources no plugin serves yet), so a GPU pod bound
to a node in that window is refused: Failed, for good (the kubelet does not admit a refused pod again). kube-scheduler
would not have bound it there (its resource filter saw no GPU); something else did: the pod's own spec.nodeName, or a
provisioner that binds the pods it launched a node for -- Karpenter did until v0.11.0, whose upgrade guide says the
kubelet zeroed the resources it had put on the node and pods now wait for the device plugin (aws/karpenter-provider-aws
website/content/en/v0.11.0/upgrade-guide/_index.md@v0.11.0, `EARLY_BINDERS`).

Where the node now announces that resource (the plugin registered since) and no GPU failed, the refusal was that
window, not a fault of the chain: the repair is the pod made again (a controller has made a new one already; a bare pod
is created again from its manifest), and the binder kept from binding before the plugin registers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuchain.doctor.admission_reasons import OUT_OF
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.links.kubelet_defects import gpu_failed
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, Severity
from gpuchain.doctor.releases import release_of
from gpuchain.kube.gpu_resources import node_gpu_resources, offered_gpus
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN

#: The capacity the kubelet's message gives for the resource ("..., capacity: 0"): 0 is a resource not announced.
CAPACITY = re.compile(r"capacity: (\d+)")
FINDING = "node.gpu-pod-refused-before-plugin"


@dataclass(frozen=True, kw_only=True)
class EarlyBinder:
    """A node provisioner whose releases before ``fixed_in`` bind pods to the nodes they launch themselves."""

    name: str
    labels: tuple[str, ...]  #: node labels that say it launched the node (any of them)
    image: str  #: a regex its controller's image (without tag) matches, whose tag is its release
    fixed_in: str
    source: str
    line: str


EARLY_BINDERS = (
    EarlyBinder(
        name="Karpenter",
        # v1alpha5's Provisioner label, on every node Karpenter launched up to its v1beta1 API (v0.32.0)
        labels=("karpenter.sh/provisioner-name",),
        image=r"(^|/)karpenter/controller$",
        fixed_in="v0.11.0",
        source="aws/karpenter-provider-aws website/content/en/v0.11.0/upgrade-guide/_index.md@v0.11.0",
        line="Previously, Karpenter would register these resources on nodes at creation and they would be zeroed out "
        "by `kubelet` at startup. By allowing the device plugins to register the resources, pods will not bind to the "
        "nodes before any device plugin initialization has occurred.",
    ),
)


def _binder(ctx: Context, view: NodeView) -> tuple[EarlyBinder, str] | None:
    """The provisioner that launched the node and binds pods itself, with the release its controller runs ("" where
    no pod of it is listed); None where none launched it or its controller runs a release that no longer binds."""
    for binder in EARLY_BINDERS:
        if not any(k in view.labels for k in binder.labels):
            continue
        release = ""
        for pod in ctx.snapshot.pods:
            for c in (pod.get("spec") or {}).get("containers") or ():
                repo, _, tag = str(c.get("image") or "").partition("@")[0].rpartition(":")
                if repo and re.search(binder.image, repo):
                    release = tag
        seen, fixed = release_of(release, binder.name), release_of(binder.fixed_in, binder.name)
        if seen is not None and fixed is not None and seen >= fixed:
            return None
        return binder, release
    return None


def _refusals(ctx: Context, view: NodeView) -> list[tuple[Obj, str, str]]:
    """The kubelet's OutOf<GPU resource> Events on workload pods of this node (Event, resource, pod ref), for a resource
    the node did not announce then (capacity 0 in the message) and announces now."""
    offered = set(offered_gpus(view.node))
    live = {(namespace_of(p), name_of(p)) for p in view.workloads}
    out = []
    for e in view.events:
        ref = e.get("involvedObject") or {}
        reason = str(e.get("reason") or "")
        resource = reason.removeprefix(OUT_OF)
        if ref.get("kind") != "Pod" or not reason.startswith(OUT_OF) or resource not in offered:
            continue
        ns, name = str(ref.get("namespace") or "default"), str(ref.get("name") or "")
        capacity = CAPACITY.search(str(e.get("message") or ""))
        if ns == ctx.namespace or (ns, name) in live or (capacity is not None and capacity.group(1) != "0"):
            continue  # an operand's (admission.py reads them), a pod admitted since, or GPUs that were all in use
        out.append((e, resource, f"{ns}/{name}"))
    return out


def refused_before_plugin(ctx: Context, view: NodeView) -> Finding | None:
    """``node.gpu-pod-refused-before-plugin``: GPU pods the kubelet refused (OutOf<GPU resource>) for GPUs the node had
    not announced yet and announces now, with no GPU failure on record. None otherwise."""
    refused = _refusals(ctx, view)
    plugin = view.pod(DEVICE_PLUGIN)
    if not refused or gpu_failed(view, ctx.log(plugin, ctx.container(DEVICE_PLUGIN)) if plugin is not None else ""):
        return None
    event, resource, first = refused[0]
    ns, _, name = first.partition("/")
    refs = sorted({ref for _, _, ref in refused})
    action = Fix.delete_pod(ns, name, **{NOT_SIMULATED: "a pod the kubelet refused is not a scenario fact"})
    binder = _binder(ctx, view)
    more = f" (the same for {', '.join(refs[1:5])})" if len(refs) > 1 else ""
    then = (
        f"; and upgrade {binder[0].name} to {binder[0].fixed_in} or later"
        + (f" (it runs {binder[1]})" if binder[1] else " where it runs an older release")
        + ", which no longer binds pods to the nodes it launches, so kube-scheduler binds them once the device plugin "
        "announces the GPUs"
        if binder is not None
        else "; and let kube-scheduler bind GPU pods (no spec.nodeName set by hand or by a controller), so no pod is "
        "bound before the device plugin announces the GPUs"
    )
    amount = dict(node_gpu_resources(view.node, "allocatable"))[resource]
    return node_finding(
        view,
        fid=FINDING,
        sev=Severity.ERROR,
        link="node",
        cause=f"GPU pod(s) {', '.join(refs[:5])} were bound to the node before its device plugin announced "
        f"{resource}: the kubelet starts with that resource at 0 until the plugin registers, refused them at admission "
        f"(Failed, {event.get('reason')}) and never admits a refused pod again, although the node announces "
        f"{resource} now. kube-scheduler does not bind a pod to a node without the resource, so something else bound "
        "it" + (f": {binder[0].name}, which bound pods itself before {binder[0].fixed_in}." if binder else "."),
        evidence=[
            f"event {event.get('reason')} (kubelet): {event.get('message')}",
            f"node {view.name} now offers {resource} {amount}",
            *(
                (f"node launched by {binder[0].name} ({', '.join(k for k in binder[0].labels if k in view.labels)})",)
                if binder
                else ()
            ),
            *((f"source: {binder[0].source}", f"upgrade guide: {binder[0].line}") if binder else ()),
        ],
        fix=f"{ctx.stack.render(action)}{more}   # recreate the refused pod: its controller (if any) makes a new one, "
        f"a bare pod is created again from its manifest{then}",
        action=action,
    )

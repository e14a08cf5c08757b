"""What a DaemonSet's pod whose log was not read says, read from a sibling's: one template on nodes built alike.

The live doctor reads the log of one running pod per DaemonSet that shows trouble (`snapshot._log_candidates`,
at most `snapshot.MAX_SAMPLE_LOGS` such reads), so a thousand exporters cost one read, not a thousand. An error that
comes from the pod template (a path it mounts, a flag or variable it is given, its image) is in every pod the
DaemonSet controller makes from that template, on every node whose own make-up does not change it: the kubelet
creates each pod from the same template (its controller-revision-hash label names the ControllerRevision it came
from, kubernetes pkg/controller/daemon/daemon_controller.go), and nodes of one pool run the same kubelet, OS image,
kernel, runtime and GPU. So a running pod whose own log was not read says what a read sibling says where both run
ready from one template on nodes alike; where either differs, or its own log was read, it speaks for itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuchain.doctor.context import Context
from gpuchain.doctor.owners import owner_ds
from gpuchain.doctor.pods import pod_state
from gpuchain.doctor.snapshot import PRODUCT
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of

#: The pod labels the DaemonSet controller stamps from the template it made the pod of (kubernetes
#: pkg/apis/apps/types.go DefaultDaemonSetUniqueLabelKey "controller-revision-hash"; the older
#: "pod-template-generation").
TEMPLATE_LABELS = ("controller-revision-hash", "pod-template-generation")
#: What makes two nodes alike for a pod's work: status.nodeInfo's kubelet, OS image, kernel, runtime and
#: architecture, and the GPU model GFD labels.
NODE_INFO = ("kubeletVersion", "osImage", "kernelVersion", "containerRuntimeVersion", "architecture")


@dataclass(frozen=True)
class Sibling:
    """A pod of the same DaemonSet whose log was read, and the node it runs on."""

    pod: Obj
    node: str


def _read_pods(ctx: Context) -> dict[tuple[str, str], list[Obj]]:
    """The pods whose logs the gather step read, by (namespace, owning DaemonSet): worked out once a diagnosis."""
    known = ctx.memo.get("siblings_read")
    if isinstance(known, dict):
        return known
    keys = {(ns, pod) for ns, pod, _ in (*ctx.snapshot.logs, *ctx.snapshot.previous_logs)}
    read: dict[tuple[str, str], list[Obj]] = {}
    for pod in ctx.snapshot.pods if keys else ():
        if (str(namespace_of(pod) or "default"), name_of(pod)) in keys and owner_ds(pod):
            read.setdefault((str(namespace_of(pod) or "default"), owner_ds(pod)), []).append(pod)
    ctx.memo["siblings_read"] = read
    return read


def _template(pod: Obj) -> tuple[object, ...]:
    """What says which template the pod was made from: its template labels and its containers' images."""
    labels = labels_of(pod)
    images = tuple(str(c.get("image", "")) for c in (pod.get("spec") or {}).get("containers") or [])
    return (*(labels.get(k) for k in TEMPLATE_LABELS), images)


def _make_up(ctx: Context, name: str) -> tuple[str, ...] | None:
    """The node's make-up that a pod's work depends on (`NODE_INFO`, its GPU model); None for a node not in view.
    Worked out once a diagnosis for every node."""
    known = ctx.memo.get("siblings_make_up")
    if not isinstance(known, dict):
        known = ctx.memo["siblings_make_up"] = {
            v.name: (
                *(str(((v.node.get("status") or {}).get("nodeInfo") or {}).get(k, "")) for k in NODE_INFO),
                v.labels.get(PRODUCT, ""),
            )
            for v in ctx.views
        }
    return known.get(name)


def _was_read(ctx: Context, pod: Obj, containers: Iterable[str]) -> bool:
    ns = str(namespace_of(pod) or "default")
    return any(
        (ns, name_of(pod), c) in ctx.snapshot.logs or (ns, name_of(pod), c) in ctx.snapshot.previous_logs
        for c in containers
    )


def read_sibling(ctx: Context, pod: Obj, containers: Iterable[str]) -> Sibling | None:
    """A ready pod of ``pod``'s DaemonSet, from the same template on a node built alike, whose log was read, where
    ``pod`` runs ready and none of its own ``containers``' logs was read; None otherwise."""
    names = tuple(containers)
    ds, node = owner_ds(pod), str((pod.get("spec") or {}).get("nodeName") or "")
    # Most DaemonSets have no pod whose log was read (none, on a healthy cluster): nothing to compare then.
    read = _read_pods(ctx).get((str(namespace_of(pod) or "default"), ds), ()) if ds else ()
    if not read or not node or _was_read(ctx, pod, names) or not pod_state(pod).ready:
        return None
    mine = _make_up(ctx, node)
    for other in read:
        there = str((other.get("spec") or {}).get("nodeName") or "")
        if other is pod or there == node or _template(other) != _template(pod) or not pod_state(other).ready:
            continue
        if mine is not None and _make_up(ctx, there) == mine:
            return Sibling(other, there)
    return None

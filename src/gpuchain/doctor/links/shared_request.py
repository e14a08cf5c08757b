"""GPU pods the kubelet refuses at admission because they ask for more than one shared GPU.

With time-slicing's ``failRequestsGreaterThanOne: true`` the device plugin's Allocate refuses any request for more
than one replica of a shared GPU ("request for '<resource>: <n>' too large: maximum request size for shared resources
is 1", NVIDIA/k8s-device-plugin internal/plugin/server.go), and the kubelet fails the pod with UnexpectedAdmissionError
(the plugin's README, "With CUDA Time-Slicing", shows that event for a pod asking for 2). Nothing on the node is
broken and a kubelet restart changes nothing: a replica is a time slot on one GPU, not a share of several, so the pod
asks for 1, or the sharing config lets larger requests through. A pod failed at admission is never retried.
"""

from __future__ import annotations

import re

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.model import Finding, Fix, Severity
from gpuchain.doctor.scheduling import owner_of, resource_paths, resources_fix
from gpuchain.kube.objects import Obj, name_of

TOO_LARGE = "k8s-device-plugin.shared-request-too-large"
#: The resource and the count the refusal names.
ASKED = re.compile(r"request for '([^:']+): (\d+)' too large")


def shared_too_large(ctx: Context, view: NodeView, refused: list[Obj]) -> Finding | None:
    """The finding for GPU pods refused at admission for asking more than one shared GPU (None: another refusal)."""
    said = [(e, m) for e in refused if (m := catalog.find(str(e.get("message", "")), TOO_LARGE)) is not None]
    if not said:
        return None
    event, found = said[0]
    asked = ASKED.search(found.line)
    resource, count = (asked.group(1), asked.group(2)) if asked else ("nvidia.com/gpu", "more than 1")
    named = {str((e.get("involvedObject") or {}).get("name")) for e, _ in said}
    pods = [p for p in view.workloads if name_of(p) in named]
    config = (
        "the device plugin's config (the ConfigMap ClusterPolicy spec.devicePlugin.config.name names)"
        if ctx.policy_obj is not None
        else "the device plugin's config (its chart's config.map)"
    )
    other = (
        f"or let larger requests through: failRequestsGreaterThanOne: false under sharing.timeSlicing in {config} "
        "(the pod then holds that many slots, not more compute)"
    )
    action: Fix | None = None
    owner = owner_of(pods[0]) if pods else None
    ops = [
        {"op": "replace", "path": path, "value": "1"}
        for path, value in (resource_paths(pods[0], owner, resource) if pods and owner else [])
        if value != "1"
    ]
    if owner is not None and ops:
        action = resources_fix(owner, ops)
        fix = ctx.stack.render(action) + f"   # ask for {resource}: 1; {other}; then delete the refused pods"
    else:
        fix = f"# ask for {resource}: 1 in the pods' owners; {other}; then delete the refused pods"
    objects = [e.get("involvedObject") or {} for e, _ in said]
    refs = ", ".join(sorted({f"{o.get('namespace')}/{o.get('name')}" for o in objects}))
    return node_finding(
        view,
        fid="workload.shared-request-too-large",
        sev=Severity.ERROR,
        link="device-plugin",
        cause=f"GPU pods ask for {count} of {resource}, which the device plugin shares (time-slicing with "
        "failRequestsGreaterThanOne), so its Allocate refuses any request above 1 and the kubelet fails them at "
        "admission; nothing on the node is broken, and a failed pod is not retried.",
        evidence=[
            f"event UnexpectedAdmissionError (kubelet): {event.get('message', '')}",
            found.entry.cite(),
            f"pods refused: {refs}",
        ],
        fix=fix,
        action=action,
    )

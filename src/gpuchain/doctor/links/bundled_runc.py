"""A distribution release whose bundled runc cannot start the containers the NVIDIA runtime sets up
(bundled_runc.yaml): the node's release is the broken link, under the toolkit and every operand, and the repair is
the distribution release that bundles a fixed runc.

RKE2 ships its own runc beside its containerd, so the runc a node runs is the one its RKE2 release packages, whatever
the toolkit and the operator are. Where that runc fails to create containers under the nvidia runtime, the stack's
pods that run under it (the device plugin, GFD, the exporter, the validator, their validation init containers) all
fail with StartError -- the kubelet's reason for a container the runtime could not create ("failed to create
containerd task: OCI runtime create failed: ...") -- while the pods that run under runc alone (the driver, the toolkit
itself) run. A node of an affected release that shows that is not a driver or toolkit failure.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import yaml

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.model import NOT_SIMULATED, Finding, Fix, FixOp, Severity
from gpuchain.doctor.node import distribution_of, node_info
from gpuchain.doctor.releases import release_of
from gpuchain.kube.objects import Obj, name_of, namespace_of

#: The finding: the node's distribution release (its bundled runc) is the broken link.
FINDING = "node.bundled-runc-defect"
#: The kubelet's reason for a container the runtime could not create (kubernetes pkg/kubelet/container/sync_result.go
#: ErrRunContainer's "StartError" as the container status reports it), and containerd's words for it.
START_ERROR = "StartError"
CREATE_FAILED = "OCI runtime create failed"


@dataclass(frozen=True, kw_only=True)
class BundledRunc:
    """One distribution release range whose bundled runc fails under the nvidia runtime."""

    id: str
    distribution: str
    affected: tuple[tuple[str, str], ...]
    runc: str
    fixed_runc: str
    cause: str
    source: str
    line: str

    def fixed_for(self, version: str) -> str:
        """The first release of ``version``'s branch that bundles the fixed runc ("" where it is not affected)."""
        seen = release_of(version)
        if seen is None:
            return ""
        for low, high in self.affected:
            first, fixed = release_of(low), release_of(high)
            if first is not None and fixed is not None and first <= seen < fixed:
                return high
        return ""


@functools.cache
def bundled_runc() -> tuple[BundledRunc, ...]:
    """Every entry of bundled_runc.yaml."""
    text = resources.files("gpuchain.doctor").joinpath("bundled_runc.yaml").read_text()
    return tuple(
        BundledRunc(**{**raw, "affected": tuple((str(a), str(b)) for a, b in raw["affected"])})
        for raw in yaml.safe_load(text)
    )


def _start_failed(pod: Obj) -> str:
    """The message of a container of ``pod`` the runtime could not create (StartError, or containerd's words for it
    in its last state), "" where none."""
    status = pod.get("status") or {}
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            ended = state.get("terminated") or {}
            message = str(ended.get("message") or "")
            if ended.get("reason") == START_ERROR or CREATE_FAILED in message:
                return message or START_ERROR
    return ""


def runc_release_defect(ctx: Context, view: NodeView) -> Finding | None:
    """The finding for a node of a distribution release whose bundled runc fails under the nvidia runtime, where the
    stack's pods on it fail to start their containers (StartError); None on other releases or where none does."""
    version = str(node_info(view.node).get("kubeletVersion", ""))
    dist = distribution_of(view.node)
    known = next(
        ((e, fixed) for e in bundled_runc() if e.distribution == dist.name and (fixed := e.fixed_for(version))), None
    )
    if known is None:
        return None
    failed = [(p, said) for p in view.pods if (said := _start_failed(p))]
    if not failed:
        return None
    entry, fixed = known
    suffix = version.partition("+")[2] or f"{dist.name}r1"
    target = f"{fixed}+{suffix}" if "+" in version else fixed
    action = Fix(
        FixOp.NODE,
        view.name,
        {
            "action": f"upgrade {dist.name.upper()} on the node from {version} to {target} or later, which bundles "
            f"runc {entry.fixed_runc} (this release bundles runc {entry.runc}), then {dist.restart}",
            "drain": True,
            NOT_SIMULATED: "the runc a distribution release bundles is a fact of the node no scenario names",
        },
    )
    refs = [f"{namespace_of(p) or ctx.namespace}/{name_of(p)}" for p, _ in failed]
    again = " && ".join(f"kubectl delete pod -n {ref.split('/')[0]} {ref.split('/')[1]}" for ref in refs[:4])
    return node_finding(
        view,
        fid=FINDING,
        sev=Severity.ERROR,
        link="node",
        cause=f"the node runs {dist.name.upper()} {version}, and {entry.cause}",
        evidence=[
            f"pods whose containers the runtime could not create: {', '.join(refs[:5])}",
            f"{START_ERROR}: {failed[0][1]}",
            f"status.nodeInfo.kubeletVersion: {version} (bundles runc {entry.runc}; {target} bundles "
            f"{entry.fixed_runc})",
            f"bundled runc: {entry.id} ({entry.source})",
            f"release note: {entry.line}",
        ],
        fix=f"{ctx.stack.render(action)}; then {again}   # so the stack's pods start again under the fixed runc",
        action=action,
    )

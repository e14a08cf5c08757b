"""A MIG change held by a GPU client pod that never goes. Before it changes the layout the MIG manager pauses the
node's GPU clients (their nvidia.com/gpu.deploy.* labels set to paused-for-mig-change) and waits, up to five minutes
each, for their pods on the node to be gone; a wait that ends without them returns with the node left pending and
the clients paused, and the next try waits the same way (NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go@v0.15.0,
waitForPodsToBeDeleted). A client pod stuck terminating is what it waits for: the finding names that pod and the
change that lets it go."""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.links.drains import terminating
from gpuchain.doctor.model import Finding, Fix, Severity
from gpuchain.kube.objects import Obj, name_of, namespace_of

WHO = "the MIG manager, which stops the node's GPU clients before it changes the MIG layout,"


def client_stuck(ctx: Context, view: NodeView, *, mgr: Obj | None, evidence: list[str]) -> Finding | None:
    """The paused GPU client pod on this node that is stuck terminating, as the root of a pending MIG change; None
    when every paused client is gone or still running (not being deleted)."""
    stuck = [
        p
        for p in view.pods
        if (p.get("metadata") or {}).get("deletionTimestamp") and (mgr is None or name_of(p) != name_of(mgr))
    ]
    if not stuck:
        return None
    held = terminating(ctx, view, stuck[0], who=WHO)
    restart = (
        f"; then restart the MIG manager so it applies the layout again on start "
        f"({ctx.stack.render(Fix.delete_pod(namespace_of(mgr) or ctx.namespace, name_of(mgr)))})"
        if mgr is not None
        else ""
    )
    return node_finding(
        view,
        fid="mig.pending",
        sev=Severity.ERROR,
        link="mig",
        cause=held.cause + " The MIG change stays pending with the clients paused, so the node offers no GPUs.",
        evidence=[*evidence, *held.evidence],
        fix=held.fix + restart,
        action=held.action,
    )
